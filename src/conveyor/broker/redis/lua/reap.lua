-- reap.lua: return jobs whose lease deadline passed (transition: active -> pending, or
-- active -> dead_letter on the max_lost-th loss: a poison pill, kind worker_lost), then
-- housekeeping: completed / cancelled jobs finished before their TTL cutoff are deleted.
--
-- Each loss: lost + 1, a worker_lost entry in "errors", last_error, "lease_lost" event
-- (expire_leases in _timers.lua, which claim.lua runs too).
-- Safe to run concurrently from many processes: a lease is only reaped while its job is
-- active and its deadline <= now.
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] options (JSON object): queue, now, max_lost, limit (batch limit), events_max,
--         dead_max (dead_letter_max), completed_cutoff (now - completed_ttl),
--         cancelled_cutoff (now - cancelled_ttl)
-- Output: {reaped, more}; more = CODE_MORE when the batch limit was reached (call again),
--         else CODE_NO
local q = qkeys(0)
local o = cjson.decode(ARGV[1])
local now = o.now
local reaped, readied, more = expire_leases(q, now, o.max_lost, o.limit, o.events_max,
  o.dead_max)
for _ = 1, math.min(readied, WAKE_MAX) do wake(q) end
for _, pair in ipairs({{q.completed, o.completed_cutoff}, {q.cancelled, o.cancelled_cutoff}}) do
  local old = redis.call('ZRANGEBYSCORE', pair[1], '-inf', pair[2], 'LIMIT', 0, 1000)
  if #old > 0 then
    drop_jobs(q, old, true)
    redis.call('ZREM', pair[1], unpack(old))
  end
end
return {reaped, more}
