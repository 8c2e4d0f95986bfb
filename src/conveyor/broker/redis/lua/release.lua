-- release.lua: give a leased job back (transition: active -> pending | scheduled).
--
-- The token must match and the job must be active. penalize "0" gives the attempt back
-- (attempts - 1, not below 0). A "released" entry goes to the job's history (attempt after the
-- adjustment, the releasing worker). Without a delay the job is pending at once, behind the
-- jobs of its priority; with one it is scheduled until run_at. Both push a wake-up marker.
--
-- KEYS: the 14 queue keys (_lib.lua)
-- ARGV: [1] queue name  [2] id  [3] token  [4] now  [5] run_at ("" = ready now)
--       [6] penalize "1"/"0"  [7] note  [8] events_max
-- Returns: {1, new_state} | {-2} stale token or not active (LeaseLost)
local q = qkeys(0)
local qname, id, token, now, run_at = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local key = q.job .. id
local f = hmget(key, 'state', 'token', 'attempts', 'worker_id', 'priority', 'task')
if not f or f[1] ~= 'active' or f[2] ~= token then return {-2} end
local attempts = tonumber(f[3]) or 0
if ARGV[6] == '0' then
  attempts = math.max(0, attempts - 1)
  redis.call('HSET', key, 'attempts', attempts)
end
history(key, 'released', now, attempts, ARGV[7], f[4])
redis.call('HDEL', key, 'lease_expires_at', 'worker_id', 'token')
redis.call('ZREM', q.leases, id)
emit(q, ARGV[8], 'type', 'released', 'job_id', id, 'task', f[6] or '',
  'at', now, 'note', ARGV[7])
if run_at ~= '' then
  redis.call('HSET', key, 'state', 'scheduled', 'run_at', run_at)
  redis.call('ZADD', q.scheduled, run_at, id)
  wake(q)  -- idle workers recompute their next due time
  return {1, 'scheduled'}
end
redis.call('HSET', key, 'run_at', now)
make_ready(q, id, tonumber(f[5]) or 0)
wake(q)
return {1, 'pending'}
