"""Task modules for the peer job systems, one per system (``<system>_tasks.py``).

Each module is imported twice, by different processes and always with the peer's own venv:

* by the peer's worker CLI (``celery -A``, ``rq worker``, ``dramatiq``, ``arq``, ``saq``,
  ``huey_consumer``), which needs the task definitions, and
* by :mod:`bench.harness.producer`, which needs the client side: ``make_client(redis_url)``
  returning an object with ``enqueue(n, sleep_s, t_enq)``, optionally
  ``enqueue_many(items)``, and ``close()`` (``async`` methods plus ``is_async = True`` for
  asyncio systems).

Every task body is :func:`bench.peer_tasks.body.run_sync` / ``run_async``, so every system runs
exactly the same job.
"""
