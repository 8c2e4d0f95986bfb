"""Sharded queues (issue 18): one logical queue spread over N physical queues, pure logic only.

``app.queue("events", shards=8)`` makes ``events`` a *logical* queue of eight physical ones
(its shards). Every shard is a complete queue with its own keys; in Redis Cluster its hash tag
is its own name, so the shards live in different hash slots and, with the names chosen here,
on different masters. This module decides:

* the shard names (``shard_names``): ``events.shard0`` … ``events.shard7``, each name salted
  (``events.shard3.12``) until its Redis hash slot falls near the middle of the shard's own
  1/N band of the 16,384 slots, so the shards are spread evenly over a cluster whose masters
  own equal slot ranges (``redis-cli --cluster create`` does that). The names are a pure function of
  (logical name, N): every producer and worker process computes the same ones;
* where a job goes (``ShardRouter``): jobs with flow control (rate limits, concurrency,
  fair_by, unique slots) all go to shard 0, so their limits stay global; jobs with an
  idempotency key go to the shard their key hashes to (a duplicate always meets the first
  job); jobs of a queue declared with ``shard_by`` go to the shard their key hashes to (order
  per key); the rest round-robin, one pick per ``enqueue`` call (a batch stays in one shard:
  one script call, atomic, and allowed in Redis Cluster);
* the order a worker reads them (``ShardedSelector``): weighted round-robin over the logical
  queues as before, each logical queue expanded to its shards starting at a shard that rotates
  on every claim, so no shard is starved and one claim costs at most one call per shard;
* how per-queue counts fold back into one row per logical queue (``fold_counts``).
"""

from __future__ import annotations

import inspect
import itertools
import re
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..errors import ValidationError
from .job import validate_queue_name
from .queues import QueueSelector

#: The most shards one logical queue may have (a claim costs up to one call per shard).
MAX_SHARDS = 64
#: Redis Cluster's hash slot count.
SLOTS = 16384
_SHARD_RE = re.compile(r"^(?P<logical>.+)\.shard(?P<index>[0-9]+)(?:\.[0-9]+)?\Z")
#: "shard<NN>.<salt>" takes at most this many characters after the logical name
_SUFFIX_MAX = len(".shard63.99999")


def _crc16_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return table


_TABLE = _crc16_table()


def hash_slot(tag: str) -> int:
    """Redis Cluster's slot of a key whose hash tag is ``tag`` (CRC16/XMODEM mod 16384)."""
    crc = 0
    for byte in tag.encode():
        crc = ((crc << 8) & 0xFFFF) ^ _TABLE[((crc >> 8) ^ byte) & 0xFF]
    return crc % SLOTS


@lru_cache(maxsize=256)
def shard_names(logical: str, shards: int) -> tuple[str, ...]:
    """The physical queue names of ``logical`` split into ``shards`` (see the module doc)."""
    names = []
    for i in range(shards):
        base = f"{logical}.shard{i}"
        # near the middle of the shard's band: then any equal split of the slots over the
        # masters gives each master its proportional share (a band edge may cross masters)
        mid, spread = (2 * i + 1) * SLOTS // (2 * shards), max(1, SLOTS // shards // 16)
        name = base
        for salt in range(1, 1000 * shards):
            if abs(hash_slot(name) - mid) <= spread:
                break
            name = f"{base}.{salt}"
        else:  # pragma: no cover - CRC16 reaches every band long before this
            name = base
        names.append(name)
    return tuple(names)


def parse_shard(name: str) -> tuple[str, int] | None:
    """``("events", 3)`` for a shard name like ``events.shard3`` or ``events.shard3.12``."""
    m = _SHARD_RE.match(name)
    return (m["logical"], int(m["index"])) if m else None


def key_index(key: str, shards: int) -> int:
    """The shard a routing key maps to: stable across processes (CRC32, not ``hash()``)."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) % shards


ShardBy = str | Callable[..., Any]


@dataclass
class ShardedQueue:
    """One logical queue: its name, its shard names, how producers pick a shard."""

    name: str
    names: tuple[str, ...]
    shard_by: ShardBy | None = None
    start: int = 0
    _rr: Iterator[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._rr = itertools.count(self.start)

    @property
    def shards(self) -> int:
        """How many shards."""
        return len(self.names)

    def next_round_robin(self) -> str:
        """The next shard in round-robin order (``itertools.count``: atomic under the GIL)."""
        return self.names[next(self._rr) % len(self.names)]

    def by_key(self, key: str) -> str:
        """The shard of a routing key."""
        return self.names[key_index(key, len(self.names))]

    def key_of(self, args: Sequence[Any], kwargs: Mapping[str, Any], params: Sequence[str]) -> str:
        """The routing key of a job's arguments (``shard_by``); ``params``: the task's
        positional parameter names, to find a ``shard_by`` argument passed by position."""
        by = self.shard_by
        if callable(by):
            value = by(*args, **kwargs)
        elif by is None:
            raise ValueError("key_of: this queue has no shard_by")
        elif by in kwargs:
            value = kwargs[by]
        elif by in params and params.index(by) < len(args):
            value = args[params.index(by)]
        else:
            raise ValidationError(
                "shard_by", f"queue {self.name!r} routes by argument {by!r}, which this job lacks"
            )
        return str(value)


@lru_cache(maxsize=1024)
def positional_params(signature: inspect.Signature | None) -> tuple[str, ...]:
    """The names of a task's parameters that can be passed by position (``shard_by``)."""
    if signature is None:
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(n for n, p in signature.parameters.items() if p.kind in kinds)


def check_shards(name: str, shards: object) -> int:
    """Validate a ``shards=`` value for queue ``name``."""
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= MAX_SHARDS:
        raise ValidationError("shards", f"must be an integer from 1 to {MAX_SHARDS}")
    validate_queue_name(name)
    if parse_shard(name) is not None:
        raise ValidationError("queue", f"{name!r} is a shard name; shard the logical queue")
    if len(name) + _SUFFIX_MAX > 100:
        raise ValidationError("queue", f"a sharded queue name must be at most {100 - _SUFFIX_MAX}")
    return shards


class ShardMap:
    """The sharded queues one app declares (``app.queue(name, shards=N)``)."""

    def __init__(self) -> None:
        self.queues: dict[str, ShardedQueue] = {}

    def __bool__(self) -> bool:
        return bool(self.queues)

    def declare(self, name: str, shards: int, shard_by: ShardBy | None, start: int = 0) -> None:
        """Make ``name`` a logical queue of ``shards`` shards (1: a plain queue again)."""
        check_shards(name, shards)
        if shard_by is not None and not (callable(shard_by) or isinstance(shard_by, str)):
            raise ValidationError("shard_by", "must be an argument name or a callable")
        if shards == 1:
            if shard_by is not None:
                raise ValidationError("shard_by", "needs shards > 1")
            self.queues.pop(name, None)
            return
        names = shard_names(name, shards)
        self.queues[name] = ShardedQueue(name, names, shard_by, start % shards)

    def get(self, name: str) -> ShardedQueue | None:
        """The sharded queue named ``name``, if ``name`` is a logical sharded queue."""
        return self.queues.get(name)

    def physical(self, names: Iterable[str]) -> list[str]:
        """``names`` with every logical sharded queue replaced by its shards."""
        out: list[str] = []
        for name in names:
            sq = self.queues.get(name)
            out.extend(sq.names if sq else (name,))
        return out

    def members(self, name: str) -> list[str]:
        """The physical queues an operator's action on ``name`` reaches: a sharded queue's
        shards and its own name (jobs stored before it was sharded); else ``[name]``."""
        sq = self.queues.get(name)
        return [*sq.names, name] if sq else [name]

    def logical(self, name: str) -> str:
        """The logical queue a physical queue belongs to (itself when not a shard)."""
        parsed = parse_shard(name)
        if parsed is None:
            return name
        sq = self.queues.get(parsed[0])
        if sq is not None and name in sq.names:
            return sq.name
        # a shard of a queue this process does not declare (a dashboard run from a URL)
        return parsed[0]

    def selector(self, queues: list[tuple[str, int]], strict: bool = False) -> QueueSelector:
        """The worker's queue selector: a plain one unless some queue is sharded."""
        if any(name in self.queues for name, _ in queues):
            return ShardedSelector(queues, strict, self)
        return QueueSelector(queues, strict)


class ShardRouter:
    """Picks the shard of each job of ONE enqueue call (a batch shares its round-robin pick)."""

    def __init__(self, shard_map: ShardMap) -> None:
        self.map = shard_map
        self._picks: dict[str, str] = {}

    def route(
        self,
        logical: str,
        *,
        flowed: bool,
        key: str | None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        params: Sequence[str] = (),
    ) -> str:
        """The physical queue of a job bound for ``logical`` (itself when not sharded).

        ``flowed``: the job has flow control (shard 0 keeps its limits global); ``key``: its
        idempotency key (the shard of the key, so duplicates meet)."""
        sq = self.map.queues.get(logical)
        if sq is None:
            return logical
        if flowed:
            return sq.names[0]
        if key is not None:
            return sq.by_key(key)
        if sq.shard_by is not None:
            return sq.by_key(sq.key_of(args, kwargs or {}, params))
        pick = self._picks.get(logical)
        if pick is None:
            pick = self._picks[logical] = sq.next_round_robin()
        return pick


class ShardedSelector(QueueSelector):
    """Weighted round-robin over logical queues (``QueueSelector``); each sharded one expanded
    to its shards, the first shard rotating on every expansion (every shard leads once per N
    claims, none is starved), then the logical name itself (jobs stored before the queue was
    sharded)."""

    def __init__(self, queues: list[tuple[str, int]], strict: bool, shard_map: ShardMap) -> None:
        super().__init__(queues, strict)
        self._logical = QueueSelector(queues, strict)
        self.shard_map = shard_map
        #: every physical queue served (``wait_for_work``, the worker's ``queues``)
        shards = [q for name, _ in queues for q in shard_map.physical([name]) if q != name]
        self.names = shards + [name for name, _ in queues]
        self._turn: dict[str, int] = {}

    def order(self) -> list[str]:
        """The physical queue order for the next claim."""
        out: list[str] = []
        tail: list[str] = []
        for name in self._logical.order():
            sq = self.shard_map.queues.get(name)
            if sq is None:
                out.append(name)
                continue
            turn = self._turn.get(name, 0)
            self._turn[name] = (turn + 1) % sq.shards
            out.extend(sq.names[turn:] + sq.names[:turn])
            tail.append(name)
        return out + tail


def fold_counts(
    counts: Mapping[str, Mapping[str, int]], shard_map: ShardMap | None = None
) -> dict[str, dict[str, Any]]:
    """Counts per physical queue -> counts per logical queue; a sharded queue's entry sums
    its shards' counts and keeps them under ``"shards"`` (name -> counts)."""
    smap = shard_map or ShardMap()
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(counts):
        logical = smap.logical(name)
        if logical == name:
            out.setdefault(name, {}).update(counts[name])
            continue
        entry = out.setdefault(logical, {})
        for state, n in counts[name].items():
            entry[state] = entry.get(state, 0) + n
        entry.setdefault("shards", {})[name] = dict(counts[name])
    return out
