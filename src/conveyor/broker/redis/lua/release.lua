-- release.lua: give a leased job back (transition: active -> pending | scheduled).
--
-- The token must match and the job must be active (lease_of in _run.lua: its run entry, or
-- the hash fields of a job leased by an older version); the run entry goes (lease_end).
-- penalize "0" gives the attempt back (attempts - 1, not below 0). A "released" entry goes to
-- the job's history (attempt after the adjustment, the releasing worker). Without a delay the
-- job is pending at once, behind the jobs of its priority; with one it is scheduled until
-- run_at. Both push a wake-up marker.
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] options (JSON object): queue, now, run_at ("" = ready now), penalize ("1" /
--         "0"), note, events_max
--         then the job: [2] id  [3] token
-- Output: {CODE_OK, new_state} | {CODE_LEASE_LOST} stale token or not active (LeaseLost)
local q = qkeys(0)
local o = cjson.decode(ARGV[1])
local qname, now, run_at, note = o.queue, o.now, o.run_at, o.note
local id, token = ARGV[2], ARGV[3]
local key = q.job .. id
local L = lease_of(q, id, key, token, 'priority')  -- run entry or older hash fields
if not L then return {CODE_LEASE_LOST} end
local attempts = tonumber(L.attempts) or 0
if o.penalize == '0' then attempts = math.max(0, attempts - 1) end
L.attempts = string.format('%d', attempts)
lease_end(q, id, key, L, true)
if not L.run then redis.call('HSET', key, 'attempts', L.attempts) end
history(key, 'released', now, attempts, note, L.worker ~= '' and L.worker or nil)
emit(q, o.events_max, 'type', 'released', 'job_id', id, 'task', L.task,
  'at', now, 'note', note)
if run_at ~= '' then
  redis.call('HSET', key, 'state', 'scheduled', 'run_at', run_at)
  redis.call('ZADD', q.scheduled, run_at, id)
  wake(q)  -- idle workers recompute their next due time
  return {CODE_OK, 'scheduled'}
end
redis.call('HSET', key, 'run_at', now)
if L.grp then free_slots(q, id, key, L.grp) end
make_ready(q, id, tonumber(L.x[1]) or 0, L.grp)
wake(q)
return {CODE_OK, 'pending'}
