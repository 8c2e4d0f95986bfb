-- delete_job.lua: an operator deletes one job that is not running (any state but active):
-- it leaves its state's set and its hash and payload are dropped. No event (like purge).
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] id  [2] the job's idempotency key ('' = none): released with the job, fenced
--         (only while its value "<expires_at>|<id>" still names this job)
-- Output: CODE_OK deleted | CODE_NO not found or active
local q = qkeys(0)
local id = ARGV[1]
local f = hmget(q.job .. id, 'state', 'rk', 'grp')
if not f or not f[1] then return CODE_NO end
local function release_key()
  local key = ARGV[2]
  if not key or key == '' then return end
  local v = redis.call('GET', q.idem .. key)
  if v and string.sub(v, -(#id + 1)) == '|' .. id then redis.call('DEL', q.idem .. key) end
end
if f[1] == 'pending' and f[3] then  -- waiting in a flow group (issue 15)
  redis.call('ZREM', q.flow .. 'g:' .. f[3], f[2] or id)
  redis.call('DECR', q.flow .. 'npend')
  drop_jobs(q, {id})
  release_key()
  return CODE_OK
end
local sets = {
  scheduled = q.scheduled, retry_scheduled = q.retry, completed = q.completed,
  dead_letter = q.dead, cancelled = q.cancelled, expired = q.expired,
}
if f[1] == 'pending' then
  redis.call('ZREM', q.ready, f[2] or id)
elseif sets[f[1]] then
  redis.call('ZREM', sets[f[1]], id)
else
  return CODE_NO
end
drop_jobs(q, {id})
release_key()
return CODE_OK
