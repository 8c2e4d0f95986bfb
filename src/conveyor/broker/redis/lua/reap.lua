-- reap.lua: return jobs whose lease deadline passed (transition: active -> pending, or
-- active -> dead_letter on the max_lost-th loss: a poison pill, kind worker_lost), then
-- housekeeping: completed / cancelled jobs finished before their TTL cutoff are deleted.
--
-- Each loss: lost + 1, a worker_lost entry in "errors", last_error, "lease_lost" event
-- (expire_leases in _lib.lua, which claim.lua runs too).
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
local reaped, readied, more = expire_leases(q, now, max_lost, limit, maxlen, tonumber(ARGV[6]))
for _ = 1, math.min(readied, WAKE_MAX) do wake(q) end
for _, pair in ipairs({{q.completed, ARGV[7]}, {q.cancelled, ARGV[8]}}) do
  local old = redis.call('ZRANGEBYSCORE', pair[1], '-inf', pair[2], 'LIMIT', 0, 1000)
  if #old > 0 then
    drop_jobs(q, old)
    redis.call('ZREM', pair[1], unpack(old))
  end
end
return {reaped, more}
