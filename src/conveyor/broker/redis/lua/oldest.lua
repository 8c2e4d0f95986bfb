-- oldest.lua: the ready time (run_at, else created_at) of the oldest pending job of a queue.
-- Read-only. Exact up to `scan_max` pending jobs; above that it looks at the head of every
-- priority band (FIFO order within a band approximates ready-time order).
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] scan_max
-- Output: the time as a string, or false (nil) when no job is pending
local q = qkeys(0)
local members
if redis.call('ZCARD', q.ready) <= tonumber(ARGV[1]) then
  members = redis.call('ZRANGE', q.ready, 0, -1)
else
  members = {}
  local floor = '-inf'
  for _ = 1, 1000 do
    local head = redis.call('ZRANGEBYSCORE', q.ready, floor, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #head == 0 then break end
    members[#members + 1] = head[1]
    floor = '(' .. head[2]
  end
end
local best, best_text = nil, false
for _, m in ipairs(members) do
  local f = hmget(q.job .. member_id(m), 'run_at', 'created_at')
  local t = f and (f[1] or f[2])
  if t and tonumber(t) and (best == nil or tonumber(t) < best) then
    best, best_text = tonumber(t), t
  end
end
return best_text
