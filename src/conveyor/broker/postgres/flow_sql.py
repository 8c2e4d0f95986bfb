"""The SQL text of the PostgreSQL flow-control statements (issue 15), bound to a schema by
``PgStore.sql`` / ``PgDb.q``: the claim's (``_FAIR``, ``_HEADS``, ``_BATCH``), the group
bookkeeping (``_DRAIN``, ``_PLACE``) and the completion's slot frees (``FREE_DONE``). What each
one does and why it is written so is told next to it; postgres/flow.py runs them."""

from __future__ import annotations

from ..sqlite_rows import COLS
from .rec import COLS as PG_COLS

#: The pause, tested in each statement that picks groups (its own snapshot), as
#: ``claim._CLAIM`` does: a pause committed after the claim's look-up stops this claim too.
_NOT_PAUSED = "NOT EXISTS (SELECT 1 FROM {S}.queues q WHERE q.name = f.queue AND q.paused)"

_FLOWING = "SELECT EXISTS (SELECT 1 FROM {S}.flow_groups), EXISTS (SELECT 1 FROM {S}.flow_pending)"
#: The newly enqueued groups (``flow_pending``) into ``flow_groups``, due now, in one statement
#: (sqllimits.SCHEDULE for all of them: a new group takes the next round-robin place).
_DRAIN = (
    "WITH gone AS (DELETE FROM {S}.flow_pending RETURNING queue, grp)"
    " INSERT INTO {S}.flow_groups (queue, grp, due, rr) SELECT queue, grp, 0,"
    " nextval('{S}.job_seq') FROM (SELECT DISTINCT queue, grp FROM gone ORDER BY queue, grp) AS d"
    " ON CONFLICT DO NOTHING"
)
#: The completion's write (``finish._DONE``) of jobs that held concurrency slots, in one
#: statement with what ``sqllimits.free`` does for them, under the flow lock: every slot row a
#: completed job owns (``%s``: their ids; fenced: only rows the job owns) deleted, the waiters
#: of the slots that freed deleted, their groups due again, and the groups' queues NOTIFYed
#: (``%s``: the broker's channel; delivered at COMMIT as the settle statement's are). The
#: ``nt`` test is a one-time filter: it runs once, before the jobs are written.
FREE_DONE = (
    "WITH fr AS (DELETE FROM {S}.flow_slots WHERE job_id = ANY(%s::text[]) RETURNING name),"
    " w AS (DELETE FROM {S}.flow_waiters WHERE name IN (SELECT name FROM fr)"
    " RETURNING queue, grp),"
    " up AS (UPDATE {S}.flow_groups g SET due = 0, why = NULL FROM (SELECT DISTINCT queue, grp"
    " FROM w) d WHERE g.queue = d.queue AND g.grp = d.grp AND g.due IS NULL),"
    " nt AS (SELECT count(pg_notify(%s, CASE WHEN octet_length(q) < 7000 THEN q ELSE '' END))"
    " AS k FROM (SELECT DISTINCT queue AS q FROM w) x) "
)
#: ``FREE_DONE``'s end: after ``finish._DONE``'s own WHERE.
FREE_DONE_WHERE = " AND (SELECT k FROM nt) >= 0"
#: The end of a batch of ``sqllimits.take`` (``PgDb.place_groups``) in one statement: the
#: groups ``m`` go behind the others with fresh round-robin numbers (``v``: ``nextval`` per row
#: as the array is read, increasing in batch order) and the groups ``gone`` are deleted. Each
#: group is found by its own primary-key probe (a scalar subquery: its ``ctid``) and written
#: through that ``ctid``: a join of the arrays with ``flow_groups`` was planned as a hash join
#: over every group of the queue while the table had no statistics yet (a fresh table). No
#: ``generate_series`` of a parameter: its estimate (1,000 rows) kept the server re-planning
#: the statement at each call instead of using its generic plan.
_PLACE_WITH = (
    "WITH m AS (SELECT u.*, nextval('{S}.job_seq') AS v FROM unnest(%s::float8[], %s::text[],"
    " %s::text[]) WITH ORDINALITY AS u(due, why, grp, i)),"
    " gone AS (DELETE FROM {S}.flow_groups WHERE ctid = ANY(ARRAY(SELECT (SELECT ctid FROM"
    " {S}.flow_groups f WHERE f.queue = %s AND f.grp = e.grp) FROM unnest(%s::text[]) AS e(grp))))"
)
_PLACE_MOVE = (
    "UPDATE {S}.flow_groups g SET due = m.due, rr = m.v, why = m.why FROM m"
    " WHERE g.ctid = (SELECT ctid FROM {S}.flow_groups f WHERE f.queue = %s AND f.grp = m.grp)"
)
_PLACE = _PLACE_WITH + " " + _PLACE_MOVE
#: Up to ``%s`` due groups of a queue, oldest ``(due, rr)`` first, with their first two pending
#: job ids (``ids``: the head, and whether another job follows it), each head locked by its own
#: primary-key probe (``LATERAL``, ``SKIP LOCKED``: a head another transaction holds comes back
#: NULL next to its id), whether ``flow_limits`` has rows, and the running jobs of each group's
#: concurrency slots (``cs``: the ``conc:`` parts of its name, which are its jobs' slot names,
#: core/flow.py; their ``flow_slots`` rows counted): everything ``sqllimits.take``
#: reads about a batch, in one statement (a CTE of the heads joined back by hash cost twice
#: the server time). An empty group in the batch is deleted and leaves the batch a head short:
#: rare, as a group is deleted when its last job is leased; the next batch fills in. The head's
#: state test is written ``IS TRUE``: no plan can enter an index on ``state`` with it.
_HEADS = (
    "SELECT g.grp, g.ids[1], g.ids[2] IS NOT NULL, EXISTS (SELECT 1 FROM {S}.flow_limits), c.cs,"
    " c.ns, h.* FROM (SELECT f.grp, f.due, f.rr, ARRAY(SELECT rid FROM {S}.jobs WHERE queue = %s"
    " AND grp = f.grp AND state = 'pending' ORDER BY priority, seq LIMIT 2) AS ids"
    " FROM {S}.flow_groups f WHERE f.queue = %s AND f.due IS NOT NULL AND f.due <= %s"
    " AND " + _NOT_PAUSED + " ORDER BY f.due, f.rr LIMIT %s) AS g LEFT JOIN LATERAL"
    f" (SELECT {COLS} FROM {{S}}.jobs WHERE rid = g.ids[1] AND (state = 'pending') IS TRUE"
    " FOR UPDATE SKIP LOCKED) AS h ON true"
    " CROSS JOIN LATERAL (SELECT array_agg(p) AS cs, array_agg((SELECT count(*) FROM"
    " {S}.flow_slots s WHERE s.name = p)) AS ns FROM unnest(string_to_array(g.grp, '|')) AS p"
    " WHERE p LIKE 'conc:%%') AS c ORDER BY g.due, g.rr"
)
#: The claim's look-up guards (``claim._GUARDED``'s): nothing is due to be promoted, no lease
#: expired; a statement sent with the look-up takes nothing otherwise (its parameters: now,
#: now), and the claim then acts on the look-up's answers first.
_GUARDS = (
    " AND COALESCE((SELECT min(due_at) FROM {S}.jobs WHERE due_at IS NOT NULL) > %s, true)"
    " AND COALESCE((SELECT min(lease_at) FROM {S}.jobs WHERE lease_at IS NOT NULL) > %s, true)"
)
#: ``_HEADS`` sent with the claim's look-up (``flow.first_statement``) for a queue served the
#: general way, guarded (``_GUARDS``); parameters: queue, queue, now, now, now, n.
_HEADS_GUARDED = _HEADS.replace(" AND " + _NOT_PAUSED, _GUARDS + " AND " + _NOT_PAUSED, 1)
#: A group with no limiter: its name is one ``fair:`` part (core/flow.py joins a job's
#: limiters and fair key with ``|``, which a key value never contains).
_FAIR_ONLY = "(f.grp LIKE 'fair:%%' AND strpos(f.grp, '|') = 0)"
#: Fair-only groups (no limiter to ask) claimed in ONE statement (``take``): up to ``%s`` due
#: groups of the queue in ``(due, rr)`` order, cut before the first group with a limiter and
#: empty while ``flow_limits`` has rows (run-time overrides: the general path asks them); each
#: group's head locked (``SKIP LOCKED``: a held head leaves its group due ``BUSY_S`` later),
#: leased like ``claim._CLAIM`` does (the overlay, the same RETURNING columns, the group's
#: batch place where ``_CLAIM`` returns the old ``seq``), its group moved behind the others
#: (``rr`` = ``v``, a fresh number taken in batch order) or deleted when that was its last
#: pending job or it had none. Where ``_HEADS`` + ``claim._LEASE`` + ``_PLACE`` were three
#: statements and a full decode of each head in the worker.
_FAIR = (
    "WITH g AS (SELECT f.ctid AS t, " + _FAIR_ONLY + " AS fair, ARRAY(SELECT ctid FROM {S}.jobs"
    " WHERE queue = %s AND grp = f.grp AND state = 'pending' ORDER BY priority, seq LIMIT 2)"
    " AS ids, nextval('{S}.job_seq') AS v FROM {S}.flow_groups f WHERE f.queue = %s"
    " AND f.due IS NOT NULL AND f.due <= %s AND NOT EXISTS (SELECT 1 FROM {S}.flow_limits)"
    " AND " + _NOT_PAUSED + " ORDER BY f.due, f.rr LIMIT %s),"
    " h AS (SELECT g.t, g.ids, g.v, k.rid, k.ctid AS jt FROM g LEFT JOIN LATERAL (SELECT rid,"
    " ctid FROM {S}.jobs WHERE ctid = g.ids[1] AND state = 'pending' FOR UPDATE SKIP LOCKED)"
    " AS k ON true"
    " WHERE g.v < COALESCE((SELECT min(v) FROM g WHERE NOT fair), 9223372036854775807)),"
    " mv AS (UPDATE {S}.flow_groups f SET due = CASE WHEN h.rid IS NULL THEN %s::float8"
    " ELSE %s::float8 END,"
    " rr = h.v, why = NULL FROM h WHERE f.ctid = h.t AND h.ids[1] IS NOT NULL"
    " AND (h.rid IS NULL OR h.ids[2] IS NOT NULL)),"
    " gone AS (DELETE FROM {S}.flow_groups f USING h WHERE f.ctid = h.t"
    " AND (h.ids[1] IS NULL OR (h.rid IS NOT NULL AND h.ids[2] IS NULL)))"
    " UPDATE {S}.jobs j SET state = 'active', seq = nextval('{S}.job_seq'), lease_at = %s,"
    " token = replace(gen_random_uuid()::text, '-', ''), claims = j.claims + 1,"
    " started_at = %s, worker = %s FROM h WHERE j.ctid = h.jt"
    " RETURNING " + ", ".join(f"j.{c.strip()}" for c in PG_COLS.split(",")) + ", h.v, j.token"
)
#: ``_FAIR`` sent with the claim's look-up (one round trip fewer per fair claim), guarded as
#: ``claim._GUARDED`` is: it takes nothing when a delayed job is due or a lease expired (the
#: look-up's answers are acted on first; then the claim sends ``_FAIR`` on its own). Its
#: parameters: ``_FAIR``'s, with now twice more after the third.
_FAIR_GUARDED = _FAIR.replace(
    " AND NOT EXISTS (SELECT 1 FROM {S}.flow_limits)",
    " AND NOT EXISTS (SELECT 1 FROM {S}.flow_limits)" + _GUARDS,
    1,
)
#: The end of a batch of ``sqllimits.take`` in ONE statement (``PgDb.end_batch``): the new slot
#: rows (``sl``) and waiters (``wt``), the groups' moves and deletes (``_PLACE``'s ``m``, ``gone``,
#: ``mv``) and the admitted heads leased like ``claim._CLAIM`` does (the overlay; the RETURNING
#: columns of ``_FAIR``, the head's place in the batch where ``_FAIR`` returns the group's),
#: where they were four statements (slots, place, lease; a waiter insert per parked group).
#: Every CTE writes another table, so none needs to see another's rows.
_BATCH = (
    _PLACE_WITH + ", mv AS (" + _PLACE_MOVE + "),"
    " sl AS (INSERT INTO {S}.flow_slots (name, job_id) SELECT * FROM unnest(%s::text[],"
    " %s::text[]) ON CONFLICT DO NOTHING),"
    " wt AS (INSERT INTO {S}.flow_waiters (name, queue, grp) SELECT * FROM unnest(%s::text[],"
    " %s::text[], %s::text[]) ON CONFLICT DO NOTHING)"
    " UPDATE {S}.jobs j SET state = 'active', seq = nextval('{S}.job_seq'), lease_at = %s,"
    " token = replace(gen_random_uuid()::text, '-', ''), claims = j.claims + 1,"
    " started_at = %s, worker = %s FROM unnest(%s::bigint[]) WITH ORDINALITY AS p(rid, i)"
    " WHERE j.rid = p.rid AND (j.state = 'pending') IS TRUE"
    " RETURNING " + ", ".join(f"j.{c.strip()}" for c in PG_COLS.split(",")) + ", p.i, j.token"
)
#: ``sqllimits.Slots.flush`` for a whole batch (``PgDb.add_slots``).
_ADD_SLOTS = (
    "INSERT INTO {S}.flow_slots (name, job_id) SELECT * FROM unnest(%s::text[], %s::text[])"
    " ON CONFLICT DO NOTHING"
)
