-- requeue.lua: revive a dead-lettered, cancelled or expired job (transition: dead_letter |
-- cancelled | expired -> pending; an expired job loses its expires_at). attempts and lost are reset to 0, errors are kept, a "requeued" history entry
-- records the attempts it had; the job goes behind the ready jobs of its priority.
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] queue name  [2] id  [3] now  [4] events_max
-- Output: CODE_OK requeued | CODE_NO not found or not dead_letter / cancelled / expired
local q = qkeys(0)
local qname, id, now = ARGV[1], ARGV[2], ARGV[3]
local key = q.job .. id
local f = hmget(key, 'state', 'attempts', 'priority', 'task', 'grp')
if not f then return CODE_NO end
if f[1] == 'dead_letter' then
  redis.call('ZREM', q.dead, id)
elseif f[1] == 'cancelled' then
  redis.call('ZREM', q.cancelled, id)
elseif f[1] == 'expired' then
  redis.call('ZREM', q.expired, id)
else
  return CODE_NO
end
local attempts = f[2] or '0'
history(key, 'requeued', now, attempts, 'after ' .. attempts .. ' attempts', nil)
redis.call('HSET', key, 'attempts', 0, 'lost', 0, 'run_at', now)
redis.call('HDEL', key, 'finished_at', 'result', 'expires_at')
make_ready(q, id, tonumber(f[3]) or 0, f[5])
wake(q)
emit(q, ARGV[4], 'type', 'requeued', 'job_id', id, 'task', f[4] or '',
  'at', now)
return CODE_OK
