-- claim.lua: lease up to N ready jobs of one queue (transition: pending -> active).
--
-- One atomic step: promotion of due jobs first, then the queue's expired leases come back
-- exactly as reap.lua returns them (lost + 1; the max_lost-th loss dead-letters the job as
-- worker_lost): an expired lease is claimable by the very next claim. Then per job popped
-- from the ready set: state active (the job hash's one write), a fresh fencing token
-- ("<seq>:<queue>"), its run entry (attempts + 1, started_at, worker_id, lease deadline, the
-- event row: run_fields in _run.lua; one HSET for the call), lease entry, "started" event (one
-- stream entry for all the jobs of the call: emit_rows in _run.lua). A fresh job (member
-- "<seq>.<id>", issue 18) is leased without reading its hash (first attempt; its task from the
-- envelope); any other is read first (HMGET), as before, and also gets its attempts written
-- to the hash. A paused queue is promoted but not served. The queue's wake
-- markers are dropped (a worker woken by one claims right away; wait_for_work does not check).
-- A pending job whose hash has an expires_at <= now becomes expired (issue 15: the lapse
-- transition; kept in the expired set, never leased). Entries whose job is gone or no longer
-- pending are dropped; a job key of the wrong type
-- (garbage) is dead-lettered with kind decode_error (a string's value is kept in field "raw");
-- a workflow node's dependants end or are released with it (wf_done).
-- Payloads are NOT decoded here: the client decodes and dead-letters undecodable ones at once
-- (fail.lua with a stub payload), so a claim never hands out garbage and nothing loops.
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] options (JSON object): queue, now, deadline (lease deadline = now +
--         visibility_timeout), limit, worker ("" = none), events_max, promote_max (promote /
--         expiry batch limit), dead_max (dead_letter_max), max_lost
-- Output: {more, next_due, hash, job_1, job_2, ...}; more = CODE_MORE when ready jobs remain
--         after this claim, else CODE_NO; next_due = on an empty or short claim of a queue
--         that is not paused, the earliest run_at of the scheduled / retry sets or lease
--         deadline ('' when none, or when the claim filled its limit: next_due in
--         _timers.lua); job = 3 values in a row (flat: issue 18), id, token, payload; hash =
--         false when every job is fresh (attempts 1, nothing else in its hash), else flat
--         {k, attempts, run_at, lost, errors, history, last_error, ...} for the k-th job of
--         each one that is not (the other fields are known to the caller: state active,
--         started_at = now, lease_expires_at = deadline, worker_id)
local q = qkeys(0)
local o = cjson.decode(ARGV[1])
local qname, now, deadline, limit, worker = o.queue, o.now, o.deadline, o.limit, o.worker
local maxlen, promote_max, dead_max, max_lost = o.events_max, o.promote_max, o.dead_max, o.max_lost

local function bury_foreign(id, key, kind)
  local raw = '<' .. kind .. '>'
  if kind == 'string' then raw = redis.call('GET', key) end
  redis.call('DEL', key)
  local msg = 'job storage is a Redis ' .. kind .. ', not a hash'
  redis.call('HSET', q.payloads, id, '{"v":1,"id":' .. cjson.encode(id)
    .. ',"task":"<undecodable>","queue":' .. cjson.encode(qname) .. ',"state":"dead_letter"}')
  redis.call('HSET', key, 'raw', raw, 'state', 'dead_letter', 'finished_at', now, 'last_error', msg,
    'errors', '{"attempt":0,"kind":"decode_error","type":"DecodeError","message":'
      .. cjson.encode(msg) .. ',"traceback":"","worker":null,"at":' .. now .. '}')
  finish(q, q.dead, id, now, dead_max)
  emit(q, maxlen, 'type', 'dead_lettered', 'job_id', id, 'task', '', 'at', now,
    'reason', 'decode_error')
  -- a workflow node (its graph record survives) ends or releases its dependants (wf_done)
  if redis.call('EXISTS', wf_qkeys(string.match(q.job, '^([^{]*):{'), qname).wf .. id) == 1 then
    wf_done(q, qname, id, false, nil, now, maxlen)
  end
end

-- issue 15: a job past its expires_at (hash field, set only for such jobs) never runs
local nnow = tonumber(now)
local function lapse(id, key, task, attempts)
  redis.call('HSET', key, 'state', 'expired', 'finished_at', now)
  redis.call('HDEL', key, 'rk')
  history(key, 'expired', now, attempts or 0, 'not started before its expires_at', nil)
  finish(q, q.expired, id, now, dead_max)  -- capped like the dead letters
  emit(q, maxlen, 'type', 'expired', 'job_id', id, 'task', task or '', 'at', now)
  -- a workflow node that never ran fails its dependants (issue 16; wf_done in _wf.lua)
  if redis.call('HGET', key, 'wf') then wf_done(q, qname, id, false, nil, now, maxlen) end
end

promote(q, now, promote_max)
expire_leases(q, now, max_lost, promote_max, maxlen, dead_max)
-- this claim serves every marker left so far (stale ones included); if it leaves ready jobs
-- behind it pushes one again below, for the next idle worker
redis.call('DEL', q.wake)
if redis.call('EXISTS', q.paused) == 1 then return {CODE_NO, '', false} end

local out = {CODE_NO, '', false}
local score = lease_score(deadline)  -- the leases-set score: a whole second (_timers.lua)
local leased, ids, runs, texts, extra = {}, {}, {}, {}, {}
local claimed = 0
local suffix = ':' .. qname  -- of every fencing token "<seq>:<queue>"
-- the parts of every run entry of this call (run_fields in _run.lua): after the flag, and
-- after the attempts
local mid, tail = '|' .. deadline .. '|', '|' .. now .. '|' .. worker
local fresh_tail = '\n1' .. tail  -- a fresh job's: its first attempt
local find, byte, sub, format = string.find, string.byte, string.sub,
  string.format

-- a job with history (f = its HMGET fields: state, attempts, task, run_at, lost, errors,
-- history, last_error, ..., and wf, grp at `w`): state active and its attempts (the hash
-- keeps a count it can be told by, codec.py), its run entry and event row, its reply values
-- (the payload filled in below) and its hash fields for the client (in out[3])
local function lease_slow(id, key, f, seq, w)
  local attempts = (tonumber(f[2]) or 0) + 1
  local a = COUNTS[attempts] or format('%d', attempts)
  redis.call('HSET', key, 'state', 'active', 'attempts', a)
  local token = format('%d', seq) .. suffix
  local flag = (f[w] or f[w + 1]) and '1' or '0'
  local row = jtext(id) .. ',' .. jtext(f[3] or '') .. ',' .. a
  claimed = claimed + 1
  ids[claimed], texts[claimed] = id, row
  local n = #runs
  runs[n + 1], runs[n + 2] = id, token .. '|' .. flag .. mid .. row .. '\n' .. a .. tail
  n = #out
  out[n + 1], out[n + 2], out[n + 3] = id, token, false
  n = #extra
  extra[n + 1], extra[n + 2], extra[n + 3], extra[n + 4] = claimed, attempts, f[4], f[5]
  extra[n + 5], extra[n + 6], extra[n + 7] = f[6], f[7], f[8]
end

-- flow control (_flow.lua) leases through this (f: the HMGET of flow_take, which reads no
-- wf / grp: a grouped job always has grp)
local function lease_one(id, key, f, seq)
  f[11], f[12] = false, '1'
  lease_slow(id, key, f, seq, 11)
end

-- issue 15: a pending grouped job whose hash's flow record is malformed (flow_record in
-- _lib.lua; only storage written behind Conveyor's back has one) is dead-lettered here with
-- kind decode_error, as the client does with an undecodable payload (fail.lua): its payload
-- kept in field "raw", a stub in its place. It never took a token or a slot.
local function bury_flow(id, key, task, attempts)
  local msg = 'the flow record is malformed (not of the shape Conveyor writes)'
  redis.call('HSET', key, 'raw', redis.call('HGET', q.payloads, id) or '')
  redis.call('HSET', q.payloads, id, '{"v":1,"id":' .. cjson.encode(id) .. ',"task":'
    .. cjson.encode(task or '<undecodable>') .. ',"queue":' .. cjson.encode(qname)
    .. ',"state":"dead_letter","args":[],"kwargs":{}}')
  append_line(key, 'errors', '{"attempt":' .. (attempts or 0) .. ',"kind":"decode_error",'
    .. '"type":"DecodeError","message":' .. cjson.encode(msg) .. ',"traceback":"","worker":'
    .. jstr(worker) .. ',"at":' .. now .. '}', nil)
  redis.call('HSET', key, 'state', 'dead_letter', 'finished_at', now,
    'last_error', 'DecodeError: ' .. msg)
  redis.call('HDEL', key, 'rk')
  finish(q, q.dead, id, now, dead_max)
  emit(q, maxlen, 'type', 'dead_lettered', 'job_id', id, 'task', task or '', 'at', now,
    'reason', 'decode_error')
  if redis.call('HGET', key, 'wf') then wf_done(q, qname, id, false, nil, now, maxlen) end
end

-- flow control (issue 15; _flow.lua): grouped jobs first, only when the queue has groups (a
-- queue without them pays this one EXISTS per call, nothing per job)
local grouped = redis.call('EXISTS', q.flow .. 'groups', q.flow .. 'gdelay') > 0
if grouped then
  flow_take(q, now, nnow, limit, function() return claimed end, lease_one, lapse, bury_flow)
end

local jobp = q.job
while claimed < limit do
  -- the ready set's head by rank, then removed by rank: ZPOPMIN would also format every
  -- score (a priority) as a double for the reply
  local popped = redis.call('ZRANGE', q.ready, '0', istr(limit - claimed - 1))
  if #popped == 0 then break end
  redis.call('ZREMRANGEBYRANK', q.ready, '0', istr(#popped - 1))
  local seq = redis.call('INCRBY', q.seq, istr(#popped)) - #popped
  for i = 1, #popped do
    seq = seq + 1
    local m = popped[i]
    local fresh = false
    if byte(m, 17) == 46 then  -- "." after 16 hex digits
      local _, dot = find(m, '^%x+%.')
      fresh = dot == 17
    end
    if fresh then
      -- a fresh job ("<seq>.<id>", member_id in _lib.lua): no read, ONE write. HSET answers
      -- 1 when it created the field: no job (or not Conveyor's) behind this member
      local id = sub(m, 18)
      local key = jobp .. id
      local r = redis.pcall('HSET', key, 'state', 'active')
      if r == 0 then
        local token = format('%d', seq) .. suffix
        claimed = claimed + 1
        ids[claimed] = id
        local n = #runs
        runs[n + 1], runs[n + 2] = id, token  -- completed below, with the task
        n = #out
        out[n + 1], out[n + 2], out[n + 3] = id, token, false
      elseif r == 1 then
        redis.call('HDEL', key, 'state')  -- undone (an emptied hash is deleted)
      else
        bury_foreign(id, key, redis.call('TYPE', key).ok)
      end
    else
      local id = member_id(m)
      local key = jobp .. id
      local f = redis.pcall('HMGET', key, 'state', 'attempts', 'task', 'run_at', 'lost',
        'errors', 'history', 'last_error', 'expires_at', 'wf', 'grp')
      if f.err then
        bury_foreign(id, key, redis.call('TYPE', key).ok)
      elseif f[1] == 'pending' and f[9] and tonumber(f[9]) <= nnow then
        lapse(id, key, f[3], f[2])
      elseif f[1] == 'pending' then
        lease_slow(id, key, f, seq, 10)
      end
    end
  end
end
if claimed > 0 then
  local payloads = hmget_many(q.payloads, ids)
  for i = 1, claimed do
    local p = payloads[i]
    out[i * 3 + 3] = p  -- 3rd of the job's 3 values
    if not texts[i] then
      -- a fresh job's event row, from its envelope: Conveyor writes '{"v":1,"id":<id>,
      -- "task":<task>' first. When the envelope's id is the member's id as it stands (then it
      -- needs no escaping), the task's JSON text is copied as it stands: plain finds only, no
      -- pattern walks the id or the task (a class scan cost ~150 instructions a character).
      -- A task text with a backslash (an escape, or a quote that is not its end) takes cjson;
      -- so does anything else. The copy is valid JSON when the envelope is (a payload that is
      -- not JSON is dead-lettered by the client; eventcodec.py reads a row with raw control
      -- characters or bytes that are not UTF-8 all the same)
      local id = ids[i]
      local row = nil
      local e = 14 + #id  -- where the id's closing quote is
      if p and find(p, '{"v":1,"id":"', 1, true) == 1 and find(p, id, 14, true) == 14
          and find(p, '","task":"', e, true) == e then
        local close = find(p, '"', e + 10, true)
        local text = close and sub(p, e + 9, close)
        if text and not find(text, '\\', 1, true) then row = '"' .. id .. '",' .. text .. ',1' end
      end
      if not row then
        local ok, env = pcall(cjson.decode, p or '')
        local task = ok and type(env) == 'table' and type(env.task) == 'string' and env.task
        row = jtext(id) .. ',' .. jtext(task or '') .. ',1'
      end
      texts[i] = row
      runs[i * 2] = runs[i * 2] .. '|0' .. mid .. row .. fresh_tail
    end
  end
  bulk('HSET', q.run, runs)
  -- the leases, in descending id order: a small leases set is a listpack, where ZADD walks
  -- from the head to the new member's place; the call's members share one score, so in
  -- this order each one goes in front of the previous one instead of walking past all of
  -- them (sorting the ids costs far less)
  local order = {}
  for i = 1, claimed do order[i] = ids[i] end
  table.sort(order)
  for i = 1, claimed do leased[i * 2 - 1], leased[i * 2] = score, order[claimed + 1 - i] end
  bulk('ZADD', q.leases, leased)
  emit_rows(q, maxlen, 'started', now, {'worker', worker}, {'job_id', 'task', 'attempt'}, texts)
  if #extra > 0 then out[3] = extra end
end
if claimed > 0 and (redis.call('ZCARD', q.ready) > 0
    or (grouped and redis.call('ZCARD', q.flow .. 'groups') > 0)) then
  out[1] = CODE_MORE
  wake(q)
elseif claimed < limit then  -- short (issue 18): the worker waits next, until this time
  out[2] = next_due(q)
end
return out
