"""Flow control for operators on Redis (issue 15): run-time limits and what waits, per queue.

Limits live per queue (``<p>:{q}:f:limits``: every key a claim reads is in its queue's slot),
so ``flow_set_limit`` writes the override into every known queue, one atomic script per queue
(lua/flow_limit.lua: the new limit and the waiting groups put back in line, in the same step
as far as any claim of that queue can tell). A queue that holds no job yet must get it too:
each override is also kept in one global hash (``<p>:flow:limits``, name -> ``[version, spec
or null]``, the version from ``<p>:flow:seq``), written BEFORE the known queues are read, and
a process registering a new queue (``RedisBase.register``) adds it to ``<p>:queues`` BEFORE it
copies the global hash into it (``seed``): whichever side comes second sees the other's write.
Every per-queue write carries the version and a queue keeps only the newest (``f:limitv``), so
the copy and the operator's own write may land in either order. ``flow_status`` reads the
flow keys of every queue (SCAN of the buckets and slots: an operator's read, never a claim's).
``adopt`` carries the overrides of the previous layout (per queue only) into the global hash.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from .keys import KeySchema

STATUS_BATCH = 1000  # keys read per pipeline by flow_status


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
        values = None if spec is None else [float(v) for v in spec]
        raw = "" if values is None else orjson.dumps(values).decode()
        version = int(self.client.incr(self.keys.flow_seq))
        self.client.hset(self.keys.flow_overrides, name, orjson.dumps([version, values]))
        for queue in self.known_queues():  # read after the global write: see the docstring
            self.runner.run("flow_limit", self.qkeys(queue), [name, raw, version])

    def flow_status(self, now: float) -> dict[str, Any]:
        """Run-time limits, bucket tokens, running jobs per slot, waiting jobs per group."""
        out: dict[str, Any] = {"limits": {}, "buckets": {}, "running": {}, "groups": []}
        for queue in self.known_queues():
            f = self.keys.flow(queue, "")
            for name, raw in self.client.hgetall(f + "limits").items():
                out["limits"][name.decode()] = orjson.loads(raw)
            for name, tokens in self._each(f, "tb:", lambda p, k: p.hget(k, "tokens")):
                out["buckets"][name] = round(float(tokens or 0), 3)
            for name, members in self._each(f, "slot:", lambda p, k: p.smembers(k)):
                out["running"][name] = sorted(m.decode() for m in members)
            why = {g.decode(): w.decode() for g, w in self.client.hgetall(f + "why").items()}
            for group, n in self._each(f, "g:", lambda p, k: p.zcard(k)):
                out["groups"].append(
                    {"queue": queue, "group": group, "waiting": int(n), "why": why.get(group)}
                )
        for name, (_, values) in global_overrides(self.client, self.keys).items():
            if values is None:  # the operator's intent wins over a queue's copy
                out["limits"].pop(name, None)
            else:
                out["limits"][name] = values
        out["groups"].sort(key=lambda g: (g["queue"], g["group"]))
        return out

    def _each(
        self, f: str, kind: str, read: Callable[[Any, bytes], Any]
    ) -> Iterator[tuple[str, Any]]:
        """(name, value) of every ``<f><kind><name>`` key, read ``STATUS_BATCH`` keys per
        pipeline (100,000 groups: 100 round trips, not 100,000)."""
        keys = self.client.scan_iter(match=f + kind + "*", count=STATUS_BATCH)
        while batch := list(itertools.islice(keys, STATUS_BATCH)):
            pipe = self.client.pipeline(transaction=False)
            for key in batch:
                read(pipe, key)
            for key, value in zip(batch, pipe.execute(), strict=True):
                yield key.decode()[len(f) + len(kind) :], value


def global_overrides(client: Any, keys: KeySchema) -> dict[str, tuple[int, list[float] | None]]:
    """Every run-time override as operators last set it: name -> (version, spec or None)."""
    out: dict[str, tuple[int, list[float] | None]] = {}
    for name, raw in client.hgetall(keys.flow_overrides).items():
        version, values = orjson.loads(raw)
        out[name.decode()] = (int(version), values)
    return out


def seed(broker: Any, queues: list[str]) -> None:
    """Copy the run-time overrides into queues being registered (``RedisBase.register``,
    called after their SADD to ``<p>:queues``): an override set before a queue held its
    first job applies to it. One HGETALL when no override was ever set."""
    overrides = global_overrides(broker.client, broker.keys)
    for queue in queues:
        for name, (version, values) in overrides.items():
            raw = "" if values is None else orjson.dumps(values).decode()
            broker.runner.run("flow_limit", broker.qkeys(queue), [name, raw, version])


def adopt(broker: Any) -> None:
    """Upgrade: copy the overrides the previous version kept only per queue into the global hash.

    That version wrote ``f:limits`` of the queues it knew and nothing else, so a queue created
    after the upgrade would miss them. An old entry is an ``f:limits`` field without an
    ``f:limitv`` version (this version always writes one). Per name the value most queues hold
    wins (a tie: the first queue by name), stored with HSETNX at version 0, older than any
    operator's write (``<p>:flow:seq`` starts at 1): a newer override is never replaced, here
    or in a queue, and a second run changes nothing. Every queue then gets the version-0 entries
    (``flow_limit`` ignores them where a newer one is held). Runs once per process at its first
    registration; ``<p>:flow:adopted`` makes later processes skip the scan (one EXISTS)."""
    client, keys = broker.client, broker.keys
    if client.exists(keys.flow_adopted):
        return
    queues = broker.known_queues()
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        pipe.hgetall(keys.flow(queue, "limits"))
        pipe.hgetall(keys.flow(queue, "limitv"))
    replies = pipe.execute()
    chosen = _majority(zip(replies[0::2], replies[1::2], strict=True))
    for name, raw in chosen.items():
        client.hsetnx(keys.flow_overrides, name, orjson.dumps([0, orjson.loads(raw)]))
    for name, (version, values) in global_overrides(client, keys).items():
        if version == 0 and values is not None:  # a newer write already reached every queue
            raw = orjson.dumps(values).decode()
            for queue in queues:
                broker.runner.run("flow_limit", broker.qkeys(queue), [name, raw, 0])
    client.set(keys.flow_adopted, "1")


def _majority(per_queue: Iterator[tuple[dict[bytes, bytes], dict[bytes, bytes]]]) -> dict[str, str]:
    """name -> the JSON spec most queues hold among unversioned entries (queues in name order:
    a tie goes to the first); an entry that is not a list of numbers is skipped."""
    seen: dict[str, dict[str, list[int]]] = {}  # name -> raw -> [count, -first position]
    for position, (limits, versions) in enumerate(per_queue):
        for field, raw in limits.items():
            if field in versions or not _valid(raw):
                continue
            tally = seen.setdefault(field.decode(), {}).setdefault(raw.decode(), [0, -position])
            tally[0] += 1
    return {name: max(values, key=lambda r: values[r]) for name, values in seen.items()}


def _valid(raw: bytes) -> bool:
    """Whether a stored override parses as a list of numbers (hostile data is left alone)."""
    try:
        values = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(values, list) and all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in values
    )
