"""Flow control for operators on Redis (issue 15): run-time limits and what waits, per queue.

Limits live per queue (``<p>:{q}:f:limits``: every key a claim reads is in its queue's slot),
so ``flow_set_limit`` writes the override into every known queue, one atomic script per queue
(lua/flow_limit.lua: the new limit and the waiting groups put back in line, in the same step
as far as any claim of that queue can tell). ``flow_status`` reads the
flow keys of every queue (SCAN of the buckets and slots: an operator's read, never a claim's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from .keys import KeySchema


class FlowAdminMixin:
    """``flow_set_limit`` / ``flow_status`` of RedisBroker."""

    keys: KeySchema
    client: Any
    known_queues: Callable[[], list[str]]  # the broker's
    qkeys: Callable[[str], tuple[str, ...]]
    runner: Any  # scripts.ScriptRunner

    def flow_set_limit(self, name: str, spec: list[float] | None) -> None:
        """Override the limit of a limiter (``rate:<task>``) or one bucket / slot; None clears.

        Parked groups of every queue are put back in line (a raised concurrency limit)."""
        raw = "" if spec is None else orjson.dumps([float(v) for v in spec]).decode()
        for queue in self.known_queues():
            self.runner.run("flow_limit", self.qkeys(queue), [name, raw])

    def flow_status(self, now: float) -> dict[str, Any]:
        """Run-time limits, bucket tokens, running jobs per slot, waiting jobs per group."""
        out: dict[str, Any] = {"limits": {}, "buckets": {}, "running": {}, "groups": []}
        for queue in self.known_queues():
            f = self.keys.flow(queue, "")
            for name, raw in self.client.hgetall(f + "limits").items():
                out["limits"][name.decode()] = orjson.loads(raw)
            for key in self.client.scan_iter(match=f + "tb:*", count=1000):
                tokens = self.client.hget(key, "tokens")
                out["buckets"][key.decode()[len(f) + 3 :]] = round(float(tokens or 0), 3)
            for key in self.client.scan_iter(match=f + "slot:*", count=1000):
                members = sorted(m.decode() for m in self.client.smembers(key))
                out["running"][key.decode()[len(f) + 5 :]] = members
            why = {g.decode(): w.decode() for g, w in self.client.hgetall(f + "why").items()}
            for key in self.client.scan_iter(match=f + "g:*", count=1000):
                group = key.decode()[len(f) + 2 :]
                out["groups"].append(
                    {
                        "queue": queue,
                        "group": group,
                        "waiting": int(self.client.zcard(key)),
                        "why": why.get(group),
                    }
                )
        out["groups"].sort(key=lambda g: (g["queue"], g["group"]))
        return out
