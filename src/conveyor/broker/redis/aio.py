"""The Redis broker's native async client: ``enqueue_async`` and ``watch_async``.

Async producers (``await task.enqueue_async(...)``, ``await handle.wait_async()``) talk to
Redis through ``redis.asyncio`` on the caller's event loop, never blocking it and never taking
a thread. They run the very same Lua scripts with the same KEYS/ARGV (``RedisBroker.enqueue_plan``
/ ``enqueue_results``, ``scriptargs.py``) and wait on the queue's event stream as the
synchronous ``wait_change`` does (``lifecycle.scan_entries``).

One ``redis.asyncio`` client per event loop (a client is bound to the loop that opened its
connections), created on first use for plain ``redis://`` / ``rediss://`` URLs. Each is closed
explicitly (no ``unclosed Connection`` ResourceWarning at shutdown): when its loop shuts down
(a small async generator started on the loop, which ``asyncio.run`` closes with
``shutdown_asyncgens`` while the loop still runs) or by ``broker.close()`` while its loop is
still open (``AsyncClients.close``). Sentinel and
Cluster URLs, and enqueues of custom job ids (their cross-queue id guard is synchronous), fall
back to the base class: the synchronous call on a worker thread (``asyncio.to_thread``),
as does ``get_async`` (not overridden). A waiter's XREAD BLOCK stays under ``socket_timeout``
(``lifecycle.watch_block``), as the synchronous wait's.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...core.job import Job
from ...core.state import TERMINAL_STATES
from ..base import Broker, EnqueueResult
from . import codec, idguard
from .keys import RUN
from .lifecycle import WATCH_COUNT, scan_entries, watch_block
from .plumbing import guarded

if TYPE_CHECKING:
    from .broker import RedisBroker

log = logging.getLogger("conveyor.redis")
#: Seconds ``close`` waits for a client of a loop running in another thread to close.
CLOSE_WAIT = 5.0


def _raise_mapped(exc: BaseException) -> None:
    """Raise ``exc`` as the synchronous methods would (``BrokerUnavailable``, ...)."""

    @guarded
    def again() -> None:
        raise exc

    again()


class AsyncClients:
    """The ``redis.asyncio`` clients of one broker, one per event loop."""

    def __init__(self) -> None:
        self.by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        #: per loop, the async generator that closes its client when the loop shuts down
        self._keepers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = (
            weakref.WeakKeyDictionary()
        )
        self.plain: bool | None = None  # a plain server (not Sentinel, not Cluster)

    def close(self) -> None:
        """Close every client whose loop is still open (``broker.close()``): on the loop, in
        its thread when it runs elsewhere, else by running it briefly. A client whose loop is
        closed was closed by its keeper when that loop shut down."""
        for loop, client in list(self.by_loop.items()):
            self.by_loop.pop(loop, None)
            keeper = self._keepers.pop(loop, None)
            if loop.is_closed():
                continue
            try:  # closing the keeper closes the client (and leaves no generator to finalise)
                _close_on(loop, client.aclose() if keeper is None else keeper.aclose())
            except Exception:  # a broken connection: nothing left to release
                log.debug("closing an async Redis client failed", exc_info=True)

    async def get(self, broker: RedisBroker) -> Any:
        """This loop's client, or None when the broker's URL needs the fallback."""
        if self.plain is None:  # the first use checks the server (once, off the loop)
            cluster = await asyncio.to_thread(lambda: broker.cluster)
            self.plain = not cluster and broker.url.startswith(("redis://", "rediss://"))
        if not self.plain:
            return None
        loop = asyncio.get_running_loop()
        client = self.by_loop.get(loop)
        if client is None:
            import redis.asyncio

            conn = broker._conn
            client = redis.asyncio.Redis.from_url(
                conn.url,
                socket_timeout=conn.socket_timeout,
                socket_connect_timeout=conn.socket_timeout,
            )
            self.by_loop[loop] = client
            keeper = self._keeper(loop, client)
            await keeper.__anext__()  # now known to the loop: closed at its shutdown
            self._keepers[loop] = keeper
        return client

    async def _keeper(self, loop: asyncio.AbstractEventLoop, client: Any) -> Any:
        """Suspends until ``loop`` shuts down (``shutdown_asyncgens``), then closes ``client``
        and forgets both (the keeper refers to its loop: kept, it would keep the loop alive)."""
        try:
            yield
        finally:
            if self.by_loop.get(loop) is client:
                self.by_loop.pop(loop, None)
                self._keepers.pop(loop, None)
            try:
                await client.aclose()
            except Exception:  # a server already gone: nothing left to release
                log.debug("closing an async Redis client failed", exc_info=True)


def _close_on(loop: asyncio.AbstractEventLoop, closing: Any) -> None:
    """Run the coroutine ``closing`` on ``loop`` (open), from a thread that may or may not run
    it."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:  # called from the loop's own code: cannot block it, so schedule it
        loop.create_task(closing)
    elif loop.is_running():
        asyncio.run_coroutine_threadsafe(closing, loop).result(CLOSE_WAIT)
    else:
        loop.run_until_complete(closing)


async def _evalsha(
    broker: RedisBroker, client: Any, name: str, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    from redis.exceptions import NoScriptError

    script = broker.runner.scripts[name]
    try:
        return await client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
    except NoScriptError:
        await client.script_load(script.source)
        return await client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)


async def enqueue(
    broker: RedisBroker,
    jobs: Sequence[Job],
    now: float,
    payloads: Sequence[bytes] | None,
    fresh_ids: bool,
) -> list[EnqueueResult]:
    """One enqueue script call on the async client (same script and arguments as
    ``RedisBroker.enqueue``)."""
    client = await broker.aclients.get(broker) if jobs else None
    if client is None or (not fresh_ids and idguard.custom_ids(jobs)):
        return await Broker.enqueue_async(broker, jobs, now, payloads, fresh_ids=fresh_ids)
    try:
        if broker.gate.due():  # its read is blocking I/O: off the event loop, as register
            await asyncio.to_thread(broker.fresh_members)
        name, groups, keys, args, order = broker.enqueue_plan(jobs, now, payloads)
        if any(q not in broker._conn.registered for q in groups):  # once per queue
            await asyncio.to_thread(broker.register, groups)  # also seeds run-time limits
        reply = await _evalsha(broker, client, name, keys, args)
    except Exception as exc:
        _raise_mapped(exc)
        raise
    return broker.enqueue_results(jobs, groups, order, reply)


async def _get_in(broker: RedisBroker, client: Any, queue: str, job_id: str) -> Job | None:
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(broker.keys.job(queue, job_id))
    pipe.hget(broker.keys.queue_key(queue, "payloads"), job_id)
    pipe.hget(broker.keys.queue_key(queue, RUN), job_id)
    fields, payload, run = await pipe.execute()
    if not fields:
        return None
    if payload is not None:
        fields[b"payload"] = payload
    codec.run_overlay(fields, run)  # an active job's lease fields (issue 18)
    return broker.decode_lenient(fields, queue, job_id)


async def watch(broker: RedisBroker, job_id: str, queue: str, timeout: float) -> Job | None:
    """Wait on the queue's event stream with XREAD on the async client (no thread)."""
    client = await broker.aclients.get(broker)
    if client is None:
        return await Broker.watch_async(broker, job_id, queue, timeout)
    try:
        return await _watch(broker, client, job_id, queue, timeout)
    except Exception as exc:
        _raise_mapped(exc)
        raise


async def _watch(
    broker: RedisBroker, client: Any, job_id: str, queue: str, timeout: float
) -> Job | None:
    key, needle = broker.keys.queue_key(queue, "events"), job_id.encode()
    end = time.monotonic() + timeout
    newest = await client.xrevrange(key, count=1)
    cursor = newest[0][0] if newest else b"0-0"  # taken before the job is read: no race
    while True:
        job = await _get_in(broker, client, queue, job_id)
        if job is None or job.state in TERMINAL_STATES:
            return job
        hit = False
        while not hit:
            left = end - time.monotonic()
            if left <= 0:
                return job
            block = watch_block(left, broker._conn.socket_timeout)  # as wait_change
            reply = await client.xread({key: cursor}, count=WATCH_COUNT, block=block)
            if not reply:
                break  # a slice ran out: read the job again
            cursor, hit = scan_entries(reply[0][1], needle)
