"""The Lua scripts: loaded from ``lua/*.lua``, run with EVALSHA, reloaded on NOSCRIPT.

Every job script is the part of the prelude (the shared helpers: ``lua/_lib.lua``, ``_run.lua``,
``_wf.lua``, ``_timers.lua``, ``_flow.lua``, concatenated in that order by ``prelude``) it uses,
followed by the script's own file (``lib_for``); its SHA1 is computed here, so EVALSHA works
without a prior SCRIPT LOAD. When the server answers NOSCRIPT (restart, failover, ``SCRIPT
FLUSH``) the script is loaded and the call repeated; in a pipeline only the calls that failed
with NOSCRIPT are repeated (a NOSCRIPT call never ran).

Script calls are the hot path (claim, complete, enqueue), so on a plain or Sentinel client they
take a fast lane: connections checked out of the client's pool once and kept by the runner (a
LIFO stack, safe for threads), packed with hiredis and exchanged directly on the connection's
socket with its own hiredis ``Reader`` (``_wire`` / ``_exchange``; the public
``send_packed_command`` / ``read_response`` if the connection looks different). That skips
what redis-py does around every command (pool checkout with a ``poll`` of the socket, release,
retry wrapper, metrics hooks, per-read wrappers): most of the client CPU of a loopback round
trip. The lane keeps redis-py's guarantees: a connection that failed mid-call is disconnected
before it is reused (it reconnects on its next use), and a broken connection is retried once,
as the pool's ``Retry`` policy does. Redis Cluster clients use the regular path.

The private attributes (``Connection._sock`` / ``_parser``, ``_HiredisParser._reader`` /
``_buffer``, ``redis._parsers.hiredis.NOT_ENOUGH_DATA``) exist in redis-py 6.0-8.x, the
range pinned in pyproject.toml (5.x lacks ``NOT_ENOUGH_DATA``). Fallbacks, each tested in
tests/redis/test_fallback.py: without them or without the hiredis parser the lane sends and
reads through the connection's public ``send_packed_command`` / ``read_response``; a client
with ``decode_responses`` or RESP3 (``protocol=3``) skips the lane and uses
``execute_command`` / pipelines (its replies need redis-py's parsing callbacks).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

_NOT_ENOUGH_DATA: object | None
try:
    from redis._parsers.hiredis import NOT_ENOUGH_DATA as _NOT_ENOUGH_DATA
except ImportError:  # pragma: no cover - redis-py 5.x: the lane uses the public methods
    _NOT_ENOUGH_DATA = None

_hiredis_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _pack_command

    _hiredis_pack = _pack_command
except ImportError:  # pragma: no cover - hiredis is a dependency; redis-py packs without it
    _hiredis_pack = None

#: The prelude files (``lua/<name>.lua``), in the order they are concatenated: each helper is
#: defined before the helpers that call it (a Lua local is visible only below its definition).
PRELUDE = ("_lib", "_run", "_wf", "_timers", "_flow")
#: Scripts that are not job transitions and do not get the shared prelude.
_STANDALONE = frozenset({"doc_cas"})
SCRIPT_NAMES = (
    "enqueue",
    "enqueue_one",
    "claim",
    "complete",
    "fail",
    "release",
    "extend",
    "promote",
    "reap",
    "cancel",
    "cancel_running",
    "requeue",
    "purge",
    "clear",
    "run_now",
    "delete_job",
    "oldest",
    "search",
    "debounce",
    "doc_cas",
    "wf_enqueue",
    "wf_requeue",
    "flow_limit",  # issue 15: run-time limit changes, atomic with claims
)


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


def prelude() -> str:
    """The shared helpers of the job scripts: the ``PRELUDE`` files, concatenated in order.

    The files after the first go without their header (the leading comment block, up to the
    first blank line): it documents the file, and ``lib_for`` would otherwise count a helper
    named there as used by the definition it follows. ``_lib.lua``'s header heads every script.
    """
    first, *rest = (_read(name) for name in PRELUDE)
    return "\n".join([first, *(_HEADER.sub("", text, count=1) for text in rest)])


_HEADER = re.compile(r"\A(?:--[^\n]*\n)+\n")
_TOP_LEVEL = re.compile(r"^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


def lib_for(lib: str, body: str) -> str:
    """The part of the prelude ``lib`` that ``body`` uses: its header and the top-level definitions
    (``local function f`` / ``local X =``) that the body names, directly or through another
    included definition, in their original order.

    Redis runs a script's whole text on every call, so each helper it defines is a closure
    allocated per call; leaving out the unused ones saves a few µs per script call.
    """
    starts = [(m.start(), m.group(1)) for m in _TOP_LEVEL.finditer(lib)]
    if not starts:
        return lib
    header = lib[: starts[0][0]]
    chunks = {
        name: lib[at : (starts[i + 1][0] if i + 1 < len(starts) else len(lib))]
        for i, (at, name) in enumerate(starts)
    }
    needed: set[str] = set()
    todo = [body]
    while todo:
        text = todo.pop()
        for name, chunk in chunks.items():
            if name not in needed and re.search(rf"\b{name}\b", text):
                needed.add(name)
                todo.append(chunk)
    return header + "".join(chunk for name, chunk in chunks.items() if name in needed)


@functools.cache
def load_all() -> dict[str, Script]:
    """Read every script from the package and compute its SHA1."""
    lib = prelude()
    out = {}
    for name in SCRIPT_NAMES:
        body = _read(name)
        source = body if name in _STANDALONE else f"{lib_for(lib, body)}\n{body}"
        data = source.encode("utf-8")
        out[name] = Script(name, data, hashlib.sha1(data).hexdigest())
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
                data = (
                    pack(tuple(commands[0]))
                    if len(commands) == 1
                    else b"".join([pack(tuple(command)) for command in commands])
                )
                wire = _wire(conn)
                if wire is not None:
                    replies = _exchange(*wire, data, len(commands))
                    healthy = True
                    return replies
                conn.send_packed_command([data], check_health=False)
            elif len(commands) == 1:
                conn.send_packed_command(conn.pack_command(*commands[0]), check_health=False)
            else:
                conn.send_packed_command(conn.pack_commands(commands), check_health=False)
            replies = []
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


def _wire(conn: Any) -> tuple[Any, Any, Any] | None:
    """(socket, hiredis reader, read buffer) of a connected redis-py connection, or None.

    The raw lane talks to the socket and redis-py's own hiredis ``Reader`` directly: the same
    bytes and the same reply objects as ``send_packed_command`` / ``read_response``, without
    their per-call wrappers (about 10 µs of client CPU per round trip on the benchmark VM).
    Anything unexpected (another parser, a redis-py without these attributes) returns None and
    the caller uses the public methods.
    """
    if _NOT_ENOUGH_DATA is None:
        return None
    sock = getattr(conn, "_sock", None)
    if sock is None:
        conn.connect()
        sock = getattr(conn, "_sock", None)
    parser = getattr(conn, "_parser", None)
    reader = getattr(parser, "_reader", None)
    buf = getattr(parser, "_buffer", None)
    if sock is None or reader is None or buf is None or type(parser).__name__ != "_HiredisParser":
        return None
    return sock, reader, buf


def _exchange(sock: Any, reader: Any, buf: Any, data: bytes, count: int) -> list[Any]:
    """Send ``data`` (``count`` packed commands) and read ``count`` replies.

    Errors map as in redis-py: a socket timeout is ``TimeoutError``, any other ``OSError`` or a
    closed socket is ``ConnectionError`` (the caller then disconnects the connection); an error
    reply is returned in place (the connection stays in step).
    """
    try:
        sock.sendall(data)
        replies: list[Any] = []
        for _ in range(count):
            reply = reader.gets()
            while reply is _NOT_ENOUGH_DATA:
                n = sock.recv_into(buf)
                if not n:
                    raise RedisConnectionError("Connection closed by server.")
                reader.feed(buf, 0, n)
                reply = reader.gets()
            if isinstance(reply, RedisConnectionError):
                raise reply
            replies.append(reply)
        return replies
    except TimeoutError as exc:  # socket.timeout
        raise RedisTimeoutError("Timeout talking to Redis") from exc
    except OSError as exc:
        raise RedisConnectionError(f"Error talking to Redis: {exc}") from exc
