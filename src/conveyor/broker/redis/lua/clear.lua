-- clear.lua: delete a batch of the waiting jobs of one queue (pending, scheduled and
-- retry_scheduled). Active jobs live in the leases set and finished ones in their terminal
-- sets, which this script never reads: a job claimed before it runs keeps its lease (a claim
-- and a clear are both atomic scripts, so a job is either still ready here or already leased).
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] batch limit
-- Output: the number of jobs deleted (== limit: call again for the rest)
local q = qkeys(0)
local limit = tonumber(ARGV[1])
local total = 0
for _, set in ipairs({q.ready, q.scheduled, q.retry}) do
  local left = limit - total
  if left <= 0 then break end
  local members = redis.call('ZRANGE', set, 0, left - 1)
  if #members > 0 then
    local ids = {}
    for i, m in ipairs(members) do
      if set == q.ready then ids[i] = member_id(m) else ids[i] = m end
    end
    drop_jobs(q, ids)
    redis.call('ZREM', set, unpack(members))
    total = total + #members
  end
end
return total
