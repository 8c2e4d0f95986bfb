-- wf_enqueue.lua: store a whole workflow, all or nothing (transition: (new) -> pending |
-- scheduled | waiting: a node without parents but with a delay is scheduled).
--
-- Every node becomes a job (hash, payload, ready or waiting set entry, "enqueued" event) and a
-- graph record (<p>:{q}:wf:<id>, see _wf.lua); nodes with dependants get
-- field wf = "1" in their job hash. The workflow's index (KEYS[1], keys.py workflow) lists
-- its nodes and edges for readers (dashboard, WorkflowHandle). Nodes carry no idempotency
-- key; ids the producer minted are fresh, and the others (a node's own job_id, options.check)
-- are refused first when a job of that id exists or two nodes share one, nothing written: the
-- script cannot fail halfway. Nodes may sit in several queues (keys built by wf_qkeys):
-- standalone or Sentinel Redis only, not Cluster.
--
-- Input
--   KEYS: [1] the workflow's index key (STRING)
--   ARGV: [1] options (JSON object): now, events_max, prefix (the key prefix), index (the
--         index document: JSON {"nodes": [[id, queue], ...], "edges": [[parent, child,
--         policy], ...]}), check (JSON [[id, queue], ...]: the ids not minted for it)
--         then per node 18 values: id, queue, payload, state (pending | scheduled | waiting),
--         priority,
--         run_at, created_at, task, workflow id, pending parents, passing, trigger,
--         in (JSON [[parent, policy], ...]), out (JSON [[child, queue, policy], ...]),
--         expires_at, flow group, flow record JSON ("" = none; flow control, issue 15: a
--         node of a limited task waits in its group when pending, as enqueue.lua's jobs do),
--         the node's own delay in seconds ("" = none: counted from its release, wf_release)
-- Output: CODE_OK | {CODE_DUPLICATE_ID, id} a job with this id exists (or two nodes have
--         it): nothing stored
local o = cjson.decode(ARGV[1])
local now, maxlen = o.now, o.events_max
local seen = {}
for _, c in ipairs(cjson.decode(o.check)) do
  if seen[c[1]] or redis.call('EXISTS', wf_qkeys(o.prefix, c[2]).job .. c[1]) == 1 then
    return {CODE_DUPLICATE_ID, c[1]}
  end
  seen[c[1]] = true
end
redis.call('SET', KEYS[1], o.index)
for i = 2, #ARGV, 18 do
  local id, qname, state, prio = ARGV[i], ARGV[i + 1], ARGV[i + 3], ARGV[i + 4]
  local q = wf_qkeys(o.prefix, qname)
  local key = q.job .. id
  redis.call('HSET', key, 'state', state, 'priority', prio, 'run_at', ARGV[i + 5],
    'created_at', ARGV[i + 6], 'task', ARGV[i + 7])
  if ARGV[i + 13] ~= '[]' then redis.call('HSET', key, 'wf', '1') end
  if ARGV[i + 14] ~= '' then redis.call('HSET', key, 'expires_at', ARGV[i + 14]) end
  local grp = ARGV[i + 15] ~= '' and ARGV[i + 15]
  if grp then redis.call('HSET', key, 'grp', grp, 'flow', ARGV[i + 16]) end
  redis.call('HSET', q.payloads, id, ARGV[i + 2])
  if state == 'pending' then
    make_ready(q, id, tonumber(prio) or 0, grp)
    wake(q)
  elseif state == 'scheduled' then
    redis.call('ZADD', q.scheduled, ARGV[i + 5], id)
    wake(q)  -- an idle worker recomputes how long to sleep
  else
    redis.call('ZADD', q.waiting, ARGV[i + 6], id)
  end
  redis.call('HSET', q.wf .. id, 'workflow', ARGV[i + 8], 'pending', ARGV[i + 9],
    'passing', ARGV[i + 10], 'trig', ARGV[i + 11], 'in', ARGV[i + 12],
    'out', ARGV[i + 13])
  if ARGV[i + 17] ~= '' then redis.call('HSET', q.wf .. id, 'delay', ARGV[i + 17]) end
  emit(q, maxlen, 'type', 'enqueued', 'job_id', id, 'task', ARGV[i + 7], 'at', now,
    'state', state)
end
return CODE_OK
