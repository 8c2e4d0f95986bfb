-- doc_cas.lua: compare-and-set on one field of a document (not a job transition).
--
-- Documents are hashes: field -> JSON value (orjson, sorted keys), plus meta fields "\0" (always
-- present) and "\0exp" (logical expiry, epoch seconds). Numbers compare numerically; an absent
-- field equals JSON null.
--
-- Input
--   KEYS: [1] the document hash
--   ARGV: [1] now  [2] field  [3] expected value as JSON  then pairs: field, JSON value to set
-- Output: 1 changed | 0 missing, expired or the field did not match (ScriptCode.OK / NO;
--         literals: this script runs without _lib.lua)
local key = KEYS[1]
if redis.call('EXISTS', key) == 0 then return 0 end
local exp = redis.call('HGET', key, '\0exp')
if exp and tonumber(exp) <= tonumber(ARGV[1]) then return 0 end
local cur = redis.call('HGET', key, ARGV[2]) or 'null'
local want = ARGV[3]
if cur ~= want then
  local a, b = tonumber(cur), tonumber(want)
  if not (a and b and a == b) then return 0 end
end
for i = 4, #ARGV, 2 do redis.call('HSET', key, ARGV[i], ARGV[i + 1]) end
return 1
