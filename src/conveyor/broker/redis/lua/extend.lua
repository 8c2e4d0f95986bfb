-- extend.lua: push the lease deadline of several jobs of one queue (no state change).
--
-- Per (id, token): the token must match and the job must be active, else CODE_NO (lease lost).
--
-- Input
--   KEYS: the 16 queue keys (_timers.lua)
--   ARGV: [1] new deadline (now + visibility_timeout)  then pairs: id, token
-- Output: {code_1, code_2, ...} one per pair: CODE_OK extended, CODE_NO lease lost
local q = qkeys(0)
local deadline = ARGV[1]
local score = lease_score(deadline)  -- whole seconds in the leases set (_timers.lua)
local out = {}
for i = 2, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local key = q.job .. id
  local f = hmget(key, 'state', 'token')
  if f and f[1] == 'active' and f[2] == token then
    redis.call('HSET', key, 'lease_expires_at', deadline)
    redis.call('ZADD', q.leases, score, id)
    out[#out + 1] = CODE_OK
  else
    out[#out + 1] = CODE_NO
  end
end
return out
