-- _wf.lua: the workflow helpers of the job scripts (docs/workflows.md). A prelude file:
-- scripts.py puts the prelude files (_lib, _run, _wf, _timers, _flow, in this order: each helper is
-- defined before the helpers that call it) in front of each script, keeping only the helpers
-- that script names; it is never run on its own. It uses the helpers of _lib.lua.
--
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
-- `dropped`: completed without its result (result_error): a dependant that takes results
-- sees a failed parent (its policy decides), never null in its place.
local function wf_done(q, qname, id, ok, result, now, maxlen, dropped)
  local prefix = string.match(q.job, '^([^{]*):{')
  local stack = {{qname, id, ok, result, dropped}}
  while #stack > 0 do
    local top = table.remove(stack)
    local pid, pok = top[2], top[3]
    local out = redis.call('HGET', wf_qkeys(prefix, top[1]).wf .. pid, 'out')
    for _, e in ipairs(out and cjson.decode(out) or {}) do
      local cid, cq, policy = e[1], wf_qkeys(prefix, e[2]), e[3]
      local nkey = cq.wf .. cid
      local eok = pok
      if pok and top[5] then
        local pass = redis.call('HGET', nkey, 'passing')
        if pass == 'one' or pass == 'all' then eok = false end
      end
      local mark = '0'
      if eok then mark = '1' .. (top[4] or 'null') end
      if redis.call('HSETNX', nkey, 'r:' .. pid, mark) == 1
        and redis.call('HGET', cq.job .. cid, 'state') == 'waiting' then
        local n = redis.call('HMGET', nkey, 'trig', 'passing')
        if not eok and policy == 'fail' and n[1] ~= 'one_failed' then
          local detail = 'failed'
          if pok then detail = 'completed without its result (result_error)' end
          wf_upstream_failed(cq, cid, pid, detail, now, maxlen)
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
