-- enqueue.lua: store new jobs, all or none (transition: (new) -> pending | scheduled).
--
-- Per group (queue): one EXISTS per 1000 ids, the job hashes, then the ready / scheduled sets
-- and payloads in bulk, and the "enqueued" events as one stream entry (emit_many in _lib.lua).
-- Per job this costs one HSET of its own; everything else is one command per group.
-- A wake-up marker is pushed for ready jobs, and for delayed ones too (an idle worker claims,
-- learns the new next due time and sleeps until it).
--
-- Input
--   KEYS: G groups of the 16 queue keys (see _lib.lua), one group per queue of the batch.
--         Redis Cluster: always exactly one group (one slot); a standalone server takes
--         several, which makes a multi-queue enqueue_many one atomic script.
--   ARGV: [1] options (JSON object): now, events_max, fresh (present: pending jobs without
--             expires_at / flow group get fresh members "<seq>.<id>"; only when <p>:format says
--             every worker reads them, fmtgate.py; absent: "<seq>:<id>" as before)
--         then per group (G = #KEYS / 16, in KEYS order): queue name, n, and the group's
--         defaults state ("pending"|"scheduled"), priority, run_at, created_at, task; then
--         its n job records, each one of
--           short (3 values): id, payload (JSON envelope), ""  -- the group defaults apply
--           full (14 values): id, payload, "f", state, priority, run_at, created_at, task,
--                             idempotency key ("" = none), key expiry (now + ttl), key PX ms,
--                             expires_at ("" = none; stored as the hash field claim.lua checks),
--                             flow group ("" = none) and flow record JSON (issue 15: a pending
--                             job of a group goes to the group's set, not the ready set)
-- Output:
--   {CODE_DUPLICATE_ID, id}  a job with this id already exists in its queue: nothing stored
--   {CODE_OK, i_1, id_1, state_1, i_2, ...}  one triple per job NOT stored because its
--             idempotency key matched: i = its position in the batch (1-based, in ARGV
--             order), and the existing job's id and state. Every other job was stored with
--             the id and state it was sent with.
local o = cjson.decode(ARGV[1])
local now, maxlen = o.now, o.events_max
local groups = #KEYS / 16
local nnow = tonumber(now)
local fresh_fmt = o.fresh and '%016x.%s' or '%016x:%s'

-- phase 1: parse, decide duplicates, refuse existing ids (nothing written yet).
-- Flat arrays instead of a table per job: at[k] = ARGV index of job k's id, full[k], dup[k],
-- jk[k] = its job key (new jobs only).
local at, full, dup, jk, qs = {}, {}, {}, {}, {}
local pos = 2
local k = 0
for g = 1, groups do
  local q = qkeys((g - 1) * 16)
  qs[g] = q
  local n = tonumber(ARGV[pos + 1])
  pos = pos + 7
  local batch_keys, fresh_keys = {}, {}
  for _ = 1, n do
    k = k + 1
    at[k] = pos
    local id = ARGV[pos]
    local d = false
    if ARGV[pos + 2] == 'f' then
      full[k] = true
      local key = ARGV[pos + 8]
      if key ~= '' then
        d = batch_keys[key] or false
        if not d then
          local v = redis.call('GET', q.idem .. key)
          if v then
            local bar = string.find(v, '|', 1, true)
            local exp = bar and tonumber(string.sub(v, 1, bar - 1))
            if exp and exp > nnow then d = string.sub(v, bar + 1) end
            -- unique jobs (issue 15): the key holds only while its job waits / is not done
            if d and (string.sub(key, 1, 7) == 'unique:' or string.sub(key, 1, 9) == 'debounce:') then
              local st = redis.pcall('HGET', q.job .. d, 'state')
              if type(st) ~= 'string' then st = nil end
              if string.sub(key, 1, 20) == 'unique:while_queued:'
                  or string.sub(key, 1, 9) == 'debounce:' then
                if st ~= 'pending' and st ~= 'scheduled' and st ~= 'retry_scheduled' then
                  d = false
                end
              elseif string.sub(key, 1, 18) == 'unique:until_done:' then
                if not st or st == 'completed' or st == 'dead_letter' or st == 'cancelled'
                    or st == 'expired' then
                  d = false
                end
              end
            end
          end
        end
        if not d then batch_keys[key] = id end
      end
      pos = pos + 14
    else
      full[k] = false
      pos = pos + 3
    end
    dup[k] = d
    if not d then
      local key = q.job .. id
      jk[k] = key
      fresh_keys[#fresh_keys + 1] = key
    end
  end
  -- refuse ids that exist: one EXISTS per 1000 jobs; only a hit looks for the first one
  for i = 1, #fresh_keys, 1000 do
    local last = math.min(i + 999, #fresh_keys)
    if redis.call('EXISTS', unpack(fresh_keys, i, last)) > 0 then
      for j = i, last do
        if redis.call('EXISTS', fresh_keys[j]) == 1 then
          return {CODE_DUPLICATE_ID, string.sub(fresh_keys[j], #q.job + 1)}
        end
      end
    end
  end
end

-- phase 2: write (ready-set, scheduled-set and payload entries are added in bulk per group)
local out = {CODE_OK}
pos = 2
k = 0
for g = 1, groups do
  local q = qs[g]
  local n = tonumber(ARGV[pos + 1])
  local dstate, dprio, drun, dcreated, dtask = ARGV[pos + 2], ARGV[pos + 3], ARGV[pos + 4],
    ARGV[pos + 5], ARGV[pos + 6]
  pos = pos + 7
  local fresh = 0
  for j = k + 1, k + n do
    if not dup[j] then
      local state = dstate
      if full[j] then state = ARGV[at[j] + 3] end
      if state == 'pending' then fresh = fresh + 1 end
    end
  end
  local seq = 0
  if fresh > 0 then seq = redis.call('INCRBY', q.seq, fresh) - fresh end
  local ready, scheduled, payloads, rows = {}, {}, {}, {}
  local grouped = false
  for _ = 1, n do
    k = k + 1
    local a = at[k]
    local id = ARGV[a]
    local state, prio, run_at, created, task = dstate, dprio, drun, dcreated, dtask
    if full[k] then
      state, prio, run_at, created, task = ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6],
        ARGV[a + 7]
    end
    local d = dup[k]
    if d then
      local existing = redis.pcall('HGET', q.job .. d, 'state')
      if type(existing) ~= 'string' then existing = state end
      out[#out + 1] = k; out[#out + 1] = d; out[#out + 1] = existing
    else
      local key = jk[k]
      local grp = full[k] and ARGV[a + 12] ~= '' and ARGV[a + 12]
      if grp then
        redis.call('HSET', key, 'grp', grp, 'flow', ARGV[a + 13])
      end
      if grp and state == 'pending' then
        seq = seq + 1
        local m = string.format('%016x:%s', seq, id)
        redis.call('ZADD', q.flow .. 'g:' .. grp, prio, m)
        redis.call('INCR', q.flow .. 'npend')
        group_ready(q, grp)
        redis.call('HSET', key, 'state', state, 'priority', prio, 'run_at', run_at,
          'created_at', created, 'task', task, 'rk', m)
        grouped = true
      elseif state == 'pending' then
        seq = seq + 1
        -- member(seq, id), inlined; "." marks a fresh job (member_id in _lib.lua): claim.lua
        -- leases it without reading its hash, so one with an expires_at takes ":"
        local m = string.format((full[k] and ARGV[a + 11] ~= '') and '%016x:%s' or fresh_fmt,
          seq, id)
        ready[#ready + 1] = prio
        ready[#ready + 1] = m
        redis.call('HSET', key, 'state', state, 'priority', prio, 'run_at', run_at,
          'created_at', created, 'task', task, 'rk', m)
      else
        scheduled[#scheduled + 1] = run_at
        scheduled[#scheduled + 1] = id
        redis.call('HSET', key, 'state', state, 'priority', prio, 'run_at', run_at,
          'created_at', created, 'task', task)
      end
      payloads[#payloads + 1] = id
      payloads[#payloads + 1] = ARGV[a + 1]
      if full[k] and ARGV[a + 11] ~= '' then
        redis.call('HSET', key, 'expires_at', ARGV[a + 11])
      end
      if full[k] and ARGV[a + 8] ~= '' then
        redis.call('SET', q.idem .. ARGV[a + 8], ARGV[a + 9] .. '|' .. id, 'PX', ARGV[a + 10])
      end
      rows[#rows + 1] = id
      rows[#rows + 1] = task
      rows[#rows + 1] = state
    end
    if full[k] then pos = pos + 14 else pos = pos + 3 end
  end
  if #ready > 0 then
    bulk('ZADD', q.ready, ready)
    wake(q)
  elseif grouped then
    wake(q)
  end
  if #scheduled > 0 then
    bulk('ZADD', q.scheduled, scheduled)
    if #ready == 0 then wake(q) end  -- idle workers recompute their next due time
  end
  if #payloads > 0 then bulk('HSET', q.payloads, payloads) end
  emit_many(q, maxlen, 'enqueued', now, {}, {'job_id', 'task', 'state'}, rows)
end
return out
