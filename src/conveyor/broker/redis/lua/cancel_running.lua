-- cancel_running.lua: record that a running job was cancelled by an operator
-- (transition: active -> cancelled, event cancel_running).
--
-- Called by the worker holding the lease once it has stopped the job: the token must match and
-- the job must be active (fencing: a worker whose lease was lost changes nothing). The lease is
-- dropped at once, a "cancelled" entry goes to the history (with the note and the worker) and
-- the job joins the cancelled set (kept cancelled_ttl, like any cancelled job). Never retried.
-- A workflow node's dependants are ended or released in the same step (wf_done in _wf.lua);
-- the concurrency slots of a flow-controlled job free (free_slots).
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] options (JSON object): queue, now, note, events_max
--         then the job: [2] id  [3] token
-- Output: {CODE_OK, 'cancelled'} | {CODE_LEASE_LOST} stale token or not active (LeaseLost)
local q = qkeys(0)
local o = cjson.decode(ARGV[1])
local now, note = o.now, o.note
local id, token = ARGV[2], ARGV[3]
local key = q.job .. id
local L = lease_of(q, id, key, token)  -- its run entry, or an older version's hash fields
if not L then return {CODE_LEASE_LOST} end
if L.grp then free_slots(q, id, key, L.grp) end  -- flow control (issue 15): its slots free
lease_end(q, id, key, L, false)
history(key, 'cancelled', now, L.attempts, note, L.worker ~= '' and L.worker or nil)
redis.call('HSET', key, 'state', 'cancelled', 'finished_at', now)
emit(q, o.events_max, 'type', 'cancelled', 'job_id', id, 'task', L.task,
  'at', now, 'note', note)
finish(q, q.cancelled, id, now, -1)
if L.wf then wf_done(q, o.queue, id, false, nil, now, o.events_max) end
return {CODE_OK, 'cancelled'}
