-- delete_job.lua: an operator deletes one job that is not running (any state but active):
-- it leaves its state's set and its hash and payload are dropped. No event (like purge).
--
-- Input
--   KEYS: the 14 queue keys (_lib.lua)
--   ARGV: [1] id
-- Output: CODE_OK deleted | CODE_NO not found or active
local q = qkeys(0)
local id = ARGV[1]
local f = hmget(q.job .. id, 'state', 'rk')
if not f or not f[1] then return CODE_NO end
local sets = {
  scheduled = q.scheduled, retry_scheduled = q.retry, completed = q.completed,
  dead_letter = q.dead, cancelled = q.cancelled,
}
if f[1] == 'pending' then
  redis.call('ZREM', q.ready, f[2] or id)
elseif sets[f[1]] then
  redis.call('ZREM', sets[f[1]], id)
else
  return CODE_NO
end
drop_jobs(q, {id})
return CODE_OK
