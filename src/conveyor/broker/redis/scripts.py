"""The Lua scripts: loaded from ``lua/*.lua``, run with EVALSHA, reloaded on NOSCRIPT.

Every job script is ``lua/_lib.lua`` (shared helpers) followed by the script's own file; its
SHA1 is computed here, so EVALSHA works without a prior SCRIPT LOAD. When the server answers
NOSCRIPT (restart, failover, ``SCRIPT FLUSH``) the script is loaded and the call repeated; in a
pipeline only the calls that failed with NOSCRIPT are repeated (a NOSCRIPT call never ran).

Script calls are the hot path (claim, complete, enqueue), so on a plain or Sentinel client they
take a fast lane: connections checked out of the client's pool once and kept by the runner (a
LIFO stack, safe for threads), used with ``send_packed_command`` / ``read_response``. That skips
what redis-py does around every command (pool checkout with a ``poll`` of the socket, release,
retry wrapper, metrics hooks): about two thirds of the client CPU of a loopback round trip. The
lane keeps redis-py's guarantees: a connection that failed mid-call is disconnected before it
is reused (it reconnects on its next use), and a broken connection is retried once, as the
pool's ``Retry`` policy does. Redis Cluster clients use the regular path.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _pack_command

    _hiredis_pack = _pack_command
except ImportError:  # pragma: no cover - hiredis is a dependency; redis-py packs without it
    _hiredis_pack = None

#: Scripts that are not job transitions and do not get the shared prelude.
_STANDALONE = frozenset({"doc_cas"})
SCRIPT_NAMES = (
    "enqueue", "claim", "complete", "fail", "release", "extend", "promote", "reap", "cancel",
    "requeue", "purge", "oldest", "search", "doc_cas",
)  # fmt: skip


@dataclass(frozen=True)
class Script:
    """One loaded script: its name, full source and SHA1."""

    name: str
    source: bytes
    sha: str


@dataclass(frozen=True)
class Call:
    """One script invocation for a pipeline: script name, KEYS and ARGV."""

    name: str
    keys: Sequence[str]
    args: Sequence[Any]


def _read(name: str) -> str:
    return (
        resources.files("conveyor.broker.redis").joinpath("lua", f"{name}.lua").read_text("utf-8")
    )


@functools.cache
def load_all() -> dict[str, Script]:
    """Read every script from the package and compute its SHA1."""
    lib = _read("_lib")
    out = {}
    for name in SCRIPT_NAMES:
        body = _read(name)
        source = (body if name in _STANDALONE else f"{lib}\n{body}").encode("utf-8")
        out[name] = Script(name, source, hashlib.sha1(source).hexdigest())
    return out


class ScriptRunner:
    """Runs scripts on one redis-py client (plain, Sentinel-managed or Cluster)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.scripts = load_all()
        pool = getattr(client, "connection_pool", None)
        self._lane = FastLane(pool) if pool is not None and _plain(client) else None

    def _load(self, names: set[str]) -> None:
        for name in names:
            self.client.script_load(self.scripts[name].source)

    def _args(self, call: Call) -> list[Any]:
        return [self.scripts[call.name].sha, len(call.keys), *call.keys, *call.args]

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """EVALSHA one script; on NOSCRIPT load it and try once more."""
        call = Call(name, keys, args)
        try:
            return self._one(call)
        except NoScriptError:
            self._load({name})
            return self._one(call)

    def _one(self, call: Call) -> Any:
        if self._lane is not None:
            reply = self._lane.execute([("EVALSHA", *self._args(call))])[0]
            if isinstance(reply, Exception):
                raise reply
            return reply
        return self.client.execute_command("EVALSHA", *self._args(call))

    def run_many(self, calls: Sequence[Call]) -> list[Any]:
        """Pipeline several script calls (one round trip per node); results in order.

        Errors other than NOSCRIPT are raised after the pipeline ran (the other calls did run).
        """
        if not calls:
            return []
        if len(calls) == 1:
            return [self.run(calls[0].name, calls[0].keys, calls[0].args)]
        results = self._pipeline(calls)
        missing = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
        if missing:
            self._load({calls[i].name for i in missing})
            again = self._pipeline([calls[i] for i in missing])
            for i, result in zip(missing, again, strict=True):
                results[i] = result
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results

    def _pipeline(self, calls: Sequence[Call]) -> list[Any]:
        if self._lane is not None:
            return self._lane.execute([("EVALSHA", *self._args(call)) for call in calls])
        pipe = self.client.pipeline(transaction=False)
        for call in calls:
            pipe.execute_command("EVALSHA", *self._args(call))
        return list(pipe.execute(raise_on_error=False))

    def close(self) -> None:
        """Give the fast lane's connections back to the pool."""
        if self._lane is not None:
            self._lane.close()


def _plain(client: Any) -> bool:
    """A standalone or Sentinel client whose replies need no parsing callbacks for EVALSHA."""
    kwargs = getattr(client.connection_pool, "connection_kwargs", {})
    return not kwargs.get("decode_responses") and int(kwargs.get("protocol") or 2) == 2


class FastLane:
    """Commands sent on connections held out of a redis-py pool (see the module docstring).

    ``execute`` writes all commands in one ``sendall`` and reads every reply; a ``ResponseError``
    is returned in place of its reply (the connection stays in step), anything else disconnects
    the connection. A ``ConnectionError`` is retried once on a fresh connection after 25 ms:
    like the pool's ``Retry(…, 1)``, a call whose connection broke is sent again.
    """

    RETRY_DELAY = 0.025

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self._idle: deque[Any] = deque()
        self._pid = os.getpid()
        kwargs = getattr(pool, "connection_kwargs", {})
        utf8 = str(kwargs.get("encoding", "utf-8")).lower().replace("_", "-") in ("utf-8", "utf8")
        # hiredis packs str as UTF-8, exactly like redis-py with its default encoding
        self._pack: Any = _hiredis_pack if _hiredis_pack is not None and utf8 else None

    def _take(self) -> Any:
        if self._pid != os.getpid():  # forked: the parent's sockets are not ours to use
            self._idle, self._pid = deque(), os.getpid()
        try:
            return self._idle.pop()
        except IndexError:
            return self.pool.get_connection()

    def execute(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send ``commands`` in one write and return their replies in order."""
        try:
            return self._attempt(commands)
        except RedisConnectionError:
            time.sleep(self.RETRY_DELAY)
            return self._attempt(commands)

    def _attempt(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        conn = self._take()
        healthy = False
        try:
            pack = self._pack
            if pack is not None:
                data = [pack(tuple(commands[0]))] if len(commands) == 1 else \
                    [b"".join([pack(tuple(command)) for command in commands])]  # fmt: skip
            elif len(commands) == 1:
                data = conn.pack_command(*commands[0])
            else:
                data = conn.pack_commands(commands)
            conn.send_packed_command(data, check_health=False)
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except ResponseError as exc:  # the whole reply was read: still in step
                    replies.append(exc)
            healthy = True
            return replies
        finally:
            if not healthy:
                conn.disconnect()
            self._idle.append(conn)

    def close(self) -> None:
        """Return every held connection to the pool."""
        while self._idle:
            conn = self._idle.pop()
            try:
                self.pool.release(conn)
            except Exception:  # pragma: no cover - a pool already torn down
                conn.disconnect()
