-- run_now.lua: an operator makes a delayed job due now
-- (transition: scheduled | retry_scheduled -> pending, run_at = now). Attempts and errors are
-- kept; a "run_now" history entry records it; the job goes behind the ready jobs of its
-- priority and idle workers are woken.
--
-- Input
--   KEYS: the 14 queue keys (_lib.lua)
--   ARGV: [1] id  [2] now
-- Output: CODE_OK made due | CODE_NO not found or not scheduled / retry_scheduled
local q = qkeys(0)
local id, now = ARGV[1], ARGV[2]
local key = q.job .. id
local f = hmget(key, 'state', 'attempts', 'priority')
if not f then return CODE_NO end
if f[1] == 'scheduled' then
  redis.call('ZREM', q.scheduled, id)
elseif f[1] == 'retry_scheduled' then
  redis.call('ZREM', q.retry, id)
else
  return CODE_NO
end
history(key, 'run_now', now, f[2] or '0', 'made due now by an operator', nil)
redis.call('HSET', key, 'run_at', now)
make_ready(q, id, tonumber(f[3]) or 0)
wake(q)
return CODE_OK
