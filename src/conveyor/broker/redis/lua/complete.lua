-- complete.lua: record a batch of successes of one queue (transition: active -> completed).
--
-- Per ack: the token must match the job's current token and the job must be active, else the
-- ack is refused (CODE_NO) and nothing changes. On success: state completed, result, finished_at,
-- lease entry removed, "completed" event (one stream entry for the batch: emit_many in
-- _lib.lua), completed-set entry; then the oldest completed jobs beyond completed_max are
-- deleted (retention by count; by TTL in reap.lua). The stale token and lease_expires_at
-- fields are left in the hash (ignored unless the job is active).
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
--   ARGV: [1] options (JSON object): queue, now, completed_max, events_max
--         then per ack (5 values): id, token, result JSON ("" = null), errors entry JSON
--         ("" = none), last_error (used with an entry)
-- Output: {code_1, code_2, ...} one per ack: CODE_OK recorded, CODE_NO stale token / not
--         active (LeaseLost)
local q = qkeys(0)
local o = cjson.decode(ARGV[1])
local now, maxlen = o.now, o.events_max
local suffix = ':' .. o.queue  -- of every fencing token "<seq>:<queue>"
local out, ids, done, rows, acked = {}, {}, {}, {}, {}
for i = 2, #ARGV, 5 do acked[#acked + 1] = ARGV[i] end
local entries = hmget_many(q.run, acked)  -- the run entries of the batch (_lib.lua)
for k = 1, #acked do
  local i = k * 5 - 3
  local id, token, result, entry = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local key = q.job .. id
  local r = entries[k]
  local L = r and run_fields(r)
  local ok, wf, grp = false, nil, nil
  if L then
    -- fencing against the run entry: it exists only while the job is active
    ok = L.seq .. suffix == token
    if ok and L.flag == '1' then
      local f = hmget(key, 'wf', 'grp') or {}
      wf, grp = f[1], f[2]
    end
  else  -- leased by an older version: the lease fields are in the job hash (lease_of)
    L = lease_of(q, id, key, token)
    if L then ok, wf, grp = true, L.wf, L.grp end
  end
  if ok then
    if grp then free_slots(q, id, key, grp) end
    -- ONE write: the state and what outlives the run (token and deadline do not)
    local w
    if result ~= '' then
      w = redis.pcall('HSET', key, 'state', 'completed', 'finished_at', now, 'result', result,
        'attempts', L.attempts, 'started_at', L.started or now, 'worker_id', L.worker)
    else
      w = redis.pcall('HSET', key, 'state', 'completed', 'finished_at', now,
        'attempts', L.attempts, 'started_at', L.started or now, 'worker_id', L.worker)
    end
    if type(w) == 'table' then ok = false end  -- not a hash any more (planted): refused
  end
  if ok then
    if not L.run then redis.call('HDEL', key, 'lease_expires_at', 'token') end
    if entry ~= '' then
      if not string.find(entry, '"attempt":', 1, true) then
        entry = '{"attempt":' .. L.attempts .. ',' .. string.sub(entry, 2)
      end
      append_line(key, 'errors', entry, nil)
      redis.call('HSET', key, 'last_error', ARGV[i + 4])
    end
    rows[#rows + 1] = id
    rows[#rows + 1] = L.task
    rows[#rows + 1] = tonumber(L.attempts) or 0
    ids[#ids + 1] = id
    done[#done + 1] = now
    done[#done + 1] = id
    out[#out + 1] = CODE_OK
    if wf then  -- a workflow node with dependants: released in this same step
      local dropped = result == '' and entry ~= ''  -- a result_error: nothing to pass on
      if result == '' then result = 'null' end
      wf_done(q, o.queue, id, true, result, now, maxlen, dropped)
    end
  else
    out[#out + 1] = CODE_NO
  end
end
if #ids > 0 then
  emit_many(q, maxlen, 'completed', now, {}, {'job_id', 'task', 'attempt'}, rows)
  bulk('HDEL', q.run, ids)
  bulk('ZREM', q.leases, ids)
  bulk('ZADD', q.completed, done)
  trim(q, q.completed, o.completed_max)
end
return out
