-- complete.lua: record a batch of successes of one queue (transition: active -> completed).
--
-- Per ack: the job's run entry (run_fields in _run.lua; one HMGET for the batch) must begin
-- with the ack's token — it exists only while the job is active — else the ack is refused
-- (CODE_NO) and nothing changes; a job leased by an older version (no run entry) is checked
-- against its hash's token and state instead (lease_of). On success, ONE write to the job
-- hash: state completed, finished_at, result, and field run = the entry's end
-- (attempts|started_at|worker_id); run entry and lease entry removed (one HDEL / ZREM for the
-- batch), "completed" event (one stream entry for the batch, the rows taken from the run
-- entries as they are: emit_rows in _run.lua), completed-set entry; then the oldest completed
-- jobs beyond completed_max are deleted (retention by count; by TTL in reap.lua). The same
-- ack twice in one batch counts once.
--
-- An ack may carry an errors entry (a result that could not be stored: kind result_error, the
-- result is then ""): it is appended to "errors" (its "attempt" filled in as in fail.lua) and
-- sets last_error, in the same step as the completion.
--
-- A workflow node (field wf) releases or ends its dependants in the same step (wf_done in
-- _wf.lua); one completed without its result fails the dependants that take results.
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua)
--   ARGV: [1] options (JSON object): queue, now, completed_max, events_max -- OR, what
--         Conveyor sends (session 10: decoding the object cost ~8k instructions a call), the
--         same four values as plain ARGV[1..4] (told apart by the count: #ARGV % 5)
--         then per ack (5 values): id, token, result JSON ("" = null), errors entry JSON
--         ("" = none), last_error (used with an entry)
-- Output: {code_1, code_2, ...} one per ack: CODE_OK recorded, CODE_NO stale token / not
--         active (LeaseLost)
local q = qkeys(0)
local o, first = nil, 5  -- the first ack's ARGV index
if #ARGV % 5 == 1 then  -- the options object, then 5 values per ack
  o, first = cjson.decode(ARGV[1]), 2
else  -- plain: queue, now, completed_max, events_max (what Conveyor sends)
  o = {queue = ARGV[1], now = ARGV[2], completed_max = tonumber(ARGV[3]), events_max = ARGV[4]}
end
local now, maxlen = o.now, o.events_max
local find, byte, sub = string.find, string.byte, string.sub
local out, ids, done, texts, acked, finished = {}, {}, {}, {}, {}, {}
for i = first, #ARGV, 5 do acked[#acked + 1] = ARGV[i] end
local entries = hmget_many(q.run, acked)  -- the run entries of the batch (_lib.lua)
local jobp = q.job
for k = 1, #acked do
  local i = first + k * 5 - 5
  local id, token, result, entry = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local key = jobp .. id
  local r = entries[k]
  local row, attempts, wf, grp, w = nil, nil, nil, nil, nil
  if r and finished[id] then
    r = nil  -- the same ack twice in this batch: the first one took the entry (below)
  elseif r then
    -- fenced by the run entry (it exists only while the job is active): it must begin with
    -- this token; its event row and the entry itself are taken as they are
    local n = #token
    local bar, flag = byte(r, n + 1, n + 2)
    if bar == 124 and find(r, token, 1, true) == 1 then
      if flag == 49 then  -- flag 1: the hash has fields this exit reads
        local f = hmget(key, 'wf', 'grp') or {}
        wf, grp = f[1], f[2]
      end
      local p = find(r, '|', n + 4, true)  -- after the lease deadline: the event row
      local e = find(r, '\n', p, true)
      row = sub(r, p + 1, e - 1)
      local kept = sub(r, e + 1)  -- attempts|started_at|worker_id: the hash's field run
      if result ~= '' then
        w = redis.pcall('HSET', key, 'state', 'completed', 'finished_at', now, 'run', kept,
          'result', result)
      else
        w = redis.pcall('HSET', key, 'state', 'completed', 'finished_at', now, 'run', kept)
      end
    end
  else  -- leased by an older version: the lease fields are in the job hash (lease_of)
    local L = lease_of(q, id, key, token)
    if L then
      wf, grp, attempts = L.wf, L.grp, string.format('%d', tonumber(L.attempts) or 0)
      row = jtext(id) .. ',' .. jtext(L.task) .. ',' .. attempts
      if result ~= '' then
        w = redis.pcall('HSET', key, 'state', 'completed', 'finished_at', now, 'result', result)
      else
        w = redis.pcall('HSET', key, 'state', 'completed', 'finished_at', now)
      end
      if type(w) ~= 'table' then redis.call('HDEL', key, 'run') end
    end
  end
  if row and type(w) ~= 'table' then
    if grp then free_slots(q, id, key, grp) end
    if entry ~= '' then
      if not find(entry, '"attempt":', 1, true) then
        attempts = attempts or string.match(row, ',(%d+)$') or '0'
        entry = '{"attempt":' .. attempts .. ',' .. sub(entry, 2)
      end
      append_line(key, 'errors', entry, nil)
      redis.call('HSET', key, 'last_error', ARGV[i + 4])
    end
    local n = #ids + 1
    ids[n], texts[n] = id, row
    finished[id] = true
    done[n * 2 - 1], done[n * 2] = now, id
    out[k] = CODE_OK
    if wf then  -- a workflow node with dependants: released in this same step
      local dropped = result == '' and entry ~= ''  -- a result_error: nothing to pass on
      if result == '' then result = 'null' end
      wf_done(q, o.queue, id, true, result, now, maxlen, dropped)
    end
  else
    out[k] = CODE_NO  -- stale token, not active, or not a hash any more (planted)
  end
end
if #ids > 0 then
  emit_rows(q, maxlen, 'completed', now, {}, {'job_id', 'task', 'attempt'}, texts)
  bulk('HDEL', q.run, ids)
  bulk('ZREM', q.leases, ids)
  bulk('ZADD', q.completed, done)
  trim(q, q.completed, o.completed_max)
end
return out
