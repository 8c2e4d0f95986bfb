"""Shared plumbing of the Redis broker: connection, scripts, error mapping, queue lookups.

``RedisBase`` is the base of the broker's job-store parts (transitions in ``broker.py``, reads
in ``reads.py``); the side stores in ``side.py`` hold one instead of inheriting it. Every
public method is wrapped by ``guarded``, which turns connection trouble into
``BrokerUnavailable`` and Redis's ``OOM`` refusals into ``StorageFull``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    ClusterDownError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ...config import Retention
from ...core.cache import BoundedCache
from ...core.job import Job, validate_queue_name
from ...errors import (
    BrokerAuthError,
    BrokerConfigError,
    BrokerUnavailable,
    DecodeError,
    StorageFull,
)
from . import codec, conn, flowadmin, fmtgate
from .keys import RUN, KeySchema
from .scripts import ScriptRunner
from .waker import Waker

if TYPE_CHECKING:
    from .idlequeues import IdleQueues

P = ParamSpec("P")
R = TypeVar("R")

_REFUSED = (AuthenticationError, NoPermissionError)
_BAD_CONFIG = re.compile(r"DB index is out of range|invalid DB index|SELECT is not allowed", re.I)
_UNAVAILABLE = (
    RedisConnectionError,
    RedisTimeoutError,
    BusyLoadingError,
    ClusterDownError,
    ReadOnlyError,
    TryAgainError,
)
_QUEUE_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,100}\Z")  # \Z: "$" would accept a final "\n"
WHERE_MAX = 100_000


def guarded(fn: Callable[P, R]) -> Callable[P, R]:
    """Map redis-py connection, timeout, loading and failover errors to ``BrokerUnavailable``;
    rejected credentials and configuration to ``BrokerAuthError`` / ``BrokerConfigError``."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except _REFUSED as exc:  # before _UNAVAILABLE: AuthenticationError is a ConnectionError
            raise refused(exc) from exc
        except _UNAVAILABLE as exc:
            raise BrokerUnavailable(f"Redis is unavailable: {exc}") from exc
        except OutOfMemoryError as exc:
            raise StorageFull(
                f"Redis is out of memory (maxmemory reached, writes refused): {exc}"
            ) from exc
        except ResponseError as exc:
            if _BAD_CONFIG.search(str(exc)):
                raise refused(exc) from exc
            raise

    return wrapper


def refused(exc: Exception) -> BrokerConfigError:
    """The permanent error for a refused connection: fix the URL or the server, do not retry."""
    if isinstance(exc, AuthenticationError | NoPermissionError):
        return BrokerAuthError(
            f"Redis refused the credentials: {exc} (check the password / user in the broker URL)"
        )
    return BrokerConfigError(f"Redis refused the configuration: {exc} (check the broker URL)")


def token_queue(token: str) -> str | None:
    """The queue named in a fencing token ``"<n>:<queue>"``; None for anything malformed."""
    if type(token) is not str:
        return None
    number, sep, queue = token.partition(":")
    if not sep or not number.isdigit():
        return None
    if queue in _GOOD_QUEUES:  # one regex match per queue name, not per token
        return queue
    if not _QUEUE_RE.match(queue):
        return None
    return _GOOD_QUEUES.put(queue, queue)


_GOOD_QUEUES: BoundedCache[str, str] = BoundedCache(10_000)


class RedisBase:
    """Connection, key schema, script runner and the queue registry."""

    url: str
    retention: Retention

    def __init__(self, url: str, retention: Retention | None = None) -> None:
        self.url = url
        self.retention = retention or Retention()
        self._conn = conn.acquire(url)
        self.keys = KeySchema(self._conn.prefix)
        self._runner: ScriptRunner | None = None
        self._where: BoundedCache[str, str] = BoundedCache(WHERE_MAX)
        self._qkeys: BoundedCache[str, tuple[str, ...]] = BoundedCache(10_000)
        self._waker = Waker(self._push_global_wake)  # no thread until Cluster mode needs one
        self._idle: IdleQueues | None = None  # multi-queue claims: queues known empty, lazily
        self.gate = fmtgate.FormatGate()  # may enqueue write fresh ready members (fmtgate.py)

    # ------------------------------------------------------------------ plumbing
    @property
    def client(self) -> Any:
        """The redis-py client (Cluster mode detected and start-up checks run on first use)."""
        conn.ensure_ready(self._conn)
        return self._conn.client

    @property
    def cluster(self) -> bool:
        """True when talking to a Redis Cluster."""
        conn.ensure_ready(self._conn)
        return self._conn.cluster

    @property
    def runner(self) -> ScriptRunner:
        """The script runner bound to the current client."""
        client = self.client
        runner = self._runner
        if runner is None or runner.client is not client:
            shared = self._conn
            with shared.lock:
                if shared.runner is None or shared.runner.client is not client:
                    if shared.runner is not None:
                        shared.runner.close()
                    shared.runner = ScriptRunner(client)
                runner = self._runner = shared.runner
        return runner

    def qkeys(self, queue: str) -> tuple[str, ...]:
        """KEYS of a job script for ``queue`` (validated: it becomes a hash tag); cached."""
        keys = self._qkeys.get(queue)
        if keys is None:
            validate_queue_name(queue)
            keys = self._qkeys.put(queue, tuple(self.keys.queue_keys(queue)))
        return keys

    def fresh_members(self) -> bool:
        """True when enqueue may write fresh ready members ``<seq>.<id>`` (every worker reads
        them: ``<p>:format``, fmtgate.py); read at most every 30 s. Call it before the first
        ``register`` of a process: a fresh deployment is one with nothing registered yet."""
        gate = self.gate
        if gate.due():
            gate.learn(fmtgate.read(self))
        return gate.on

    def remember(self, job_id: str, queue: str) -> None:
        """Cache which queue a job lives in (ids never move between queues)."""
        self._where.put(job_id, queue)

    def known_queues(self) -> list[str]:
        """Every registered queue, sorted."""
        return sorted(q.decode() for q in self.client.smembers(self.keys.queues))

    def register(self, queues: Iterable[str]) -> None:
        """Add queues to the registry (once per process; ``flush_all`` resets it)."""
        fresh = [q for q in queues if q not in self._conn.registered]
        if fresh:
            if not self._conn.registered:  # this process's first: an upgrade's overrides
                flowadmin.adopt(self)
            self.client.sadd(self.keys.queues, *fresh)
            flowadmin.seed(self, fresh)  # run-time limits set before these queues existed
            self._conn.registered.update(fresh)

    def wake_all(self) -> None:
        """Cluster mode: wake workers that block on the global marker (several queues).

        Returns at once: the push goes out on the waker's thread, coalesced (waker.py), so an
        enqueue costs the caller one round trip, not two (issue 18)."""
        if self.cluster:
            self._waker.wake()

    def _push_global_wake(self) -> None:
        """LPUSH + LTRIM of the global wake-up list in one round trip (the waker's thread)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.lpush(self.keys.global_wake, "1")
        pipe.ltrim(self.keys.global_wake, 0, 15)
        pipe.execute()

    # ------------------------------------------------------------------ reading jobs
    def fetch(self, job_id: str) -> tuple[str, dict[bytes, bytes]] | None:
        """(queue, hash) of a job, using the id cache, else looking in every queue."""
        cached = self._where.get(job_id)
        if cached is not None:
            fields = self.fetch_many([(cached, job_id)])[0]
            if fields:
                return cached, fields
        queues = self.known_queues()
        for queue, fields in zip(
            queues, self.fetch_many([(q, job_id) for q in queues]), strict=True
        ):
            if fields:
                self.remember(job_id, queue)
                return queue, fields
        return None

    def fetch_many(self, items: Sequence[tuple[str, str]]) -> list[dict[bytes, bytes]]:
        """Job hashes (with ``payload`` added) of (queue, id) pairs in one pipeline.

        An empty dict where the job does not exist.
        """
        if not items:
            return []
        pipe = self.client.pipeline(transaction=False)
        for queue, job_id in items:
            pipe.hgetall(self.keys.job(queue, job_id))
            pipe.hget(self.keys.queue_key(queue, "payloads"), job_id)
            pipe.hget(self.keys.queue_key(queue, RUN), job_id)
        replies = pipe.execute()
        out = []
        for fields, payload, run in zip(replies[::3], replies[1::3], replies[2::3], strict=True):
            if fields and payload is not None:
                fields[b"payload"] = payload
            if fields:
                codec.run_overlay(fields, run)
            out.append(fields)
        return out

    @staticmethod
    def decode_lenient(fields: dict[bytes, bytes], queue: str, job_id: str) -> Job:
        """Decode a job hash; an undecodable one becomes a salvaged Job that says so."""
        try:
            job = codec.job_from_hash(fields, queue)
        except DecodeError as exc:
            return codec.salvage(fields, queue, job_id, str(exc))
        job.id = job_id
        return job
