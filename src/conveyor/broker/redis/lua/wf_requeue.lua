-- wf_requeue.lua: requeue a workflow node that never got its parents' results, giving them
-- now (transition: dead_letter | cancelled | expired -> pending, as requeue.lua).
--
-- The node ended from `waiting` (upstream_failed, or cancelled while waiting), so its node
-- record still counts parents (field pending > 0). Python read its parents' results
-- (workflows.py requeue_node, flow.requeue_inputs) and passes the arguments to put first;
-- this script checks the node is still in that case (else CODE_NO: nothing changed, the caller
-- uses requeue.lua), requeues it like requeue.lua, writes the inputs into its envelope and sets
-- pending to 0, so a later requeue keeps them and a second caller of this script gets CODE_NO.
--
-- Input
--   KEYS: the 16 queue keys (_lib.lua) of the node's queue, [17] its node record (keys.py wf_node)
--   ARGV: [1] id  [2] now  [3] events_max  [4] inputs (JSON values to put first, "" = none)
-- Output: CODE_OK requeued with its inputs | CODE_NO not such a node (nothing changed)
local q = qkeys(0)
local id, now = ARGV[1], ARGV[2]
local key = q.job .. id
local f = hmget(key, 'state', 'attempts', 'priority', 'task', 'grp')
if not f then return CODE_NO end
local set = ({dead_letter = q.dead, cancelled = q.cancelled, expired = q.expired})[f[1]]
local nkey = KEYS[17]
if not set or (tonumber(redis.call('HGET', nkey, 'pending')) or 0) <= 0 then return CODE_NO end
redis.call('ZREM', set, id)
local attempts = f[2] or '0'
history(key, 'requeued', now, attempts, 'after ' .. attempts .. ' attempts', nil)
redis.call('HSET', key, 'attempts', 0, 'lost', 0, 'run_at', now)
redis.call('HDEL', key, 'finished_at', 'result', 'expires_at')
wf_inject(q, id, ARGV[4])
redis.call('HSET', nkey, 'pending', 0)
make_ready(q, id, tonumber(f[3]) or 0, f[5])
wake(q)
emit(q, ARGV[3], 'type', 'requeued', 'job_id', id, 'task', f[4] or '', 'at', now)
return CODE_OK
