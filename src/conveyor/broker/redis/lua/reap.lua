-- reap.lua: return jobs whose lease deadline passed (transition: active -> pending, or
-- active -> dead_letter on the max_lost-th loss: a poison pill, kind worker_lost), then
-- housekeeping: completed / cancelled jobs finished before their TTL cutoff are deleted.
--
-- Each loss: lost + 1, a worker_lost entry in "errors", last_error, "lease_lost" event.
-- Safe to run concurrently from many processes: a lease is only reaped while its job is
-- active and its deadline <= now.
--
-- KEYS: the 14 queue keys (_lib.lua)
-- ARGV: [1] queue name  [2] now  [3] max_lost  [4] batch limit  [5] events_max
--       [6] dead_letter_max  [7] completed cutoff (now - completed_ttl)
--       [8] cancelled cutoff (now - cancelled_ttl)
-- Returns: {reaped, more}; more = 1 when the batch limit was reached (call again)
local q = qkeys(0)
local qname, now, max_lost, limit, maxlen = ARGV[1], ARGV[2], tonumber(ARGV[3]),
  tonumber(ARGV[4]), ARGV[5]
local expired = redis.call('ZRANGEBYSCORE', q.leases, '-inf', now, 'LIMIT', 0, limit)
local reaped = 0
for _, id in ipairs(expired) do
  redis.call('ZREM', q.leases, id)
  local key = q.job .. id
  local f = hmget(key, 'state', 'worker_id', 'lost', 'attempts', 'priority', 'task')
  if f and f[1] == 'active' then
    local lost = (tonumber(f[3]) or 0) + 1
    local msg = 'lease expired (lost delivery ' .. lost .. ' of ' .. max_lost .. ')'
    append_line(key, 'errors', '{"attempt":' .. (f[4] or '0') .. ',"kind":"worker_lost",'
      .. '"type":"","message":' .. cjson.encode(msg) .. ',"traceback":"","worker":'
      .. jstr(f[2]) .. ',"at":' .. now .. '}', nil)
    redis.call('HSET', key, 'lost', lost, 'last_error', msg, 'run_at', now)
    redis.call('HDEL', key, 'lease_expires_at', 'worker_id', 'token')
    emit(q, maxlen, 'type', 'lease_lost', 'job_id', id, 'task', f[6] or '',
      'at', now, 'worker', f[2] or '', 'lost', lost)
    if lost >= max_lost then
      redis.call('HSET', key, 'state', 'dead_letter', 'finished_at', now)
      emit(q, maxlen, 'type', 'dead_lettered', 'job_id', id, 'task', f[6] or '', 'at', now, 'reason', 'worker_lost')
      finish(q, q.dead, id, now, tonumber(ARGV[6]))
    else
      make_ready(q, id, tonumber(f[5]) or 0)
      wake(q)
    end
    reaped = reaped + 1
  end
end
for _, pair in ipairs({{q.completed, ARGV[7]}, {q.cancelled, ARGV[8]}}) do
  local old = redis.call('ZRANGEBYSCORE', pair[1], '-inf', pair[2], 'LIMIT', 0, 1000)
  if #old > 0 then
    drop_jobs(q, old)
    redis.call('ZREM', pair[1], unpack(old))
  end
end
local more = 0
if #expired >= limit then more = 1 end
return {reaped, more}
