-- enqueue_one.lua: store ONE new job (transition: (new) -> pending | scheduled) -- the common
-- task.enqueue(...) call (issue 18). Only a job without an idempotency key, expiry or flow
-- group comes here (enqueue.lua takes everything else); it makes exactly enqueue.lua's writes
-- for such a job: the job hash, its ready-set (pending) or scheduled-set entry, its payload, a
-- wake-up marker (delayed jobs too: an idle worker learns the new due time), one "enqueued"
-- event. Most of a small script's cost is turning KEYS and ARGV into Lua strings, so this one
-- takes few: one key prefix instead of the 16 queue keys.
--
-- Input
--   KEYS: [1] the queue's key prefix <p>:{q}: (keys.py KeySchema.tag); the keys written are
--         the prefix plus a suffix of keys.py QUEUE_KEY_SUFFIXES (a test compares them), all
--         in the prefix's hash slot
--   ARGV: [1] options (JSON object): now, events_max, fresh (present: a pending job gets a
--             fresh member "<seq>.<id>"; only when <p>:format says every worker reads them,
--             fmtgate.py; absent: "<seq>:<id>" as before) -- OR, what Conveyor sends since
--             session 10, `now` itself, with [9] events_max and [10] "1" = fresh (absent =
--             not): told apart by ARGV[9]. Decoding the object cost ~5 % of this script's
--             server work; the object form stays for other producers (wire-format.md)
--         then the job: [2] id  [3] payload (JSON envelope)  [4] state ("pending" |
--         "scheduled")  [5] priority  [6] run_at  [7] created_at  [8] task
-- Output: {CODE_OK} stored | {CODE_DUPLICATE_ID, id} a job with this id exists: nothing stored
local now, maxlen, fresh = ARGV[1], ARGV[9], ARGV[10]
if not maxlen then  -- eight arguments: the options object
  local o = cjson.decode(ARGV[1])
  now, maxlen, fresh = o.now, o.events_max, o.fresh
end
local t, id, state, prio, run_at, task = KEYS[1], ARGV[2], ARGV[4], ARGV[5], ARGV[6], ARGV[8]
local key = t .. 'job:' .. id
if redis.call('EXISTS', key) == 1 then return {CODE_DUPLICATE_ID, id} end
if state == 'pending' then
  -- member(seq, id); "." marks a fresh job (member_id in _lib.lua; claim.lua reads no hash)
  local m = string.format(fresh and '%016x.%s' or '%016x:%s', redis.call('INCR', t .. 'seq'),
    id)
  redis.call('HSET', key, 'state', state, 'priority', prio, 'run_at', run_at,
    'created_at', ARGV[7], 'task', task, 'rk', m)
  redis.call('ZADD', t .. 'ready', prio, m)
else
  redis.call('HSET', key, 'state', state, 'priority', prio, 'run_at', run_at,
    'created_at', ARGV[7], 'task', task)
  redis.call('ZADD', t .. 'scheduled', run_at, id)
end
redis.call('HSET', t .. 'payloads', id, ARGV[3])
local wake = t .. 'wake'
if redis.call('LLEN', wake) < WAKE_MAX then redis.call('LPUSH', wake, '1') end
redis.call('XADD', t .. 'events', 'MAXLEN', '~', maxlen, '*', 'type', 'enqueued',
  'job_id', id, 'task', task, 'at', now, 'state', state)
return {CODE_OK}
