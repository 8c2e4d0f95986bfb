-- enqueue.lua: store new jobs, all or none (transition: (new) -> pending | scheduled).
--
-- Per group (queue): one EXISTS per 1000 ids, the job hashes, then the ready / scheduled sets
-- and payloads in bulk, and the "enqueued" events as one stream entry (emit_many in _lib.lua).
--
-- KEYS: G groups of the 14 queue keys (see _lib.lua), one group per queue of the batch.
--       Redis Cluster: always exactly one group (one slot); a standalone server takes several,
--       which makes a multi-queue enqueue_many one atomic script.
-- ARGV: [1] now  [2] events_max  [3] G
--       then per group: queue name, n, and n x 10 job fields:
--         id, payload (JSON envelope), state ("pending"|"scheduled"), priority, run_at,
--         created_at, task, idempotency key ("" = none), key expiry (now + ttl), key PX ms
-- Returns:
--   {-1, id}  a job with this id already exists in its queue: nothing was stored
--   {1, dup_1, id_1, state_1, dup_2, ...}  per job: dup 1 when an idempotency key matched
--             (id/state are then the existing job's), else 0 with the new job's id and state
local now, maxlen, groups = ARGV[1], ARGV[2], tonumber(ARGV[3])
local nnow = tonumber(now)

-- phase 1: decide duplicates, refuse existing ids (nothing written yet)
local plan = {}
local pos = 4
for g = 1, groups do
  local q = qkeys((g - 1) * 14)
  local n = tonumber(ARGV[pos + 1])
  local first = pos + 2
  local batch_keys, fresh_keys = {}, {}
  for j = 0, n - 1 do
    local a = first + j * 10
    local id, key = ARGV[a], ARGV[a + 7]
    local dup = false
    if key ~= '' then
      dup = batch_keys[key] or false
      if not dup then
        local v = redis.call('GET', q.idem .. key)
        if v then
          local bar = string.find(v, '|', 1, true)
          local exp = bar and tonumber(string.sub(v, 1, bar - 1))
          if exp and exp > nnow then dup = string.sub(v, bar + 1) end
        end
      end
    end
    if not dup then
      fresh_keys[#fresh_keys + 1] = q.job .. id
      if key ~= '' then batch_keys[key] = id end
    end
    plan[#plan + 1] = {q, a, dup}
  end
  -- refuse ids that exist: one EXISTS per 1000 jobs; only a hit looks for the first one
  for i = 1, #fresh_keys, 1000 do
    local last = math.min(i + 999, #fresh_keys)
    if redis.call('EXISTS', unpack(fresh_keys, i, last)) > 0 then
      for j = i, last do
        if redis.call('EXISTS', fresh_keys[j]) == 1 then
          return {-1, string.sub(fresh_keys[j], #q.job + 1)}
        end
      end
    end
  end
  pos = first + n * 10
end

-- phase 2: write (ready-set and scheduled-set entries are added in bulk per group)
local out = {1}
pos = 4
local gi = 0
for g = 1, groups do
  local q = qkeys((g - 1) * 14)
  local n = tonumber(ARGV[pos + 1])
  pos = pos + 2 + n * 10
  local fresh = 0
  for j = 1, n do
    if not plan[gi + j][3] and ARGV[plan[gi + j][2] + 2] == 'pending' then fresh = fresh + 1 end
  end
  local seq = 0
  if fresh > 0 then seq = redis.call('INCRBY', q.seq, fresh) - fresh end
  local ready, scheduled, payloads, rows = {}, {}, {}, {}
  for _ = 1, n do
    gi = gi + 1
    local a, dup = plan[gi][2], plan[gi][3]
    local id, state = ARGV[a], ARGV[a + 2]
    if dup then
      local existing = redis.pcall('HGET', q.job .. dup, 'state')
      if type(existing) ~= 'string' then existing = state end
      out[#out + 1] = 1; out[#out + 1] = dup; out[#out + 1] = existing
    else
      local key = q.job .. id
      if state == 'pending' then
        seq = seq + 1
        local m = member(seq, id)
        ready[#ready + 1] = ARGV[a + 3]
        ready[#ready + 1] = m
        redis.call('HSET', key, 'state', state, 'priority', ARGV[a + 3], 'run_at', ARGV[a + 4],
          'created_at', ARGV[a + 5], 'task', ARGV[a + 6], 'rk', m)
      else
        scheduled[#scheduled + 1] = ARGV[a + 4]
        scheduled[#scheduled + 1] = id
        redis.call('HSET', key, 'state', state, 'priority', ARGV[a + 3], 'run_at', ARGV[a + 4],
          'created_at', ARGV[a + 5], 'task', ARGV[a + 6])
      end
      payloads[#payloads + 1] = id
      payloads[#payloads + 1] = ARGV[a + 1]
      if ARGV[a + 7] ~= '' then
        redis.call('SET', q.idem .. ARGV[a + 7], ARGV[a + 8] .. '|' .. id, 'PX', ARGV[a + 9])
      end
      rows[#rows + 1] = id
      rows[#rows + 1] = ARGV[a + 6]
      rows[#rows + 1] = state
      out[#out + 1] = 0; out[#out + 1] = id; out[#out + 1] = state
    end
  end
  if #ready > 0 then
    bulk('ZADD', q.ready, ready)
    wake(q)
  end
  if #scheduled > 0 then bulk('ZADD', q.scheduled, scheduled) end
  if #payloads > 0 then bulk('HSET', q.payloads, payloads) end
  emit_many(q, maxlen, 'enqueued', now, {}, {'job_id', 'task', 'state'}, rows)
end
return out
