-- cancel.lua: cancel a job that has not started
-- (transition: scheduled | pending | retry_scheduled | waiting -> cancelled).
-- A workflow node's dependants are ended or released in the same step (wf_done in _wf.lua).
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] queue name  [2] id  [3] now  [4] events_max
-- Output: CODE_OK cancelled | CODE_NO not found or not cancellable (active or terminal)
local q = qkeys(0)
local qname, id, now = ARGV[1], ARGV[2], ARGV[3]
local key = q.job .. id
local f = hmget(key, 'state', 'rk', 'attempts', 'task', 'wf', 'grp')
if not f then return CODE_NO end
local state = f[1]
if state == 'pending' and f[6] then  -- waiting in a flow group (issue 15)
  redis.call('ZREM', q.flow .. 'g:' .. f[6], f[2] or id)
  redis.call('DECR', q.flow .. 'npend')
elseif state == 'pending' then
  redis.call('ZREM', q.ready, f[2] or id)
elseif state == 'scheduled' then
  redis.call('ZREM', q.scheduled, id)
elseif state == 'retry_scheduled' then
  redis.call('ZREM', q.retry, id)
elseif state == 'waiting' then
  redis.call('ZREM', wf_qkeys(string.match(q.job, '^([^{]*):{'), qname).waiting, id)
else
  return CODE_NO
end
redis.call('HSET', key, 'state', 'cancelled', 'finished_at', now)
redis.call('HDEL', key, 'rk')
history(key, 'cancelled', now, f[3] or '0', '', nil)
emit(q, ARGV[4], 'type', 'cancelled', 'job_id', id, 'task', f[4] or '',
  'at', now)
finish(q, q.cancelled, id, now, -1)
if f[5] then wf_done(q, qname, id, false, nil, now, ARGV[4]) end
return CODE_OK
