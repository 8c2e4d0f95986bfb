-- debounce.lua: a newer enqueue replaces the arguments of a job that still waits (issue 15,
-- `debounce=`): its payload is replaced; a scheduled job also takes the new run_at (its delay
-- restarts). No state change; a "debounced" history entry records it.
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] options (JSON object): id, now, run_at, payload (the new envelope)
-- Output: CODE_OK replaced | CODE_NO not found or no longer waiting
local q = qkeys(0)
local o = cjson.decode(ARGV[1])
local id, now = o.id, o.now
local key = q.job .. id
local f = hmget(key, 'state', 'attempts')
if not f or (f[1] ~= 'pending' and f[1] ~= 'scheduled' and f[1] ~= 'retry_scheduled') then
  return CODE_NO
end
redis.call('HSET', q.payloads, id, o.payload)
if f[1] == 'scheduled' then
  redis.call('HSET', key, 'run_at', o.run_at)
  redis.call('ZADD', q.scheduled, o.run_at, id)
end
history(key, 'debounced', now, f[2] or '0', 'arguments replaced by a newer enqueue', nil)
return CODE_OK
