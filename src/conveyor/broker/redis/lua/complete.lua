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
local out, ids, done, rows = {}, {}, {}, {}
for i = 2, #ARGV, 5 do
  local id, token, result, entry = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local key = q.job .. id
  local f = redis.pcall('HMGET', key, 'state', 'token', 'attempts', 'task', 'wf', 'grp')
  if not f.err and f[1] == 'active' and f[2] == token then
    if f[6] then free_slots(q, id, key, f[6]) end
    if result ~= '' then
      redis.call('HSET', key, 'state', 'completed', 'finished_at', now, 'result', result)
    else
      redis.call('HSET', key, 'state', 'completed', 'finished_at', now)
    end
    if entry ~= '' then
      if not string.find(entry, '"attempt":', 1, true) then
        entry = '{"attempt":' .. (f[3] or '0') .. ',' .. string.sub(entry, 2)
      end
      append_line(key, 'errors', entry, nil)
      redis.call('HSET', key, 'last_error', ARGV[i + 4])
    end
    rows[#rows + 1] = id
    rows[#rows + 1] = f[4] or ''
    rows[#rows + 1] = tonumber(f[3]) or 0
    ids[#ids + 1] = id
    done[#done + 1] = now
    done[#done + 1] = id
    out[#out + 1] = CODE_OK
    if f[5] then  -- a workflow node with dependants: released in this same step
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
  bulk('ZREM', q.leases, ids)
  bulk('ZADD', q.completed, done)
  trim(q, q.completed, o.completed_max)
end
return out
