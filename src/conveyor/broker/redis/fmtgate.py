"""The ready-member format gate (issue 18): may enqueue write fresh members ``<seq>.<id>``?

A worker of a version before fresh members parses ready members as ``<seq>:<id>``; it would
drop a ``.`` member (and so lose its job). The global key ``<p>:format`` (keys.py) says which
format every worker understands: absent = "1" (``:`` members only), ``FRESH`` = "2". It is set
by ``conveyor migrate`` (``migrate``: the operator's word that every worker runs this version),
or on a FRESH deployment (no key, no registered queue, no worker document) by the first
process of this version (checked and set in one script; two steps on Cluster), so new users get
the fast path without a step.

A broker learns the gate lazily (``FormatGate``) and re-reads it at most every
``REFRESH_SECONDS``, so a process started before the switch follows within that time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .plumbing import RedisBase

#: ``<p>:format`` value that turns fresh ready members on.
FRESH = "2"
#: the format an absent key means: ``:`` members only (every version reads them)
BEFORE = "1"
#: how long a process trusts what it read (a switch reaches every process within this time)
REFRESH_SECONDS = 30.0
#: the document collection of worker presence (worker/presence.py COLLECTION)
WORKER_DOCS = "workers"


class FormatGate:
    """What one broker knows of ``<p>:format``: ``on`` and when to read it again."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock  # injectable (tests: FakeClock.now)
        self.on = False
        self._next = float("-inf")  # due at once: nothing read yet

    def due(self) -> bool:
        """True when the cached value is older than ``REFRESH_SECONDS`` (or never read)."""
        return self.clock() >= self._next

    def learn(self, on: bool) -> None:
        """Remember a value just read (or just written)."""
        self.on = on
        self._next = self.clock() + REFRESH_SECONDS

    def forget(self) -> None:
        """Read again at the next use (the keys were flushed)."""
        self._next = float("-inf")


#: Turn the gate on only if the server is pristine, in the same atomic step as the check (an
#: older worker registering between a check and a separate SET NX would find the gate on).
_AUTO_ENABLE = """
-- fmtgate auto-enable: set <p>:format on a server nothing was ever registered on.
--
-- Input
--   KEYS: [1] <p>:format  [2] <p>:queues  [3] the worker documents' index
--   ARGV: [1] the value to set (FRESH)
-- Output: the key's value after the call (nil: left off, the server is in use)
local value = redis.call('GET', KEYS[1])
if value then return value end
if redis.call('EXISTS', KEYS[2]) == 1 or redis.call('EXISTS', KEYS[3]) == 1 then return nil end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
"""


def read(base: RedisBase) -> bool:
    """True when ``<p>:format`` turns fresh members on; on a fresh deployment this process
    turns it on first (of several first processes, one writes, all read it)."""
    client = base.client
    key = base.keys.format
    value = client.get(key)
    if value is None:
        value = _auto_enable(base, client)
    return bool(value == FRESH.encode())


def _auto_enable(base: RedisBase, client: Any) -> Any:
    """Set the key to ``FRESH`` if nothing was ever stored (no registered queue, no worker
    document of any version); return its value after (None: off).

    On one Redis the check and the write are one script: an older worker's first writes (its
    document, its queue) land either before it (the gate stays off) or after (that worker
    started after the gate, as after ``migrate``: docs/operations.md "Upgrading on Redis").
    In Redis Cluster the three keys live in three slots, so no script can see them all: the
    check and SET NX stay two steps there, and a race with an older process remains possible
    on a brand-new Cluster that mixes versions (documented)."""
    keys = base.keys
    if not base.cluster:
        script = client.register_script(_AUTO_ENABLE)
        return script(keys=[keys.format, keys.queues, keys.doc_index(WORKER_DOCS)], args=[FRESH])
    if not client.exists(keys.queues) and not client.exists(keys.doc_index(WORKER_DOCS)):
        client.set(keys.format, FRESH, nx=True)
        return client.get(keys.format)
    return None


def migrate(base: RedisBase, check: bool) -> dict[str, Any]:
    """Turn fresh members on (``check``: only report): ``conveyor migrate``'s Redis step."""
    key = base.keys.format
    raw = base.client.get(key)
    found = BEFORE if raw is None else raw.decode(errors="replace")
    if not check and found == BEFORE:  # a later version's value is never turned back
        base.client.set(key, FRESH)
    if not check:
        base.gate.forget()  # this process follows at once
    return {
        "backend": "redis",
        "key": key,
        "found": found,
        "version": FRESH,
        "migrated": not check,
        "behind": check and found == BEFORE,
    }
