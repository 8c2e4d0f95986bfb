-- fail.lua: record a failed attempt (transition: active -> retry_scheduled | dead_letter).
--
-- The token must match and the job must be active. The error entry is appended to "errors"
-- (JSON Lines); "attempt" is filled in from the job when the caller did not give it. With a
-- retry time the job waits in the retry set (and idle workers get a wake-up marker, so they
-- learn its due time); without one it is dead-lettered (dead set, capped
-- at dead_letter_max). A non-empty stub payload replaces an undecodable payload, whose bytes
-- are kept in field "raw" (used for kind decode_error right after a claim).
--
-- KEYS: the 14 queue keys (_lib.lua)
-- ARGV: [1] queue name  [2] id  [3] token  [4] now  [5] error entry JSON object
--       [6] "1" if the entry has "attempt", else "0"  [7] last_error  [8] retry_at ("" = dead)
--       [9] error kind (dead_lettered reason)  [10] dead_letter_max  [11] events_max
--       [12] stub payload ("" = keep payload)
-- Returns: {1, new_state} | {-2} stale token or not active (LeaseLost)
local q = qkeys(0)
local qname, id, token, now = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local entry, retry_at, maxlen = ARGV[5], ARGV[8], ARGV[11]
local key = q.job .. id
local f = hmget(key, 'state', 'token', 'attempts', 'task')
if not f or f[1] ~= 'active' or f[2] ~= token then return {-2} end
local attempts = f[3] or '0'
if ARGV[6] ~= '1' then
  if entry == '{}' then entry = '{"attempt":' .. attempts .. '}'
  else entry = '{"attempt":' .. attempts .. ',' .. string.sub(entry, 2) end
end
append_line(key, 'errors', entry, nil)
redis.call('HSET', key, 'last_error', ARGV[7])
redis.call('HDEL', key, 'lease_expires_at', 'token')
redis.call('ZREM', q.leases, id)
if ARGV[12] ~= '' then
  redis.call('HSET', key, 'raw', redis.call('HGET', q.payloads, id) or '')
  redis.call('HSET', q.payloads, id, ARGV[12])
end
local task = f[4] or ''
emit(q, maxlen, 'type', 'failed', 'job_id', id, 'task', task, 'at', now,
  'attempt', attempts, 'error', ARGV[7])
if retry_at ~= '' then
  redis.call('HSET', key, 'state', 'retry_scheduled', 'run_at', retry_at)
  redis.call('ZADD', q.retry, retry_at, id)
  wake(q)  -- an idle worker claims, learns this due time and sleeps until it
  emit(q, maxlen, 'type', 'retry_scheduled', 'job_id', id, 'task', task,
    'at', now, 'run_at', retry_at)
  return {1, 'retry_scheduled'}
end
redis.call('HSET', key, 'state', 'dead_letter', 'finished_at', now)
emit(q, maxlen, 'type', 'dead_lettered', 'job_id', id, 'task', task,
  'at', now, 'reason', ARGV[9])
finish(q, q.dead, id, now, tonumber(ARGV[10]))
return {1, 'dead_letter'}
