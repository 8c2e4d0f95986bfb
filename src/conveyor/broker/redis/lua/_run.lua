-- _run.lua: the run entries of active jobs (issue 18; keys.py RUN): their format, reading a
-- lease from an entry or from an older version's hash fields (lease_of), ending it (lease_end),
-- and the events whose rows come from entries (emit_rows). A prelude file (see _wf.lua): it
-- uses the helpers of _lib.lua; claim.lua, complete.lua, fail.lua, release.lua, extend.lua,
-- cancel_running.lua and _timers.lua call these.

-- JSON text of a string: what cjson.encode gives, without its cost for plain text (the usual
-- job id and task name)
local function jtext(s)
  if string.find(s, '[%c"\\/\128-\255]') then return cjson.encode(s) end
  return '"' .. s .. '"'
end

-- The run entry of an active job (issue 18): field <id> of the queue's run hash (q.run), one
-- packed value written by the claim in one HSET for the whole batch, read by the completion
-- in one HMGET for its batch, deleted when the job leaves active:
--   "<token>|<flag>|<lease deadline>|<row>\n<attempts>|<started_at>|<worker_id>"
-- token = "<seq>:<queue>"; flag "1" = the job hash has fields the exit must read (wf, grp),
-- "0" = none; row = the job's event row as JSON text without its brackets:
-- "<id>","<task>",<attempts> (the completion passes it on to its event as it is). The
-- completion keeps the part after the newline in the job hash as field "run" (short: the
-- hash stays a listpack; codec.py reads it). A job leased by an older version has no entry:
-- its lease fields are in its hash (state active, token, attempts, lease_expires_at,
-- worker_id, started_at), and lease_of falls back to them.
local function run_fields(r)
  local token, flag, deadline, row, attempts, started, worker = string.match(r,
    '^([^|]*)|(%d)|([^|]*)|([^\n]*)\n(%d+)|([^|]*)|(.*)$')
  if not token then return nil end
  local ok, v = pcall(cjson.decode, '[' .. row .. ']')
  local task = ok and type(v) == 'table' and type(v[2]) == 'string' and v[2] or ''
  return {token = token, flag = flag, row = row, task = task, attempts = attempts,
    started = started, deadline = deadline, worker = worker, run = true}
end

local function run_entry(L)
  return L.token .. '|' .. L.flag .. '|' .. L.deadline .. '|' .. L.row .. '\n' .. L.attempts
    .. '|' .. L.started .. '|' .. L.worker
end

-- the lease of an active job whose token is `token`, or nil (not active, stale token, gone,
-- not a hash): {token, attempts, worker, started, deadline, task, run, wf, grp, x} where
-- `run` tells a run entry from an older version's hash fields; the hash fields named in
-- `...` are read too (L.x[i])
local function lease_of(q, id, key, token, ...)
  local extra = {...}
  local r = redis.call('HGET', q.run, id)
  if r then
    local L = run_fields(r)
    if not L or L.token ~= token then return nil end
    local f = hmget(key, 'state', 'wf', 'grp', unpack(extra))
    if not f or f[1] ~= 'active' then return nil end
    L.wf, L.grp, L.x = f[2], f[3], {unpack(f, 4)}
    return L
  end
  local f = hmget(key, 'state', 'token', 'attempts', 'worker_id', 'started_at',
    'lease_expires_at', 'task', 'wf', 'grp', unpack(extra))
  if not f or f[1] ~= 'active' or f[2] ~= token then return nil end
  return {token = f[2], attempts = f[3] or '0', worker = f[4] or '', started = f[5],
    deadline = f[6], task = f[7] or '', wf = f[8], grp = f[9], x = {unpack(f, 10)},
    run = false}
end

-- the job leaves active other than by completing: its run entry goes and what outlives the
-- run is written to its hash as plain fields (attempts, started_at, and worker_id unless
-- `drop_worker`; a "run" field of an earlier completion would shadow them: deleted); an
-- older version's lease fields (token, lease_expires_at) are deleted
local function lease_end(q, id, key, L, drop_worker)
  if L.run then
    redis.call('HDEL', q.run, id)
    if drop_worker or L.worker == '' then
      redis.call('HSET', key, 'attempts', L.attempts, 'started_at', L.started)
    else
      redis.call('HSET', key, 'attempts', L.attempts, 'started_at', L.started,
        'worker_id', L.worker)
    end
    redis.call('HDEL', key, 'run')
  else
    redis.call('HDEL', key, 'lease_expires_at', 'token')
  end
  if drop_worker then redis.call('HDEL', key, 'worker_id') end
  redis.call('ZREM', q.leases, id)
end

-- emit_many for rows given as JSON texts (a run entry's row: "<id>","<task>",<attempts>):
-- several are joined into the batch entry as they are, one is decoded for the flat entry
local function emit_rows(q, maxlen, kind, at, shared, columns, texts)
  local n = #texts
  if n == 0 then return end
  if n == 1 then
    emit_many(q, maxlen, kind, at, shared, columns, cjson.decode('[' .. texts[1] .. ']'))
    return
  end
  local args = {'XADD', q.events, 'MAXLEN', '~', maxlen, '*', 'type', kind, 'at', at}
  local cap = tonumber(maxlen)
  if cap and cap > 0 then args[5] = istr(math.max(1, math.floor(cap / n))) end
  for i = 1, #shared do args[#args + 1] = shared[i] end
  args[#args + 1] = 'fields'
  args[#args + 1] = table.concat(columns, ' ')
  args[#args + 1] = 'jobs'
  args[#args + 1] = '[' .. table.concat(texts, ',') .. ']'
  redis.call(unpack(args))
end
