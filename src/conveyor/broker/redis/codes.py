"""The Lua scripts' return codes and calling convention, shared by every Python call site.

``ScriptCode`` is THE list of the integers a script answers with; ``lua/_lib.lua`` mirrors it
as ``local CODE_<NAME> = <n>`` constants (a test compares the two), so neither side writes a
bare ``-1`` or ``-2``. The scripts in ``PACKED`` take their scalar options as one JSON object
in ``ARGV[1]`` (``options`` builds it); per-job records stay positional after it.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import orjson


class ScriptCode(IntEnum):
    """A script's status answer (first element of its reply, or one element per batch item)."""

    #: done: stored, claimed, recorded, extended, cancelled, requeued, changed
    OK = 1
    #: not done, nothing changed: not found, not in a state that allows it, a stale token in a
    #: batch (complete / extend), a compare-and-set that did not match; as a flag: "no more"
    NO = 0
    #: enqueue: a job with this id already exists in its queue; nothing was stored
    DUPLICATE_ID = -1
    #: fail / release: stale fencing token or the job is not active (``LeaseLost``)
    LEASE_LOST = -2
    #: flag of claim / reap: more work is waiting (same value as OK)
    MORE = 1


#: Scripts whose scalar options are one JSON object in ARGV[1].
PACKED = (
    "enqueue",
    "enqueue_one",
    "claim",
    "complete",
    "fail",
    "release",
    "reap",
    "search",
    "cancel_running",
    "wf_enqueue",
)

_dumps = orjson.dumps


def options(**values: Any) -> bytes:
    """The packed options argument: a JSON object. Times are the strings ``fmt_time`` makes
    (Lua stores them verbatim); values Lua hands straight to a Redis command (``events_max``
    for XADD MAXLEN) are strings too, since Redis formats a Lua number with ``%.17g`` on every
    call; ``""`` stands for absent (cjson would decode null to a sentinel, not nil)."""
    return _dumps(values)
