-- _lib.lua: helpers shared by every job script (scripts.py prepends this file to each script;
-- it is never run on its own).
--
-- Every job script receives the 16 keys of ONE queue, in this order (keys.py QUEUE_KEY_SUFFIXES):
--   KEYS[b+1]  <p>:{q}:job:       prefix of the job hashes (<p>:{q}:job:<id>): mutable fields
--   KEYS[b+2]  <p>:{q}:ready      ZSET score = priority, member = "<seq %016x>:<id>"
--   KEYS[b+3]  <p>:{q}:scheduled  ZSET id -> run_at
--   KEYS[b+4]  <p>:{q}:retry      ZSET id -> run_at
--   KEYS[b+5]  <p>:{q}:leases     ZSET id -> lease deadline rounded UP to a whole second (an
--                                 integer; the exact deadline is the job's lease_expires_at:
--                                 lease_score, expire_leases and next_due below)
--   KEYS[b+6]  <p>:{q}:completed  ZSET id -> finished_at
--   KEYS[b+7]  <p>:{q}:dead       ZSET id -> finished_at
--   KEYS[b+8]  <p>:{q}:cancelled  ZSET id -> finished_at
--   KEYS[b+9]  <p>:{q}:seq        STRING counter (ready order and fencing tokens)
--   KEYS[b+10] <p>:{q}:events     STREAM (MAXLEN ~ events_max)
--   KEYS[b+11] <p>:{q}:wake       LIST wake-up markers
--   KEYS[b+12] <p>:{q}:paused     STRING, exists while paused
--   KEYS[b+13] <p>:{q}:idem:      prefix of idempotency keys
--   KEYS[b+14] <p>:{q}:payloads   HASH id -> immutable JSON envelope (kept out of the job hash
--                                 so that hash holds only small values and stays a listpack)
--   KEYS[b+15] <p>:{q}:expired    ZSET id -> finished_at (expired: not started in time)
--   KEYS[b+16] <p>:{q}:f:         prefix of the flow-control keys (keys.py; _flow.lua)
-- (b = 0, except in enqueue.lua which takes several groups of 16.) Job hashes and idempotency
-- keys are built from the two prefixes, so they carry the same {q} hash tag and slot.
--
-- Times are never computed here: callers pass them as strings formatted by Python (repr of a
-- float), which are stored verbatim, so no precision is lost. Mutable job fields that become
-- None are deleted (HDEL); readers fall back to the value in the immutable payload.
-- A job is deleted with drop_jobs (job hash + payload entry).
--
-- Calling convention: scripts with many scalar arguments take them as ONE JSON object in
-- ARGV[1] (decoded once per call: `local o = cjson.decode(ARGV[1])`; times are strings, absent
-- values ""), followed by their positional per-job records. Return codes are the CODE_*
-- constants below, mirrored by ScriptCode in broker/redis/codes.py (a test compares them).

local WAKE_MAX = 16

-- small counts as strings: a Lua number handed to redis.call is formatted with "%.14g" (the
-- slow floating-point path of snprintf), an entry of this table is passed as it is
local COUNTS = {'1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14',
  '15', '16'}

local CODE_OK = 1             -- done (stored, claimed, recorded, cancelled, ...)
local CODE_NO = 0             -- not done, nothing changed; as a flag: no more work
local CODE_DUPLICATE_ID = -1  -- enqueue: a job with this id exists, nothing stored
local CODE_LEASE_LOST = -2    -- fail / release: stale token or job not active
local CODE_MORE = 1           -- claim / reap flag: more work is waiting

local function qkeys(b)
  return {
    job = KEYS[b + 1], ready = KEYS[b + 2], scheduled = KEYS[b + 3], retry = KEYS[b + 4],
    leases = KEYS[b + 5], completed = KEYS[b + 6], dead = KEYS[b + 7],
    cancelled = KEYS[b + 8], seq = KEYS[b + 9], events = KEYS[b + 10], wake = KEYS[b + 11],
    paused = KEYS[b + 12], idem = KEYS[b + 13], payloads = KEYS[b + 14],
    expired = KEYS[b + 15], flow = KEYS[b + 16],
  }
end

-- Type-safe reads: garbage planted under a job key (wrong type) must not abort a script.
local function hmget(key, ...)
  local r = redis.pcall('HMGET', key, ...)
  if type(r) == 'table' and r.err then return nil end
  return r
end

local function jstr(s)
  if s == nil or s == false or s == '' then return 'null' end
  return cjson.encode(s)
end

-- one event per transition; the queue is implied by the stream (readers add it)
local function emit(q, maxlen, ...)
  redis.call('XADD', q.events, 'MAXLEN', '~', maxlen, '*', ...)
end

-- the events of one script call that moves several jobs alike (enqueued, started, completed):
-- ONE stream entry instead of one per job. `rows` is flat, `#columns` values per job, the first
-- two being job_id and task. One job: the usual flat entry (type job_id task at <columns...>
-- <shared...>). Several: type at <shared...> fields "<columns joined by spaces>" jobs <JSON
-- array of the rows, flat>; events_read turns it back into one event per job. The cap scales
-- with the entry's size (MAXLEN ~ events_max / jobs), so the stream keeps ~events_max events.
local function emit_many(q, maxlen, kind, at, shared, columns, rows)
  local width = #columns
  local n = #rows / width
  if n < 1 then return end
  local args = {'XADD', q.events, 'MAXLEN', '~', maxlen, '*', 'type', kind}
  if n == 1 then
    args[9], args[10], args[11], args[12] = columns[1], rows[1], columns[2], rows[2]
    args[13], args[14] = 'at', at
    for i = 3, width do
      args[#args + 1] = columns[i]
      args[#args + 1] = rows[i]
    end
  else
    local cap = tonumber(maxlen)
    if cap and cap > 0 then args[5] = math.max(1, math.floor(cap / n)) end
    args[9], args[10] = 'at', at
  end
  for i = 1, #shared do args[#args + 1] = shared[i] end
  if n > 1 then
    args[#args + 1] = 'fields'
    args[#args + 1] = table.concat(columns, ' ')
    args[#args + 1] = 'jobs'
    args[#args + 1] = cjson.encode(rows)
  end
  redis.call(unpack(args))
end

-- HMGET of many fields of one hash, 1000 per command; false where absent
local function hmget_many(key, fields)
  local out = {}
  for i = 1, #fields, 1000 do
    local part = redis.call('HMGET', key, unpack(fields, i, math.min(i + 999, #fields)))
    for j = 1, #part do out[#out + 1] = part[j] end
  end
  return out
end

-- bulk helpers: one command per 1000 arguments instead of one per job
local function bulk(cmd, key, list)
  for i = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
  end
end

-- a wake-up marker for idle workers (BLPOP), unless WAKE_MAX are already waiting
local function wake(q)
  if redis.call('LLEN', q.wake) < WAKE_MAX then redis.call('LPUSH', q.wake, '1') end
end

local function member(seq, id)
  return string.format('%016x', seq) .. ':' .. id
end

-- flow control (issue 15): a group with a pending job is served by claims unless it is
-- already scheduled, throttled (gdelay) or parked for a slot
local function group_ready(q, g)
  local f = q.flow
  if redis.call('ZSCORE', f .. 'groups', g) or redis.call('ZSCORE', f .. 'gdelay', g) then return end
  if redis.call('SISMEMBER', f .. 'parked', g) == 1 then return end
  redis.call('ZADD', f .. 'groups', redis.call('INCR', q.seq), g)
end

-- pending: append to the ready set behind every job of the same priority (a job with a flow
-- group, `grp`: to its group's set instead)
local function make_ready(q, id, prio, grp)
  local m = member(redis.call('INCR', q.seq), id)
  if grp then
    redis.call('ZADD', q.flow .. 'g:' .. grp, prio, m)
    redis.call('INCR', q.flow .. 'npend')  -- pending jobs in groups (counts: reads.py)
    group_ready(q, grp)
  else
    redis.call('ZADD', q.ready, prio, m)
  end
  redis.call('HSET', q.job .. id, 'state', 'pending', 'rk', m)
end

-- a job that held concurrency slots left `active`: free the ones it owns (fenced by its id)
-- and put the groups that waited for them back in line
local function free_slots(q, id, key)
  local raw = redis.call('HGET', key, 'flow')
  if not raw then return end
  local fl = cjson.decode(raw)
  if not fl.c then return end
  local f = q.flow
  for _, c in ipairs(fl.c) do
    if redis.call('SREM', f .. 'slot:' .. c[1], id) == 1 then
      local waiting = redis.call('SMEMBERS', f .. 'wait:' .. c[1])
      redis.call('DEL', f .. 'wait:' .. c[1])
      for _, g in ipairs(waiting) do
        redis.call('SREM', f .. 'parked', g)
        redis.call('HDEL', f .. 'why', g)
        group_ready(q, g)
      end
      if #waiting > 0 then wake(q) end  -- an idle worker claims what waited for this slot
    end
  end
end

-- ready members are "<16 hex digits>:<id>"; a bare id (hand-written producers) is tolerated
local function member_id(member)
  if string.find(member, '^%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x:.') then
    return string.sub(member, 18)
  end
  return member
end

-- errors and history are JSON Lines (one JSON object per line); keep at most `max` lines
local function append_line(key, field, line, max)
  local cur = redis.call('HGET', key, field)
  if not cur or cur == '' then cur = line else cur = cur .. '\n' .. line end
  if max then
    local _, breaks = string.gsub(cur, '\n', '\n')
    while breaks + 1 > max do
      local p = string.find(cur, '\n', 1, true)
      cur = string.sub(cur, p + 1)
      breaks = breaks - 1
    end
  end
  redis.call('HSET', key, field, cur)
end

local function history(key, event, at, attempt, note, worker)
  append_line(key, 'history', '{"event":' .. jstr(event) .. ',"at":' .. at .. ',"attempt":'
    .. attempt .. ',"note":' .. (note and cjson.encode(note) or '""') .. ',"worker":'
    .. jstr(worker) .. '}', 50)
end

-- delete jobs for good: their hashes and payloads (ids: at most 1000)
local function drop_jobs(q, ids)
  if #ids == 0 then return end
  local keys = {}
  for i, id in ipairs(ids) do keys[i] = q.job .. id end
  redis.call('DEL', unpack(keys))
  redis.call('HDEL', q.payloads, unpack(ids))
end

-- drop the oldest entries of a terminal set beyond `cap` (cap < 0: no cap), with their jobs
local function trim(q, set, cap)
  if cap < 0 then return end
  local excess = redis.call('ZCARD', set) - cap
  while excess > 0 do
    -- by rank: ZPOPMIN would format each score (a finished_at) as a double for the reply
    local ids = redis.call('ZRANGE', set, 0, math.min(excess, 1000) - 1)
    if #ids == 0 then return end
    redis.call('ZREMRANGEBYRANK', set, 0, #ids - 1)
    drop_jobs(q, ids)
    excess = excess - #ids
  end
end

-- record a terminal state in its set, then enforce the cap
local function finish(q, set, id, at, cap)
  redis.call('ZADD', set, at, id)
  trim(q, set, cap)
end

-- ---------------------------------------------------------------- workflows (docs/workflows.md)
-- A workflow node's graph record is the HASH <p>:{q}:wf:<id> (keys.py wf_node): workflow,
-- pending (parents not finished), passing (none | one | all), trig (all_done | one_failed),
-- in (JSON [[parent, policy], ...] in order), out (JSON [[child, child queue, policy], ...]),
-- and one field r:<parent> per finished parent: "1" .. its result JSON, or "0" (failed).
-- A job with children has field wf = "1" in its job hash, so the finishing scripts look here
-- only for them. Children may sit in other queues: their keys are built by wf_qkeys, the
-- mirror of keys.py (test_workflow_keys compares them); Redis Cluster cannot run these
-- cross-slot writes, so workflows need a standalone or Sentinel server.

-- the per-queue keys of `queue` (as qkeys answers them) built from the key prefix
local function wf_qkeys(prefix, queue)
  local t = prefix .. ':{' .. queue .. '}:'
  return {
    job = t .. 'job:', ready = t .. 'ready', scheduled = t .. 'scheduled', retry = t .. 'retry',
    leases = t .. 'leases', completed = t .. 'completed', dead = t .. 'dead',
    cancelled = t .. 'cancelled', seq = t .. 'seq', events = t .. 'events', wake = t .. 'wake',
    paused = t .. 'paused', idem = t .. 'idem:', payloads = t .. 'payloads',
    expired = t .. 'expired', flow = t .. 'f:', waiting = t .. 'waiting', wf = t .. 'wf:',
  }
end

-- waiting -> cancelled: parent `pid` failed (kind upstream_failed names it)
local function wf_upstream_failed(cq, cid, pid, detail, now, maxlen)
  local key = cq.job .. cid
  local f = redis.call('HMGET', key, 'attempts', 'task')
  local msg = 'parent ' .. pid .. ' ' .. detail
  append_line(key, 'errors', '{"attempt":' .. (f[1] or '0') .. ',"kind":"upstream_failed",'
    .. '"type":"","message":' .. cjson.encode(msg) .. ',"traceback":"","worker":null,"at":'
    .. now .. ',"parent":' .. cjson.encode(pid) .. '}', nil)
  redis.call('HSET', key, 'state', 'cancelled', 'finished_at', now, 'last_error', msg)
  redis.call('ZREM', cq.waiting, cid)
  emit(cq, maxlen, 'type', 'cancelled', 'job_id', cid, 'task', f[2] or '', 'at', now,
    'reason', 'upstream_failed', 'parent', pid)
  finish(cq, cq.cancelled, cid, now, -1)
end

-- `inject` (JSON values, "" = none) goes before the envelope's arguments of job `cid`.
-- orjson writes "args" as the fourth key, after v, id and task (strings, whose quotes are
-- escaped), so the first '"args":[' is the envelope's own.
local function wf_inject(cq, cid, inject)
  if inject ~= '' then
    local pay = redis.call('HGET', cq.payloads, cid)
    local _, e = string.find(pay or '', '"args":[', 1, true)
    if e then
      local rest = string.sub(pay, e + 1)
      local sep = ','
      if string.sub(rest, 1, 1) == ']' then sep = '' end
      redis.call('HSET', cq.payloads, cid, string.sub(pay, 1, e) .. inject .. sep .. rest)
    end
  end
end

-- waiting -> pending (`inject` before its arguments); waiting -> scheduled when the node has
-- its own delay (node field `delay`: due at now + delay) or a run_at still ahead
-- (lifecycle.release_parents: due = max(now + delay, run_at)). The one time computed in Lua:
-- a double sum, written with %.17g (exact, as Python's repr reads it back).
local function wf_release(cq, cid, inject, now, maxlen)
  local key = cq.job .. cid
  wf_inject(cq, cid, inject)
  redis.call('ZREM', cq.waiting, cid)
  local f = redis.call('HMGET', key, 'priority', 'task', 'grp', 'run_at')
  local due = math.max(tonumber(now) + (tonumber(redis.call('HGET', cq.wf .. cid, 'delay')) or 0),
    tonumber(f[4]) or 0)
  if due > tonumber(now) then
    local at = string.format('%.17g', due)
    redis.call('HSET', key, 'state', 'scheduled', 'run_at', at)
    redis.call('ZADD', cq.scheduled, at, cid)
  else
    redis.call('HSET', key, 'run_at', now)
    make_ready(cq, cid, tonumber(f[1]) or 0, f[3])  -- a flow-controlled node: into its group
  end
  emit(cq, maxlen, 'type', 'released', 'job_id', cid, 'task', f[2] or '', 'at', now,
    'note', 'parents finished')
  wake(cq)
end

-- the arguments a released node gets (flow.passed): "" or one JSON value
local function wf_inputs(nkey, passing)
  if passing ~= 'one' and passing ~= 'all' then return '' end
  local parts = {}
  for _, p in ipairs(cjson.decode(redis.call('HGET', nkey, 'in') or '[]')) do
    local r = redis.call('HGET', nkey, 'r:' .. p[1]) or '0'
    if string.sub(r, 1, 1) == '1' then parts[#parts + 1] = string.sub(r, 2)
    elseif passing == 'one' or p[2] ~= 'ignore' then parts[#parts + 1] = 'null' end
    if passing == 'one' then return parts[1] end
  end
  if passing == 'one' then return 'null' end
  return '[' .. table.concat(parts, ',') .. ']'
end

-- did every parent succeed? (a batch's on_failure node runs only if one failed)
local function wf_all_ok(nkey)
  for _, p in ipairs(cjson.decode(redis.call('HGET', nkey, 'in') or '[]')) do
    local r = redis.call('HGET', nkey, 'r:' .. p[1]) or '0'
    if string.sub(r, 1, 1) ~= '1' then return false end
  end
  return true
end

-- job `id` of queue keys `q` (queue `qname`) reached a terminal state (ok: completed, with
-- `result` JSON): release or end its dependants, cascading failures (flow.finished in
-- broker/flow.py, line for line). Each edge is marked once (HSETNX r:<parent>), so a
-- dependant's counter drops once per parent and a chord callback is released once.
local function wf_done(q, qname, id, ok, result, now, maxlen)
  local prefix = string.match(q.job, '^([^{]*):{')
  local stack = {{qname, id, ok, result}}
  while #stack > 0 do
    local top = table.remove(stack)
    local pid, pok = top[2], top[3]
    local out = redis.call('HGET', wf_qkeys(prefix, top[1]).wf .. pid, 'out')
    for _, e in ipairs(out and cjson.decode(out) or {}) do
      local cid, cq, policy = e[1], wf_qkeys(prefix, e[2]), e[3]
      local nkey = cq.wf .. cid
      local mark = '0'
      if pok then mark = '1' .. (top[4] or 'null') end
      if redis.call('HSETNX', nkey, 'r:' .. pid, mark) == 1
        and redis.call('HGET', cq.job .. cid, 'state') == 'waiting' then
        local n = redis.call('HMGET', nkey, 'trig', 'passing')
        if not pok and policy == 'fail' and n[1] ~= 'one_failed' then
          wf_upstream_failed(cq, cid, pid, 'failed', now, maxlen)
          stack[#stack + 1] = {e[2], cid, false, nil}
        elseif redis.call('HINCRBY', nkey, 'pending', -1) <= 0 then
          if n[1] == 'one_failed' and wf_all_ok(nkey) then
            wf_upstream_failed(cq, cid, pid, 'and every other parent succeeded', now, maxlen)
            stack[#stack + 1] = {e[2], cid, false, nil}
          else
            wf_release(cq, cid, wf_inputs(nkey, n[2]), now, maxlen)
          end
        end
      end
    end
  end
end

-- scheduled / retry_scheduled jobs with run_at <= now become pending (bounded batch)
local function promote(q, now, limit)
  local moved = 0
  for _, set in ipairs({q.scheduled, q.retry}) do
    if moved >= limit then break end
    local due = redis.call('ZRANGEBYSCORE', set, '-inf', now, 'LIMIT', 0, limit - moved)
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
    'LIMIT', 0, limit)
  if #expired < limit and nnow > whole then
    -- the second that holds now: compare the exact deadlines (few leases end this close)
    local edge = redis.call('ZRANGEBYSCORE', q.leases, '(' .. string.format('%d', whole),
      string.format('%d', whole + 1), 'LIMIT', 0, limit - #expired)
    for _, id in ipairs(edge) do
      local at = redis.pcall('HGET', q.job .. id, 'lease_expires_at')
      if not (type(at) == 'string' and tonumber(at) and tonumber(at) > nnow) then
        expired[#expired + 1] = id
      end
    end
  end
  local reaped, readied = 0, 0
  for _, id in ipairs(expired) do
    redis.call('ZREM', q.leases, id)
    local key = q.job .. id
    local f = hmget(key, 'state', 'worker_id', 'lost', 'attempts', 'priority', 'task', 'wf',
      'grp')
    if f and f[1] == 'active' then
      if f[8] then free_slots(q, id, key) end
      local lost = (tonumber(f[3]) or 0) + 1
      local msg = 'lease expired (lost delivery ' .. lost .. ' of ' .. max_lost .. ')'
      append_line(key, 'errors', '{"attempt":' .. (f[4] or '0') .. ',"kind":"worker_lost",'
        .. '"type":"","message":' .. cjson.encode(msg) .. ',"traceback":"","worker":'
        .. jstr(f[2]) .. ',"at":' .. now .. '}', nil)
      redis.call('HSET', key, 'lost', lost, 'last_error', msg, 'run_at', now)
      redis.call('HDEL', key, 'lease_expires_at', 'worker_id', 'token')
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
-- Rounding up never reaps early; expire_leases and next_due use the exact lease_expires_at.
local function lease_score(deadline)
  return string.format('%d', math.ceil(tonumber(deadline)))
end

-- the exact earliest lease deadline: the least lease_expires_at among the jobs of the lowest
-- leases score (one whole second; at most 100 are read); nil when there are no leases
local function first_lease(q)
  local first = redis.call('ZRANGE', q.leases, 0, 0, 'WITHSCORES')
  if #first < 2 then return nil end
  local best, best_n = first[2], tonumber(first[2])
  local bucket = redis.call('ZRANGEBYSCORE', q.leases, first[2], first[2], 'LIMIT', 0, 100)
  for _, id in ipairs(bucket) do
    local at = redis.pcall('HGET', q.job .. id, 'lease_expires_at')
    local n = type(at) == 'string' and tonumber(at)
    if n and n < best_n then best, best_n = at, n end
  end
  return best, best_n
end

-- the earliest time something of this queue becomes claimable: the first run_at of the
-- scheduled and retry sets, the first lease deadline; '' when all three are empty. The time
-- is returned as Redis (or the job hash) has it: exact to the last digit Python needs.
local function next_due(q)
  local best, best_n = '', nil
  for _, set in ipairs({q.scheduled, q.retry, q.flow .. 'gdelay'}) do
    local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
    if #first == 2 then
      local n = tonumber(first[2])
      if best_n == nil or n < best_n then best, best_n = first[2], n end
    end
  end
  local lease, lease_n = first_lease(q)
  if lease and (best_n == nil or lease_n < best_n) then best = lease end
  return best
end

-- ---------------------------------------------------------------- flow control (issue 15)
-- The same model as broker/memlimits.py and sqllimits.py (core/flow.py): claim.lua serves the
-- queue's groups round-robin (f:groups, scored by a sequence number: a served group goes to
-- the back), asks each group's limiters, and leases its head job when they allow; a throttled
-- group waits in f:gdelay until its next token, one whose slots are full in f:parked until
-- free_slots wakes it. Token buckets use the caller's `now` (the broker's clock).

-- the limit of a bucket / slot: a run-time override (f:limits) of it or of its limiter
local function flow_spec(q, name, own)
  local raw = redis.call('HGET', q.flow .. 'limits', name)
  if not raw then
    local base = string.match(name, '^([^:]*:[^:]*)')
    if base then raw = redis.call('HGET', q.flow .. 'limits', base) end
  end
  if raw then return cjson.decode(raw) end
  return own
end

local function flow_label(name, rate, per)
  local rest = string.sub(name, string.find(name, ':', 1, true) + 1)
  if not rate then
    local p = string.find(rest, ':', 1, true)
    if p then return string.sub(rest, p + 1) end
    return rest
  end
  local units = {[1] = 's', [60] = 'm', [3600] = 'h', [86400] = 'd'}
  local unit = units[per] or (string.format('%g', per) .. 's')
  return rest .. ':' .. string.format('%g', rate) .. '/' .. unit
end

-- a limit of the whole queue (rate:@<q> / conc:@<q>; core/flow.py is_queue_limiter): when it
-- says no, no other group of the queue may start either
local function flow_whole(name)
  return string.sub(name, 1, 6) == 'rate:@' or string.sub(name, 1, 6) == 'conc:@'
end

-- nil: the job may run (its tokens and slots taken); else (when to look again | 'park', why,
-- whether a limit of the whole queue said no)
local function flow_admit(q, nnow, now, id, fl, g)
  local F = q.flow
  if fl.c then
    for _, c in ipairs(fl.c) do
      local n = tonumber(flow_spec(q, c[1], {c[2]})[1])
      local running = redis.call('SCARD', F .. 'slot:' .. c[1])
      if running >= n then
        redis.call('SADD', F .. 'wait:' .. c[1], g)
        return 'park', 'waiting for ' .. flow_label(c[1]) .. ' (' .. running .. ' running)',
          flow_whole(c[1])
      end
    end
  end
  local wait, why, left, whole = 0, nil, {}, false
  for i, r in ipairs(fl.r or {}) do
    local s = flow_spec(q, r[1], {r[2], r[3], r[4]})
    local rate, per = tonumber(s[1]), tonumber(s[2])
    local burst = tonumber(s[3] or s[1])
    local b = redis.call('HMGET', F .. 'tb:' .. r[1], 'tokens', 'at')
    local tokens, at = tonumber(b[1]) or burst, tonumber(b[2]) or nnow
    tokens = math.min(burst, tokens + math.max(0, nnow - at) * rate / per)
    if tokens >= 1 then
      left[i] = tokens - 1
    else
      local t = nnow + (1 - tokens) * per / rate
      if t > wait then wait = t end
      why = 'throttled by rate limit ' .. flow_label(r[1], rate, per)
      whole = whole or flow_whole(r[1])
    end
  end
  if wait > 0 then return wait, why, whole end
  for i, r in ipairs(fl.r or {}) do
    redis.call('HSET', F .. 'tb:' .. r[1], 'tokens', string.format('%.17g', left[i]), 'at', now)
  end
  for _, c in ipairs(fl.c or {}) do redis.call('SADD', F .. 'slot:' .. c[1], id) end
  return nil
end

-- lease jobs of the queue's groups while count() < limit (lease_one / lapse: claim.lua's).
-- Groups are read in batches (one ZRANGE for up to `limit` of them): a served group goes to
-- the back with a fresh sequence number, after every group of the batch, so serving a batch
-- in order is the round-robin of reading one group at a time. f:npend is settled once.
local function flow_take(q, now, nnow, limit, count, lease_one, lapse)
  local F = q.flow
  for _, g in ipairs(redis.call('ZRANGEBYSCORE', F .. 'gdelay', '-inf', now, 'LIMIT', 0, 1000)) do
    redis.call('ZREM', F .. 'gdelay', g)
    redis.call('HDEL', F .. 'why', g)
    redis.call('ZADD', F .. 'groups', redis.call('INCR', q.seq), g)
  end
  local rounds, gone = 0, 0
  local max_rounds = 4 * limit + 100  -- bounded work per call
  while count() < limit and rounds < max_rounds do
    local batch = redis.call('ZRANGE', F .. 'groups', 0, limit - count() - 1)
    if #batch == 0 then break end
    for _, g in ipairs(batch) do
      if count() >= limit or rounds >= max_rounds then break end
      rounds = rounds + 1
      local gk = F .. 'g:' .. g
      local head = redis.call('ZRANGE', gk, 0, 1)  -- the head, and whether one follows it
      if #head == 0 then
        redis.call('ZREM', F .. 'groups', g)  -- idle: forgotten until a job of it is pending
      else
        local id = member_id(head[1])
        local key = q.job .. id
        local f = redis.pcall('HMGET', key, 'state', 'attempts', 'task', 'run_at', 'lost',
          'errors', 'history', 'last_error', 'expires_at', 'flow')
        if f.err or f[1] ~= 'pending' then
          redis.call('ZREM', gk, head[1])  -- stale: its job is gone or no longer pending
          gone = gone + 1
        elseif f[9] and tonumber(f[9]) <= nnow then
          redis.call('ZREM', gk, head[1])
          gone = gone + 1
          lapse(id, key, f[3], f[2])
        else
          -- a group named without a rate: / conc: part (fair_by only) has no limiter to ask
          local verdict, why, whole = nil, nil, false
          if string.find(g, 'rate:', 1, true) or string.find(g, 'conc:', 1, true) then
            verdict, why, whole = flow_admit(q, nnow, now, id, cjson.decode(f[10] or '{}'), g)
          end
          if verdict == nil then
            redis.call('ZREM', gk, head[1])
            gone = gone + 1
            local seq = redis.call('INCRBY', q.seq, 2)
            if #head > 1 then
              redis.call('ZADD', F .. 'groups', seq - 1, g)  -- to the back: round-robin
            else
              redis.call('ZREM', F .. 'groups', g)  -- its last job: forgotten right away
            end
            lease_one(id, key, f, seq)
          else
            redis.call('ZREM', F .. 'groups', g)
            redis.call('HSET', F .. 'why', g, why)
            if verdict == 'park' then
              redis.call('SADD', F .. 'parked', g)
            else
              redis.call('ZADD', F .. 'gdelay', string.format('%.17g', verdict), g)
            end
            if whole then  -- the queue's own limit said no: nothing else may start now
              rounds = max_rounds
            end
          end
        end
      end
    end
  end
  if gone > 0 then redis.call('DECRBY', F .. 'npend', gone) end
end
