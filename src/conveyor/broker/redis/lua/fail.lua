-- fail.lua: record a failed attempt (transition: active -> retry_scheduled | dead_letter).
--
-- The token must match and the job must be active (lease_of in _run.lua: its run entry, or
-- the hash fields of a job leased by an older version); the run entry goes (lease_end). The
-- error entry is appended to "errors" (JSON Lines); "attempt" is filled in from the job when
-- the caller did not give it. With a retry time the job waits in the retry set (and idle
-- workers get a wake-up marker, so they learn its due time); without one it is dead-lettered
-- (dead set, capped at dead_letter_max). A non-empty stub payload replaces an undecodable
-- payload, whose bytes are kept in field "raw" (used for kind decode_error right after a
-- claim). A dead-lettered workflow node ends or releases its dependants in the same step
-- (wf_done in _wf.lua).
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] options (JSON object): queue, now, retry_at ("" = dead-letter), kind (error
--         kind: the dead_lettered reason), dead_max (dead_letter_max), events_max,
--         has_attempt ("1" if the entry has "attempt", else "0")
--         then the job's record: [2] id  [3] token  [4] error entry JSON object
--         [5] last_error  [6] stub payload ("" = keep payload)
-- Output: {CODE_OK, new_state} | {CODE_LEASE_LOST} stale token or not active (LeaseLost)
local q = qkeys(0)
local o = cjson.decode(ARGV[1])
local qname, now, retry_at, maxlen = o.queue, o.now, o.retry_at, o.events_max
local id, token, entry = ARGV[2], ARGV[3], ARGV[4]
local key = q.job .. id
local L = lease_of(q, id, key, token)  -- its run entry, or an older version's hash fields
if not L then return {CODE_LEASE_LOST} end
if L.grp then free_slots(q, id, key, L.grp) end
local attempts = L.attempts
if o.has_attempt ~= '1' then
  if entry == '{}' then entry = '{"attempt":' .. attempts .. '}'
  else entry = '{"attempt":' .. attempts .. ',' .. string.sub(entry, 2) end
end
lease_end(q, id, key, L, false)
append_line(key, 'errors', entry, nil)
redis.call('HSET', key, 'last_error', ARGV[5])
if ARGV[6] ~= '' then
  redis.call('HSET', key, 'raw', redis.call('HGET', q.payloads, id) or '')
  redis.call('HSET', q.payloads, id, ARGV[6])
end
local task = L.task
emit(q, maxlen, 'type', 'failed', 'job_id', id, 'task', task, 'at', now,
  'attempt', attempts, 'error', ARGV[5])
if retry_at ~= '' then
  redis.call('HSET', key, 'state', 'retry_scheduled', 'run_at', retry_at)
  redis.call('ZADD', q.retry, retry_at, id)
  wake(q)  -- an idle worker claims, learns this due time and sleeps until it
  emit(q, maxlen, 'type', 'retry_scheduled', 'job_id', id, 'task', task,
    'at', now, 'run_at', retry_at)
  return {CODE_OK, 'retry_scheduled'}
end
redis.call('HSET', key, 'state', 'dead_letter', 'finished_at', now)
emit(q, maxlen, 'type', 'dead_lettered', 'job_id', id, 'task', task,
  'at', now, 'reason', o.kind)
finish(q, q.dead, id, now, o.dead_max)
if L.wf then wf_done(q, qname, id, false, nil, now, maxlen) end
return {CODE_OK, 'dead_letter'}
