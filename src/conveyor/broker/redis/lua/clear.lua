-- clear.lua: delete a batch of the waiting jobs of one queue (pending, scheduled and
-- retry_scheduled). Active jobs live in the leases set and finished ones in their terminal
-- sets, which this script never reads: a job claimed before it runs keeps its lease (a claim
-- and a clear are both atomic scripts, so a job is either still ready here or already leased).
-- Pending jobs waiting in flow groups (issue 15: f:g:<group>, see keys.py) go too, with the
-- f:npend count; a group left empty is forgotten everywhere (f:groups, f:gdelay, f:parked,
-- f:why, f:wait:<slot>), so no group key outlives a clear. Buckets and the slots of running
-- jobs stay: they belong to limiters and leases, not to waiting jobs. Each deleted job's
-- idempotency key is freed with it, fenced (release_keys in _lib.lua).
-- A workflow node (it has a graph record, <p>:{q}:wf:<id>) is cancelled instead, as cancel.lua does, and its
-- dependants end or are released in the same step (wf_done in _wf.lua): deleting it would
-- leave them waiting for ever. One released into this queue is cleared by a later call.
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] batch limit  [2] queue name  [3] now  [4] events_max
-- Output: the number of jobs deleted or cancelled (call again until 0: a cancel may have
-- released a dependant into this queue)
local q = qkeys(0)
local limit = tonumber(ARGV[1])
local qname, now, emax = ARGV[2], ARGV[3], ARGV[4]
local total = 0
-- the graph records' key prefix (same hash slot as the queue's keys)
local wf = wf_qkeys(string.match(q.job, '^([^{]*):{'), qname).wf

-- a workflow node off its set: cancelled (cancel.lua), its dependants ended or released
local function cancel_node(id)
  local key = q.job .. id
  local f = hmget(key, 'attempts', 'task', 'wf') or {}
  redis.call('HSET', key, 'state', 'cancelled', 'finished_at', now)
  redis.call('HDEL', key, 'rk')
  history(key, 'cancelled', now, f[1] or '0', '', nil)
  emit(q, emax, 'type', 'cancelled', 'job_id', id, 'task', f[2] or '', 'at', now)
  finish(q, q.cancelled, id, now, -1)
  if f[3] then wf_done(q, qname, id, false, nil, now, emax) end  -- it has dependants
end

-- delete the plain jobs of `ids`, cancel the workflow nodes among them
local function clear_ids(ids)
  local plain = {}
  for _, id in ipairs(ids) do
    if redis.call('EXISTS', wf .. id) == 1 then
      cancel_node(id)
    else
      plain[#plain + 1] = id
    end
  end
  release_keys(q, plain)
  drop_jobs(q, plain)
end

for _, set in ipairs({q.ready, q.scheduled, q.retry}) do
  local left = limit - total
  if left <= 0 then break end
  local members = redis.call('ZRANGE', set, 0, left - 1)
  if #members > 0 then
    local ids = {}
    for i, m in ipairs(members) do
      if set == q.ready then ids[i] = member_id(m) else ids[i] = m end
    end
    redis.call('ZREM', set, unpack(members))
    clear_ids(ids)
    total = total + #members
  end
end

-- ------------------------------------------------------------ flow groups (issue 15)
local F = q.flow

-- the group is empty: off every list, its reason and its slot waits
local function forget(g)
  redis.call('ZREM', F .. 'groups', g)
  redis.call('ZREM', F .. 'gdelay', g)
  redis.call('SREM', F .. 'parked', g)
  redis.call('HDEL', F .. 'why', g)
  for part in string.gmatch(g, '[^|]+') do  -- its concurrency slots are the conc: parts
    if string.sub(part, 1, 5) == 'conc:' then redis.call('SREM', F .. 'wait:' .. part, g) end
  end
end

-- delete up to `left` jobs of group g; entries whose job is no longer pending (stale) are
-- dropped from the group but their jobs kept. Returns how many entries went.
local function clear_group(g, left)
  local gk = F .. 'g:' .. g
  local members = redis.call('ZRANGE', gk, 0, left - 1)
  if #members > 0 then
    local ids = {}
    for _, m in ipairs(members) do
      local id = member_id(m)
      local f = hmget(q.job .. id, 'state')
      if f and f[1] == 'pending' then ids[#ids + 1] = id end
    end
    redis.call('ZREM', gk, unpack(members))
    redis.call('DECRBY', F .. 'npend', #members)
    clear_ids(ids)
  end
  if redis.call('EXISTS', gk) == 0 then forget(g) end
  return #members
end

-- every group holding pending jobs is in line (f:groups), throttled (f:gdelay) or parked
for _, list in ipairs({'groups', 'gdelay', 'parked'}) do
  local key = F .. list
  while total < limit do
    local names
    if list == 'parked' then
      names = redis.call('SRANDMEMBER', key, 100)
    else
      names = redis.call('ZRANGE', key, 0, 99)
    end
    if #names == 0 then break end
    for _, g in ipairs(names) do
      total = total + clear_group(g, limit - total)
      if total >= limit then break end
    end
  end
end
if total < limit and tonumber(redis.call('GET', F .. 'npend') or '0') <= 0 then
  redis.call('DEL', F .. 'npend')  -- nothing waits in a group any more: no stale count
end
return total
