-- purge.lua: delete terminal jobs of one queue finished at or before a cutoff
-- (completed, dead_letter, cancelled or expired; no state change for any other job). Each
-- deleted job's idempotency key is freed with it, fenced (release_keys in _lib.lua).
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] state ("completed" | "dead_letter" | "cancelled" | "expired")  [2] cutoff ("+inf" = all)
--         [3] batch limit  then optional job ids (only these are considered)
-- Output: the number of jobs deleted (== limit: call again for the rest)
local q = qkeys(0)
local sets = {completed = q.completed, dead_letter = q.dead, cancelled = q.cancelled,
  expired = q.expired}
local set = sets[ARGV[1]]
if not set then return redis.error_reply('purge: not a terminal state: ' .. ARGV[1]) end
local cutoff = ARGV[2]
local ncut = tonumber(cutoff)
local doomed = {}
if #ARGV > 3 then
  for i = 4, #ARGV do
    local score = redis.call('ZSCORE', set, ARGV[i])
    if score and tonumber(score) <= ncut then doomed[#doomed + 1] = ARGV[i] end
  end
else
  doomed = redis.call('ZRANGEBYSCORE', set, '-inf', cutoff, 'LIMIT', 0, tonumber(ARGV[3]))
end
if #doomed > 0 then
  release_keys(q, doomed)
  drop_jobs(q, doomed)
  redis.call('ZREM', set, unpack(doomed))
end
return #doomed
