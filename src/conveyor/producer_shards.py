"""Where the producer sends a job bound for a sharded queue (issue 18, ``core/shards.py``).

Two entry points, one per road of ``producer.py``: ``shard_defaults`` for jobs without options
(their task defaults tuple names the envelope template, so the shard goes into that tuple)
and ``route_job`` for jobs built from options (after their flow record and idempotency key
are known: both decide the shard).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .core.job import Job
from .core.shards import ShardRouter, positional_params
from .task import Task


def shard_defaults(
    tasks: Mapping[str, Task[..., Any]],
    d: tuple[Any, ...],
    args: Any,
    kwargs: Any,
    router: ShardRouter,
) -> tuple[Any, ...]:
    """``d`` (the producer's task defaults) with its logical queue replaced by the shard."""
    task = tasks.get(d[0])
    shard = router.route(
        d[1],
        flowed=task is not None and task.flow is not None,
        key=None,
        args=args or (),
        kwargs=kwargs or {},
        params=positional_params(task.signature if task is not None else None),
    )
    return (d[0], shard, *d[2:])


def route_job(tasks: Mapping[str, Task[..., Any]], job: Job, router: ShardRouter) -> None:
    """Move ``job`` (built for a logical sharded queue) to its shard."""
    task = tasks.get(job.task)
    job.queue = router.route(
        job.queue,
        flowed=job.flow is not None,
        key=job.idempotency_key,
        args=job.args,
        kwargs=job.kwargs,
        params=positional_params(task.signature if task is not None else None),
    )
