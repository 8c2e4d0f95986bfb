"""THE Redis key schema: every key Conveyor reads or writes is named here and nowhere else.

All keys of one queue carry the hash tag ``{<queue>}`` so every Lua script touches exactly one
Redis Cluster slot (queue names are validated: no braces, spaces or colons)::

    <p>:{<q>}:job:<id>     HASH    one job's mutable fields (small values: stays a listpack)
    <p>:{<q>}:payloads     HASH    id -> the job's immutable JSON envelope
    <p>:{<q>}:ready        ZSET    pending jobs; score = priority, member = "<seq:016x>:<id>"
                                   (equal scores sort by member, so FIFO within a priority);
                                   "<seq:016x>.<id>" marks a fresh job (issue 18: never ran,
                                   no expires_at / flow group / workflow; enqueue scripts write
                                   it when <p>:format is "2", the claim then reads none of its
                                   hash)
    <p>:{<q>}:scheduled    ZSET    id -> run_at (scheduled: delayed enqueue / delayed release)
    <p>:{<q>}:retry        ZSET    id -> run_at (retry_scheduled)
    <p>:{<q>}:leases       ZSET    id -> lease deadline rounded up to a whole second (active
                                   jobs; the exact deadline is in the job's run entry)
    <p>:{<q>}:run          HASH    id -> run entry of an active job (issue 18): one packed value
                                   "<token>|<flag>|<lease deadline>|<row>", a newline,
                                   "<attempts>|<started_at>|<worker_id>"; row = the event row
                                   as JSON text "<id>","<task>",<attempts>; flag 1 = the hash
                                   has wf / grp (lua/_run.lua run_fields). One HSET per claim,
                                   read in one HMGET per completion; meanwhile the job hash has
                                   only state active of the lease. A job leased by an older
                                   version has none: its hash holds token, attempts,
                                   lease_expires_at, worker_id, started_at
    <p>:{<q>}:completed    ZSET    id -> finished_at (retention by count and TTL)
    <p>:{<q>}:dead         ZSET    id -> finished_at (dead_letter; capped per queue)
    <p>:{<q>}:cancelled    ZSET    id -> finished_at (TTL)
    <p>:{<q>}:seq          STRING  INCR counter: ready-order sequence and fencing tokens
    <p>:{<q>}:events       STREAM  transition events of this queue (MAXLEN ~ events_max)
    <p>:{<q>}:wake         LIST    wake-up markers for idle workers (BLPOP), at most 16
    <p>:{<q>}:paused       STRING  exists while the queue is paused
    <p>:{<q>}:idem:<key>   STRING  "<expires_at>|<job id>" (PX: logical TTL + grace)
    <p>:{<q>}:waiting      ZSET    id -> created_at (waiting workflow nodes)
    <p>:{<q>}:wf:<id>      HASH    a workflow node's graph record (lua/_wf.lua)
    <p>:{<q>}:expired      ZSET    id -> finished_at (expired: not started before expires_at)
    <p>:{<q>}:f:           prefix of the flow-control keys of the queue (issue 15, lua/_flow.lua):
      f:groups             ZSET    group -> round-robin number (groups that may be served now)
      f:gdelay             ZSET    group -> time its next token exists (throttled groups)
      f:parked             SET     groups waiting for a concurrency slot
      f:g:<group>          ZSET    the group's pending jobs (score = priority, member as ready)
      f:tb:<bucket>        HASH    token bucket: tokens, at
      f:slot:<slot>        SET     job ids holding a concurrency slot (their owners)
      f:wait:<slot>        SET     groups parked until that slot frees
      f:why                HASH    group -> why it waits (operators)
      f:npend              STRING  pending jobs waiting in groups (part of the pending count)
      f:limits             HASH    limiter -> JSON spec set at run time (overrides the jobs')
      f:limitv             HASH    limiter -> version of its f:limits entry (newest write wins)

Global keys (never touched by a job script)::

    <p>:queues             SET     every queue that ever held a job or was paused
    <p>:format             STRING  ready-member format every worker reads (issue 18): absent =
                                   "1" (only "<seq>:<id>"), "2" = enqueue may write fresh
                                   members "<seq>.<id>"; set by conveyor migrate, or SET NX by
                                   the first process on a fresh deployment (fmtgate.py)
    <p>:events             STREAM  non-transition events (worker_up, ...; events_add)
    <p>:wake               LIST    Cluster mode only: wake-up markers for multi-queue workers
    <p>:doc:{<c>}          SET     names of the documents of collection <c>
    <p>:doc:{<c>}:<name>   HASH    one document: field -> JSON value, plus meta fields
    <p>:log:<name>         LIST    bounded log of JSON entries (oldest first)
    <p>:ctr:<bucket>       HASH    counter name -> number, plus the logical expiry
    <p>:wf:<workflow id>   STRING  a workflow's index: JSON {"nodes": [[id, queue], ...],
                                   "edges": [[parent, child, policy], ...]}
    <p>:workflows          ZSET    workflow id -> when retention last checked it (workflows.py)
    <p>:flow:limits        HASH    limiter -> JSON [version, spec or null]: every run-time
                                   override, copied into queues registered later (flowadmin.py)
    <p>:flow:seq           STRING  version counter of those overrides
    <p>:flow:adopted       STRING  exists once the previous version's per-queue overrides were
                                   copied into <p>:flow:limits (flowadmin.adopt, at version 0)
    <p>:idlock:<id>        STRING  queue name; held (PX 30 s) while a custom job id is being
                                   enqueued, so no other queue can take the id (idguard.py)

See docs/wire-format.md for the field-level format.
"""

from __future__ import annotations

import re

DEFAULT_PREFIX = "conveyor"

#: Order of the per-queue keys passed as KEYS[1..16] to every job script (see lua/_lib.lua).
QUEUE_KEY_SUFFIXES = (
    "job:",
    "ready",
    "scheduled",
    "retry",
    "leases",
    "completed",
    "dead",
    "cancelled",
    "seq",
    "events",
    "wake",
    "paused",
    "idem:",
    "payloads",
    "expired",  # issue 15 (appended: the first 14 keep their positions)
    "f:",  # issue 15: prefix of the flow-control keys (groups, buckets, slots)
)
KEYS_PER_QUEUE = len(QUEUE_KEY_SUFFIXES)

#: The run hash of a queue (issue 18): id -> packed run entry of an active job. Not one of the
#: 16 script keys: scripts derive it from the ``seq`` key (lua/_lib.lua qkeys), same slot.
RUN = "run"

#: Terminal state -> the suffix of the set that holds jobs in that state.
TERMINAL_SETS = {
    "completed": "completed",
    "dead_letter": "dead",
    "cancelled": "cancelled",
    "expired": "expired",
}

#: Every state -> the per-queue ZSET that holds its jobs (its ZCARD is the count).
STATE_SETS = {
    "pending": "ready",
    "scheduled": "scheduled",
    "retry_scheduled": "retry",
    "active": "leases",
    "waiting": "waiting",
    **TERMINAL_SETS,
}

#: Keys of a queue that workflow scripts build with ``wf_qkeys`` (lua/_wf.lua) besides the
#: ``QUEUE_KEY_SUFFIXES``: the waiting set and the prefix of the node records.
WORKFLOW_SUFFIXES = ("waiting", "wf:")

_SAFE_COLLECTION = re.compile(r"^[A-Za-z0-9_.\-:]{1,200}\Z")


class KeySchema:
    """Builds key names for one prefix (default ``conveyor``)."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        if not prefix or any(c in prefix for c in "{} \n"):
            raise ValueError(f"invalid key prefix {prefix!r}")
        self.prefix = prefix

    # ------------------------------------------------------------------ per queue
    def tag(self, queue: str) -> str:
        """``<p>:{<queue>}:`` — the start of every key of ``queue``."""
        return f"{self.prefix}:{{{queue}}}:"

    def queue_keys(self, queue: str) -> list[str]:
        """KEYS[1..16] of every job script, in ``QUEUE_KEY_SUFFIXES`` order."""
        base = self.tag(queue)
        return [base + suffix for suffix in QUEUE_KEY_SUFFIXES]

    def queue_key(self, queue: str, suffix: str) -> str:
        """One per-queue key (``suffix`` from ``QUEUE_KEY_SUFFIXES``)."""
        return self.tag(queue) + suffix

    @property
    def flow_overrides(self) -> str:
        """HASH: every run-time limit override, name -> JSON ``[version, spec or null]``."""
        return f"{self.prefix}:flow:limits"

    @property
    def flow_seq(self) -> str:
        """STRING: the version counter of the run-time limit overrides."""
        return f"{self.prefix}:flow:seq"

    @property
    def flow_adopted(self) -> str:
        """STRING: set once the per-queue overrides of the previous layout were adopted."""
        return f"{self.prefix}:flow:adopted"

    def flow(self, queue: str, suffix: str) -> str:
        """One flow-control key of ``queue`` (issue 15): ``<p>:{<q>}:f:<suffix>``."""
        return f"{self.tag(queue)}f:{suffix}"

    def job(self, queue: str, job_id: str) -> str:
        """The hash of one job."""
        return f"{self.tag(queue)}job:{job_id}"

    def state_set(self, queue: str, state: str) -> str:
        """The ZSET holding the jobs of ``queue`` in ``state``."""
        return self.tag(queue) + STATE_SETS[state]

    def pattern(self) -> str:
        """SCAN pattern matching every key of this prefix."""
        return f"{_glob_escape(self.prefix)}:*"

    # ------------------------------------------------------------------ global
    @property
    def queues(self) -> str:
        """SET of known queue names."""
        return f"{self.prefix}:queues"

    @property
    def format(self) -> str:
        """STRING: the ready-member format every worker reads (fmtgate.py)."""
        return f"{self.prefix}:format"

    @property
    def events(self) -> str:
        """STREAM of non-transition events."""
        return f"{self.prefix}:events"

    @property
    def global_wake(self) -> str:
        """LIST of wake-up markers used by multi-queue workers in Cluster mode."""
        return f"{self.prefix}:wake"

    def doc_index(self, collection: str) -> str:
        """SET of document names of a collection."""
        return f"{self.prefix}:doc:{{{_collection(collection)}}}"

    def doc(self, collection: str, name: str) -> str:
        """HASH of one document (same slot as its collection's index)."""
        return f"{self.doc_index(collection)}:{name}"

    def log(self, name: str) -> str:
        """LIST of a bounded log."""
        return f"{self.prefix}:log:{name}"

    def counters(self, bucket: str) -> str:
        """HASH of one counter bucket."""
        return f"{self.prefix}:ctr:{bucket}"

    def workflow(self, workflow_id: str) -> str:
        """STRING: a workflow's index (its nodes and edges)."""
        return f"{self.prefix}:wf:{workflow_id}"

    def workflows(self) -> str:
        """ZSET: every stored workflow's id -> when retention last checked it (the sweep for
        finished workflows' graphs, ``workflows.py``)."""
        return f"{self.prefix}:workflows"

    def wf_node(self, queue: str, job_id: str) -> str:
        """HASH: one workflow node's graph record."""
        return f"{self.tag(queue)}wf:{job_id}"

    def id_lock(self, job_id: str) -> str:
        """STRING held while a custom job id is enqueued (ids are unique across queues)."""
        return f"{self.prefix}:idlock:{job_id}"


def _collection(name: str) -> str:
    """Collection names go inside a hash tag: anything unusual is hex-encoded."""
    if _SAFE_COLLECTION.match(name):
        return name
    return "x" + name.encode().hex()


def _glob_escape(text: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def key_slot(key: str | bytes) -> int:
    """The Redis Cluster slot of ``key`` (CRC16/XMODEM of the hash tag, mod 16384)."""
    raw = key.encode() if isinstance(key, str) else key
    start = raw.find(b"{")
    if start != -1:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return _crc16(raw) % 16384


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc
