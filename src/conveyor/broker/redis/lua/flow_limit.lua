-- flow_limit.lua: set or clear a run-time limit in one queue (issue 15; flowadmin.py) and put
-- every waiting group of the queue back in line, in ONE atomic step: a claim (claim.lua reads
-- f:limits and the group lists inside its own script) sees either the old limit with the old
-- lists or the new limit with every throttled / parked group in f:groups, never a mix. (Done
-- as separate commands, a claim that throttled a group between the read of f:gdelay and its
-- DEL lost that group from every list: its jobs never ran.)
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] limiter, bucket or slot name  [2] JSON spec, '' = clear the override
--         [3] the override's version (<p>:flow:seq, flowadmin.py): a write older than the
--             one the queue holds (f:limitv) changes nothing, so an operator's write and the
--             copy into a newly registered queue may arrive in either order
-- Output: the number of groups put back in line (-1: an older version, ignored)
local q = qkeys(0)
local F = q.flow
local version = tonumber(ARGV[3] or '')
if version then
  local held = tonumber(redis.call('HGET', F .. 'limitv', ARGV[1]) or '')
  if held and held >= version then return -1 end
  redis.call('HSET', F .. 'limitv', ARGV[1], version)
end
if ARGV[2] == '' then
  redis.call('HDEL', F .. 'limits', ARGV[1])
else
  redis.call('HSET', F .. 'limits', ARGV[1], ARGV[2])
end

local parked = redis.call('SMEMBERS', F .. 'parked')
local delayed = redis.call('ZRANGE', F .. 'gdelay', 0, -1)
local moved = 0
for _, names in ipairs({parked, delayed}) do
  for i = 1, #names, 1000 do  -- unpack() has a small stack: chunks
    local chunk, groups = {}, {}
    for j = i, math.min(i + 999, #names) do
      chunk[#chunk + 1] = 0
      chunk[#chunk + 1] = names[j]
      groups[#groups + 1] = names[j]
    end
    redis.call('ZADD', F .. 'groups', unpack(chunk))
    redis.call('HDEL', F .. 'why', unpack(groups))
    moved = moved + #groups
  end
end
for _, g in ipairs(parked) do  -- no longer waiting for a slot: off the slots' wait sets
  for part in string.gmatch(g, '[^|]+') do
    if string.sub(part, 1, 5) == 'conc:' then redis.call('SREM', F .. 'wait:' .. part, g) end
  end
end
redis.call('DEL', F .. 'parked', F .. 'gdelay')
return moved
