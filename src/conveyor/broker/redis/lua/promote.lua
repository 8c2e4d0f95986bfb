-- promote.lua: make due delayed jobs of one queue ready
-- (transition: scheduled | retry_scheduled -> pending when run_at <= now).
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] now  [2] limit
-- Output: the number of jobs promoted (wakes idle workers when > 0)
local q = qkeys(0)
local moved = promote(q, ARGV[1], tonumber(ARGV[2]))
if moved > 0 then wake(q) end
return moved
