-- extend.lua: push the lease deadline of several jobs of one queue (no state change).
--
-- Per (id, token): the token must match and the job must be active, else CODE_NO (lease lost):
-- checked against the job's run entry (the new deadline is written there), or, for a job
-- leased by an older version, against its hash fields (lease_expires_at written there).
--
-- Input
--   KEYS: the 16 queue keys (_timers.lua)
--   ARGV: [1] new deadline (now + visibility_timeout)  then pairs: id, token
-- Output: {code_1, code_2, ...} one per pair: CODE_OK extended, CODE_NO lease lost
local q = qkeys(0)
local deadline = ARGV[1]
local score = lease_score(deadline)  -- whole seconds in the leases set (_timers.lua)
local out, ids = {}, {}
for i = 2, #ARGV, 2 do ids[#ids + 1] = ARGV[i] end
local entries = hmget_many(q.run, ids)  -- the run entries (_lib.lua), one read for all
for k = 1, #ids do
  local id, token = ids[k], ARGV[k * 2 + 1]
  local L = entries[k] and run_fields(entries[k])
  local ok = false
  if L then
    if L.token == token then
      L.deadline = deadline
      redis.call('HSET', q.run, id, run_entry(L))
      ok = true
    end
  else  -- leased by an older version: the lease fields are in the job hash
    local f = hmget(q.job .. id, 'state', 'token')
    if f and f[1] == 'active' and f[2] == token then
      redis.call('HSET', q.job .. id, 'lease_expires_at', deadline)
      ok = true
    end
  end
  if ok then
    redis.call('ZADD', q.leases, score, id)
    out[#out + 1] = CODE_OK
  else
    out[#out + 1] = CODE_NO
  end
end
return out
