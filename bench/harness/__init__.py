"""Benchmark harness: Conveyor against Celery, RQ, Dramatiq, arq, SAQ and Huey on one Redis.

Run ``python -m bench.harness --help`` (with ``.bench-venv/bin/python``) or ``bash bench/run.sh``.
This package must stay importable with the standard library alone: :mod:`.producer` runs on
every system's own interpreter (including the project's ``.venv`` for Conveyor).
"""
