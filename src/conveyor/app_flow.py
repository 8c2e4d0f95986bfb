"""The facade's flow-control methods: ``app.queue``, ``app.limits``, ``app.set_limit``.

A mixin of ``Conveyor`` (``app.py``), split out to keep the facade under ~400 lines. It only
reads ``self.runtime``; the logic lives in the producer (queue flows), ``runtime.shards`` and
``monitoring/limits.py`` (docs/flow-control.md, docs/scaling.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .core.flow import ConcurrencyLimit, RateLimit, task_flow
from .core.job import validate_queue_name
from .errors import ValidationError
from .monitoring import limits as limits_mod

if TYPE_CHECKING:
    from .runtime import Runtime


class FlowControlMixin:
    """Queue-wide limits and sharding, and run-time limit overrides, on the app."""

    runtime: Runtime

    def queue(
        self,
        name: str,
        *,
        rate_limit: str | RateLimit | None = None,
        concurrency: int | ConcurrencyLimit | None = None,
        shards: int = 1,
        shard_by: str | Callable[..., Any] | None = None,
    ) -> None:
        """Limit a whole queue: every job enqueued to it from this app shares one token
        bucket (``rate_limit="10/s"``) and at most ``concurrency`` of them run at once,
        on all workers together (docs/flow-control.md).

        ``shards=N`` spreads the queue over N physical queues (N hash slots in Redis
        Cluster); ``shard_by`` (an argument name or a callable over the arguments) keeps
        the jobs of one key in one shard, in order (docs/scaling.md)."""
        validate_queue_name(name)
        flow = task_flow(rate_limit, concurrency, None)
        if shards != 1 and flow is not None:
            raise ValidationError(
                "shards",
                "a sharded queue takes no queue-wide rate_limit or concurrency (each shard"
                " would enforce its own); declare the limit on the tasks instead, whose jobs"
                " then all go to shard 0 (docs/scaling.md)",
            )
        for limit in (flow.rate_limit, flow.concurrency) if flow else ():
            if limit is not None and limit.key is not None:  # first: a refused call changes nothing
                raise ValidationError("queue", "queue limits take no key (use a task's limits)")
        self.runtime.shards.declare(name, shards, shard_by, self.runtime.id_rng.randrange(64))
        if flow is None:
            self.runtime.producer.queue_flows.pop(name, None)
        else:
            self.runtime.producer.queue_flows[name] = flow

    def limits(self) -> dict[str, Any]:
        """Declared limits, run-time overrides, bucket tokens, running per key, waiting per
        group (``monitoring/limits.py``)."""
        return limits_mod.limits(self.runtime)

    def set_limit(self, name: str, value: str | int | None, burst: float | None = None) -> None:
        """Change a limit at run time, for every worker, without a restart: ``rate:<task>``
        takes ``"10/s"``, ``conc:<task>`` an integer; ``None`` restores the declared one."""
        limits_mod.set_limit(self.runtime, name, value, burst)
