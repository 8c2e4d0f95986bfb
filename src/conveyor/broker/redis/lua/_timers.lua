-- _timers.lua: the time-driven helpers of the job scripts: due scheduled / retrying jobs
-- become pending (promote), expired leases come back or are dead-lettered (expire_leases),
-- the leases-set score of a deadline (lease_score) and the earliest time something of a
-- queue becomes claimable (first_lease, next_due). A prelude file (see _wf.lua): it uses
-- the helpers of _lib.lua, _run.lua and wf_done of _wf.lua; claim.lua, extend.lua,
-- promote.lua and reap.lua call these.

-- scheduled / retry_scheduled jobs with run_at <= now become pending (bounded batch)
local function promote(q, now, limit)
  local moved = 0
  for _, set in ipairs({q.scheduled, q.retry}) do
    if moved >= limit then break end
    local due = redis.call('ZRANGEBYSCORE', set, '-inf', now, 'LIMIT', '0', istr(limit - moved))
    for _, id in ipairs(due) do
      redis.call('ZREM', set, id)
      local key = q.job .. id
      local kind = redis.call('TYPE', key).ok
      if kind == 'hash' then
        local f = redis.call('HMGET', key, 'state', 'priority', 'grp')
        if f[1] == 'scheduled' or f[1] == 'retry_scheduled' then
          make_ready(q, id, tonumber(f[2]) or 0, f[3])
          moved = moved + 1
        end
      elseif kind ~= 'none' then
        redis.call('ZADD', q.ready, 0, id)  -- not a hash: claim dead-letters it
        moved = moved + 1
      end
    end
  end
  return moved
end

-- the exact lease deadlines (as stored: strings; nil where unknown) of active jobs `ids`: their run
-- entries (one read for all, issue 18), else an older version's hash field lease_expires_at
local function lease_deadlines(q, ids)
  local out = {}
  if #ids == 0 then return out end
  local entries = redis.call('HMGET', q.run, unpack(ids))
  for i, id in ipairs(ids) do
    local at = entries[i] and string.match(entries[i], '^[^|]*|%d|([^|]*)|')
    if not at then
      at = redis.pcall('HGET', q.job .. id, 'lease_expires_at')
      if type(at) ~= 'string' then at = nil end
    end
    out[i] = at
  end
  return out
end

-- active jobs whose lease deadline passed: lost + 1, a worker_lost entry in "errors",
-- last_error, "lease_lost" event; pending again, or dead_letter on the max_lost-th loss (a poison
-- pill). Run by reap.lua and, for its queue, by claim.lua (an expired lease is claimable by the
-- next claim). Returns the number reaped and how many became pending; `more` = CODE_MORE when
-- `limit` was reached.
local function expire_leases(q, now, max_lost, limit, maxlen, dead_cap)
  local nnow = tonumber(now)
  local whole = math.floor(nnow)
  -- a score at or below the whole second before now is a passed deadline (a score is the
  -- deadline rounded up, or the exact deadline in a lease written before issue 18)
  local expired = redis.call('ZRANGEBYSCORE', q.leases, '-inf', string.format('%d', whole),
    'LIMIT', '0', istr(limit))
  if #expired < limit and nnow > whole then
    -- the second that holds now: compare the exact deadlines (few leases end this close)
    local edge = redis.call('ZRANGEBYSCORE', q.leases, '(' .. string.format('%d', whole),
      string.format('%d', whole + 1), 'LIMIT', '0', istr(limit - #expired))
    local at = lease_deadlines(q, edge)
    for i, id in ipairs(edge) do
      local n = at[i] and tonumber(at[i])
      if not (n and n > nnow) then expired[#expired + 1] = id end
    end
  end
  local reaped, readied = 0, 0
  local entries = #expired > 0 and hmget_many(q.run, expired) or {}
  for i, id in ipairs(expired) do
    local key = q.job .. id
    local L = entries[i] and run_fields(entries[i])
    local f = hmget(key, 'state', 'worker_id', 'lost', 'attempts', 'priority', 'task', 'wf',
      'grp')
    if L then  -- a run entry (issue 18): the lease fields are there, not in the hash
      L.wf, L.grp = f and f[7], f and f[8]
      if f then f[2], f[4], f[6] = L.worker, L.attempts, L.task end
    end
    if f and f[1] == 'active' then
      if f[8] then free_slots(q, id, key, f[8]) end
      local lost = (tonumber(f[3]) or 0) + 1
      local msg = 'lease expired (lost delivery ' .. lost .. ' of ' .. max_lost .. ')'
      append_line(key, 'errors', '{"attempt":' .. (f[4] or '0') .. ',"kind":"worker_lost",'
        .. '"type":"","message":' .. cjson.encode(msg) .. ',"traceback":"","worker":'
        .. jstr(f[2]) .. ',"at":' .. now .. '}', nil)
      redis.call('HSET', key, 'lost', lost, 'last_error', msg, 'run_at', now)
      if L then
        lease_end(q, id, key, L, true)
      else
        redis.call('HDEL', key, 'lease_expires_at', 'worker_id', 'token')
        redis.call('ZREM', q.leases, id)
      end
      emit(q, maxlen, 'type', 'lease_lost', 'job_id', id, 'task', f[6] or '',
        'at', now, 'worker', f[2] or '', 'lost', lost)
      if lost >= max_lost then
        redis.call('HSET', key, 'state', 'dead_letter', 'finished_at', now)
        emit(q, maxlen, 'type', 'dead_lettered', 'job_id', id, 'task', f[6] or '', 'at', now,
          'reason', 'worker_lost')
        finish(q, q.dead, id, now, dead_cap)
        if f[7] then wf_done(q, string.match(q.job, '{([^}]*)}'), id, false, nil, now, maxlen) end
      else
        make_ready(q, id, tonumber(f[5]) or 0, f[8])
        readied = readied + 1
      end
      reaped = reaped + 1
    else  -- not active (or not a hash): only its lease entries go
      redis.call('ZREM', q.leases, id)
      if L then redis.call('HDEL', q.run, id) end
    end
  end
  local more = CODE_NO
  if #expired >= limit then more = CODE_MORE end
  return reaped, readied, more
end

-- the leases-set score of a lease deadline (a string from Python): the deadline rounded up to
-- a whole second. An integer score is kept as an integer in a small sorted set (a listpack),
-- which Redis compares without parsing: with a fractional score every insert into the set of a
-- busy queue parsed each score before it with strtod (a sixth of a drain's server CPU).
-- Rounding up never reaps early; expire_leases and next_due use the exact deadline (the run
-- entry's, or an older lease's lease_expires_at: lease_deadlines).
local function lease_score(deadline)
  return string.format('%d', math.ceil(tonumber(deadline)))
end

-- the exact earliest lease deadline: the least exact deadline among the jobs of the lowest
-- leases score (one whole second; at most 100 are read); nil when there are no leases
local function first_lease(q)
  local first = redis.call('ZRANGE', q.leases, '0', '0', 'WITHSCORES')
  if #first < 2 then return nil end
  local best, best_n = first[2], tonumber(first[2])
  local bucket = redis.call('ZRANGEBYSCORE', q.leases, first[2], first[2], 'LIMIT', '0', '100')
  local at = lease_deadlines(q, bucket)
  for i = 1, #bucket do
    local n = at[i] and tonumber(at[i])
    if n and n < best_n then best, best_n = at[i], n end
  end
  return best, best_n
end

-- the earliest time something of this queue becomes claimable: the first run_at of the
-- scheduled and retry sets, the first lease deadline; '' when all three are empty. The time
-- is returned as Redis (or the job hash) has it: exact to the last digit Python needs.
local function next_due(q)
  local best, best_n = '', nil
  for _, set in ipairs({q.scheduled, q.retry, q.flow .. 'gdelay'}) do
    local first = redis.call('ZRANGE', set, '0', '0', 'WITHSCORES')
    if #first == 2 then
      local n = tonumber(first[2])
      if best_n == nil or n < best_n then best, best_n = first[2], n end
    end
  end
  local lease, lease_n = first_lease(q)
  if lease and (best_n == nil or lease_n < best_n) then best = lease end
  return best
end
