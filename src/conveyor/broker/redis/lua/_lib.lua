-- _lib.lua: helpers shared by every job script: the queue keys, return codes, type-safe reads,
-- events, the ready set, job history, deleting and capping finished jobs. The first of the
-- prelude files, followed by _run.lua (active jobs' run entries), _wf.lua (workflows),
-- _timers.lua (promotion, lease expiry, next_due) and _flow.lua (flow control), in that
-- order: each helper is defined before the helpers that call it. scripts.py puts the prelude,
-- cut to the helpers a script names, in front of each job script; a prelude file is never run
-- on its own.
--
-- Every job script receives the 16 keys of ONE queue, in this order (keys.py QUEUE_KEY_SUFFIXES):
--   KEYS[b+1]  <p>:{q}:job:       prefix of the job hashes (<p>:{q}:job:<id>): mutable fields
--   KEYS[b+2]  <p>:{q}:ready      ZSET score = priority, member = "<seq %016x>:<id>" (or
--                                 "<seq %016x>.<id>": a fresh job, member_id below)
--   KEYS[b+3]  <p>:{q}:scheduled  ZSET id -> run_at
--   KEYS[b+4]  <p>:{q}:retry      ZSET id -> run_at
--   KEYS[b+5]  <p>:{q}:leases     ZSET id -> lease deadline rounded UP to a whole second (an
--                                 integer; the exact deadline is in the job's run entry:
--                                 lease_score, expire_leases and next_due in _timers.lua)
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
-- Derived, not passed: q.run = <p>:{q}:run, HASH id -> run entry of an active job (run_fields
-- in _run.lua; keys.py RUN), built from the seq key so it has the same hash slot.
-- (b = 0, except in enqueue.lua which takes several groups of 16.) Job hashes and idempotency
-- keys are built from the two prefixes, so they carry the same {q} hash tag and slot.
--
-- Times are never computed here: callers pass them as strings formatted by Python (repr of a
-- float), which are stored verbatim, so no precision is lost. Mutable job fields that become
-- None are deleted (HDEL); readers fall back to the value in the immutable payload.
-- A job is deleted with drop_jobs (job hash + payload entry); an operator's delete frees its
-- idempotency key first (release_keys).
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

-- an integer argument for redis.call, as a string: Redis 7.0 formats a Lua number argument with
-- snprintf("%.17g"), glibc's floating-point path (~2k instructions); "%d" or COUNTS costs a
-- fraction (session 10: a one-job claim passed ~13 numbers, ~8 % of its server instructions)
local function istr(n)
  return COUNTS[n] or string.format('%d', n)
end

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
    -- derived, not passed (the 16 keys stay as they are): <p>:{q}:run, same slot as seq
    run = string.sub(KEYS[b + 9], 1, -4) .. 'run',
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
    if cap and cap > 0 then args[5] = istr(math.max(1, math.floor(cap / n))) end
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

local function flow_entries(t, width, ok)
  if t == nil or t == cjson.null then return true end
  if type(t) ~= 'table' then return false end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  if n ~= #t then return false end  -- a JSON object, not a list
  for _, e in ipairs(t) do
    if type(e) ~= 'table' or #e ~= width or type(e[1]) ~= 'string' or #e[1] == 0
        or #e[1] > 1000 or not ok(e) then
      return false
    end
  end
  return true
end

local function flow_slot_ok(e)
  local n = e[2]
  return type(n) == 'number' and n >= 1 and n == math.floor(n) and n < math.huge
end

local function flow_bucket_ok(e)
  for i = 2, 4 do
    if type(e[i]) ~= 'number' or e[i] ~= e[i] or e[i] >= math.huge then return false end
  end
  return e[2] > 0 and e[3] > 0 and e[4] >= 1
end

-- a job hash's flow record (field "flow") decoded, or nil when it is not of the shape
-- core/flow.py writes (its flow_problem): a group name, c = {{slot, integer limit >= 1}},
-- r = {{bucket, rate > 0, per > 0, burst >= 1}}. A record written behind Conveyor's back
-- never makes a script raise: the claim dead-letters its job (decode_error)
local function flow_record(raw)
  local ok, fl = pcall(cjson.decode, raw)
  if not ok or type(fl) ~= 'table' or type(fl.g) ~= 'string' then return nil end
  if not flow_entries(fl.c, 2, flow_slot_ok) or not flow_entries(fl.r, 4, flow_bucket_ok) then
    return nil
  end
  if fl.c == cjson.null then fl.c = nil end
  if fl.r == cjson.null then fl.r = nil end
  return fl
end

-- the slots a finished job may hold: its flow record's, or, if that record is malformed, the
-- conc: parts of its group's name (core/flow.py names a group after its limiters)
local function slot_names(key, grp)
  local raw = redis.call('HGET', key, 'flow')
  if not raw then return {} end
  local names, fl = {}, flow_record(raw)
  if fl then
    for i, c in ipairs(fl.c or {}) do names[i] = c[1] end
  elseif grp then
    for part in string.gmatch(grp, '[^|]+') do
      if string.sub(part, 1, 5) == 'conc:' then names[#names + 1] = part end
    end
  end
  return names
end

-- a job that held concurrency slots left `active`: free the ones it owns (fenced by its id)
-- and put the groups that waited for them back in line. `grp` is the job's group text (its
-- grp field): every slot name (conc:...) is part of it, so a group without "conc:" (a fair or
-- rate-limited group) holds no slot and its flow record is not read at all.
local function free_slots(q, id, key, grp)
  if grp and not string.find(grp, 'conc:', 1, true) then return end
  local f = q.flow
  for _, name in ipairs(slot_names(key, grp)) do
    if redis.call('SREM', f .. 'slot:' .. name, id) == 1 then
      local waiting = redis.call('SMEMBERS', f .. 'wait:' .. name)
      redis.call('DEL', f .. 'wait:' .. name)
      for _, g in ipairs(waiting) do
        redis.call('SREM', f .. 'parked', g)
        redis.call('HDEL', f .. 'why', g)
        group_ready(q, g)
      end
      if #waiting > 0 then wake(q) end  -- an idle worker claims what waited for this slot
    end
  end
end

-- ready members are "<16 hex digits>:<id>", or "<16 hex digits>.<id>" for a fresh job (issue
-- 18: written by the enqueue scripts for a job that never ran and has no expires_at, flow
-- group or workflow: claim.lua leases it without reading its hash); a bare id (hand-written
-- producers) is tolerated
local function member_id(member)
  if string.find(member, '^%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x%x[:.].') then
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

-- delete jobs for good: their hashes, payloads and run entries (ids: at most 1000);
-- `finished` = all of them are in a terminal state (no run entry to delete)
local function drop_jobs(q, ids, finished)
  if #ids == 0 then return end
  local keys = {}
  for i, id in ipairs(ids) do keys[i] = q.job .. id end
  redis.call('DEL', unpack(keys))
  redis.call('HDEL', q.payloads, unpack(ids))
  if not finished then redis.call('HDEL', q.run, unpack(ids)) end
end

-- free the idempotency keys of jobs an operator is about to delete (clear.lua, purge.lua),
-- fenced like delete_job.lua: only a key whose value "<expires_at>|<id>" still names that job
-- (its TTL may have run out and a newer job taken it). The key lives only in the job's
-- envelope: an envelope is decoded (cjson, under pcall) only when it holds the field name.
local function release_keys(q, ids)
  if #ids == 0 then return end
  local envs = redis.call('HMGET', q.payloads, unpack(ids))
  for i, id in ipairs(ids) do
    local env = envs[i]
    if env and string.find(env, '"idempotency_key":"', 1, true) then
      local ok, data = pcall(cjson.decode, env)
      local key = ok and type(data) == 'table' and data.idempotency_key
      if type(key) == 'string' then
        local v = redis.call('GET', q.idem .. key)
        if v and string.sub(v, -(#id + 1)) == '|' .. id then redis.call('DEL', q.idem .. key) end
      end
    end
  end
end

-- drop the oldest entries of a terminal set beyond `cap` (cap < 0: no cap), with their jobs
local function trim(q, set, cap)
  if cap < 0 then return end
  local excess = redis.call('ZCARD', set) - cap
  while excess > 0 do
    -- by rank: ZPOPMIN would format each score (a finished_at) as a double for the reply
    local ids = redis.call('ZRANGE', set, '0', istr(math.min(excess, 1000) - 1))
    if #ids == 0 then return end
    redis.call('ZREMRANGEBYRANK', set, '0', istr(#ids - 1))
    drop_jobs(q, ids, true)
    excess = excess - #ids
  end
end

-- record a terminal state in its set, then enforce the cap
local function finish(q, set, id, at, cap)
  redis.call('ZADD', set, at, id)
  trim(q, set, cap)
end
