-- search.lua: filter one state set of one queue for search (read-only, no state change).
--
-- Looks at the members [offset, offset + count) of one state set and returns the jobs that
-- pass every given filter, with their created_at, so the client can sort newest first and
-- fetch only one page. The text filter is a prefilter (lower-cased substring of the envelope);
-- the client checks it exactly on the few jobs that pass.
--
-- Set "flow" stands for the pending jobs waiting in flow groups (issue 15, f:g:<group>, see
-- keys.py): every group in line, throttled or parked, in name order, its members in claim
-- order; an entry whose job is no longer pending (stale, dropped by the next claim) is skipped.
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] options (JSON object): set ("ready" | "flow" | "scheduled" | "retry" | "leases" |
--         "waiting" | "completed" | "dead" | "cancelled" | "expired"), offset, count, prefix (id
--         prefix), task, since, until, error (substring, lower case), text (substring, lower
--         case); "" = no filter
-- Output: {scanned, id_1, created_at_1, id_2, created_at_2, ...}
local q = qkeys(0)
local o = cjson.decode(ARGV[1])
local flow = o.set == 'flow'
local set = q[o.set]
if o.set == 'waiting' then  -- not one of the 16 queue keys: <p>:{<q>}:waiting (keys.py)
  set = string.sub(q.flow, 1, -3) .. 'waiting'
end
if not set and not flow then
  return redis.error_reply('search: unknown set ' .. tostring(o.set))
end
local offset, count = o.offset, o.count
local prefix, task, err, text = o.prefix, o.task, o.error, o.text
local since, before = tonumber(o.since), tonumber(o['until'])

-- members [offset, offset + count) of the flow groups taken one after another
local function flow_members()
  local F, seen, names = q.flow, {}, {}
  local lists = {
    redis.call('ZRANGE', F .. 'groups', 0, -1),
    redis.call('ZRANGE', F .. 'gdelay', 0, -1),
    redis.call('SMEMBERS', F .. 'parked'),
  }
  for _, list in ipairs(lists) do
    for _, g in ipairs(list) do
      if not seen[g] then seen[g] = true; names[#names + 1] = g end
    end
  end
  table.sort(names)  -- a stable order across the calls of one search
  local out, skip = {}, offset
  for _, g in ipairs(names) do
    local gk = F .. 'g:' .. g
    local size = redis.call('ZCARD', gk)
    if skip >= size then
      skip = skip - size
    else
      for _, m in ipairs(redis.call('ZRANGE', gk, skip, skip + count - #out - 1)) do
        out[#out + 1] = m
      end
      skip = 0
      if #out >= count then break end
    end
  end
  return out
end

local members
if flow then
  members = flow_members()
else
  members = redis.call('ZRANGE', set, offset, offset + count - 1)
end
local out = {#members}
for _, m in ipairs(members) do
  local id = m
  if o.set == 'ready' or flow then id = member_id(m) end
  local ok = prefix == '' or string.sub(id, 1, #prefix) == prefix
  local f = ok and hmget(q.job .. id, 'created_at', 'task', 'last_error', 'state')
  if f and flow and f[4] ~= 'pending' then f = false end
  if f then
    local created = tonumber(f[1]) or 0
    if task ~= '' and f[2] ~= task then ok = false end
    if ok and since and created < since then ok = false end
    if ok and before and created >= before then ok = false end
    if ok and err ~= '' and not string.find(string.lower(f[3] or ''), err, 1, true) then
      ok = false
    end
    if ok and text ~= '' then
      local payload = redis.call('HGET', q.payloads, id) or ''
      ok = string.find(string.lower(payload), text, 1, true) ~= nil
    end
    if ok then
      out[#out + 1] = id
      out[#out + 1] = f[1] or '0'
    end
  end
end
return out
