-- _flow.lua: the flow-control helpers of the job scripts (issue 15, docs/flow-control.md).
-- A prelude file (see _wf.lua); it uses the helpers of _lib.lua, whose make_ready /
-- group_ready put a group in line and free_slots frees a finished job's slots.
--
-- The same model as broker/memlimits.py and sqllimits.py (core/flow.py): claim.lua serves the
-- queue's groups round-robin (f:groups, scored by a sequence number: a served group goes to
-- the back), asks each group's limiters, and leases its head job when they allow; a throttled
-- group waits in f:gdelay until its next token, one whose slots are full in f:parked until
-- free_slots wakes it. Token buckets use the caller's `now` (the broker's clock).

-- the limit of a bucket / slot: a run-time override (f:limits) of it or of its limiter
local function flow_spec(q, name, own)
  local raw = redis.call('HGET', q.flow .. 'limits', name)
  if not raw then
    local base = string.match(name, '^([^:]*:[^:]*)')
    if base then raw = redis.call('HGET', q.flow .. 'limits', base) end
  end
  if raw then return cjson.decode(raw) end
  return own
end

local function flow_label(name, rate, per)
  local rest = string.sub(name, string.find(name, ':', 1, true) + 1)
  if not rate then
    local p = string.find(rest, ':', 1, true)
    if p then return string.sub(rest, p + 1) end
    return rest
  end
  local units = {[1] = 's', [60] = 'm', [3600] = 'h', [86400] = 'd'}
  local unit = units[per] or (string.format('%g', per) .. 's')
  return rest .. ':' .. string.format('%g', rate) .. '/' .. unit
end

-- a limit of the whole queue (rate:@<q> / conc:@<q>; core/flow.py is_queue_limiter): when it
-- says no, no other group of the queue may start either
local function flow_whole(name)
  return string.sub(name, 1, 6) == 'rate:@' or string.sub(name, 1, 6) == 'conc:@'
end

-- nil: the job may run (its tokens and slots taken); else (when to look again | 'park', why,
-- whether a limit of the whole queue said no). behind[bucket]: the groups this claim already
-- set aside for that bucket; each goes one token earlier than this one (core/flow.py stagger:
-- a bucket shared by many groups makes one group due per token, not all of them)
local function flow_admit(q, nnow, now, id, fl, g, behind)
  local F = q.flow
  if fl.c then
    for _, c in ipairs(fl.c) do
      local n = tonumber(flow_spec(q, c[1], {c[2]})[1])
      local running = redis.call('SCARD', F .. 'slot:' .. c[1])
      if running >= n then
        redis.call('SADD', F .. 'wait:' .. c[1], g)
        return 'park', 'waiting for ' .. flow_label(c[1]) .. ' (' .. running .. ' running)',
          flow_whole(c[1])
      end
    end
  end
  local wait, why, left, whole, refused = 0, nil, {}, false, {}
  for i, r in ipairs(fl.r or {}) do
    local s = flow_spec(q, r[1], {r[2], r[3], r[4]})
    local rate, per = tonumber(s[1]), tonumber(s[2])
    local burst = tonumber(s[3] or s[1])
    local b = redis.call('HMGET', F .. 'tb:' .. r[1], 'tokens', 'at')
    local tokens, at = tonumber(b[1]) or burst, tonumber(b[2]) or nnow
    tokens = math.min(burst, tokens + math.max(0, nnow - at) * rate / per)
    if tokens >= 1 then
      left[i] = tokens - 1
    else
      local t = nnow + (1 - tokens) * per / rate + (behind[r[1]] or 0) * per / rate
      if t > wait then wait = t end
      refused[#refused + 1] = r[1]
      why = 'throttled by rate limit ' .. flow_label(r[1], rate, per)
      whole = whole or flow_whole(r[1])
    end
  end
  if wait > 0 then
    for _, name in ipairs(refused) do behind[name] = (behind[name] or 0) + 1 end
    return wait, why, whole
  end
  for i, r in ipairs(fl.r or {}) do
    redis.call('HSET', F .. 'tb:' .. r[1], 'tokens', string.format('%.17g', left[i]), 'at', now)
  end
  for _, c in ipairs(fl.c or {}) do redis.call('SADD', F .. 'slot:' .. c[1], id) end
  return nil
end

-- lease jobs of the queue's groups while count() < limit (lease_one / lapse / bury_flow:
-- claim.lua's).
-- Groups are read in batches (one ZRANGE for up to `limit` of them): a served group goes to
-- the back with a fresh sequence number, after every group of the batch, so serving a batch
-- in order is the round-robin of reading one group at a time. A batch reserves its sequence
-- numbers with one INCRBY and moves its groups with one ZADD / ZREM (a call per job each
-- before); f:npend is settled once.
local function flow_take(q, now, nnow, limit, count, lease_one, lapse, bury_flow)
  local F = q.flow
  for _, g in ipairs(redis.call('ZRANGEBYSCORE', F .. 'gdelay', '-inf', now, 'LIMIT', 0, 1000)) do
    redis.call('ZREM', F .. 'gdelay', g)
    redis.call('HDEL', F .. 'why', g)
    redis.call('ZADD', F .. 'groups', redis.call('INCR', q.seq), g)
  end
  local rounds, gone, behind = 0, 0, {}
  local max_rounds = 4 * limit + 100  -- bounded work per call
  while count() < limit and rounds < max_rounds do
    local batch = redis.call('ZRANGE', F .. 'groups', 0, limit - count() - 1)
    if #batch == 0 then break end
    -- two numbers per group: its new place in line (seq - 1) and its job's token (seq)
    local seq = redis.call('INCRBY', q.seq, 2 * #batch) - 2 * #batch
    local back, drop = {}, {}  -- groups to the back of the line (score, group, ...) / out of it
    for _, g in ipairs(batch) do
      if count() >= limit or rounds >= max_rounds then break end
      rounds = rounds + 1
      local gk = F .. 'g:' .. g
      local head = redis.call('ZRANGE', gk, 0, 1)  -- the head, and whether one follows it
      if #head == 0 then
        drop[#drop + 1] = g  -- idle: forgotten until a job of it is pending
      else
        local id = member_id(head[1])
        local key = q.job .. id
        local f = redis.pcall('HMGET', key, 'state', 'attempts', 'task', 'run_at', 'lost',
          'errors', 'history', 'last_error', 'expires_at', 'flow')
        if f.err or f[1] ~= 'pending' then
          redis.call('ZREM', gk, head[1])  -- stale: its job is gone or no longer pending
          gone = gone + 1
        elseif f[9] and tonumber(f[9]) <= nnow then
          redis.call('ZREM', gk, head[1])
          gone = gone + 1
          lapse(id, key, f[3], f[2])
        else
          -- a group named without a rate: / conc: part (fair_by only) has no limiter to ask
          local verdict, why, whole, bad = nil, nil, false, false
          if string.find(g, 'rate:', 1, true) or string.find(g, 'conc:', 1, true) then
            local fl = flow_record(f[10] or '{"g":""}')
            bad = fl == nil
            if fl then verdict, why, whole = flow_admit(q, nnow, now, id, fl, g, behind) end
          end
          if bad then
            -- its flow record is malformed (written behind Conveyor's back): dead-lettered
            -- (decode_error) before it takes any token or slot; the group goes on
            redis.call('ZREM', gk, head[1])
            gone = gone + 1
            bury_flow(id, key, f[3], f[2])
          elseif verdict == nil then
            redis.call('ZREM', gk, head[1])
            gone = gone + 1
            seq = seq + 2
            if #head > 1 then
              back[#back + 1], back[#back + 2] = seq - 1, g  -- to the back: round-robin
            else
              drop[#drop + 1] = g  -- its last job: forgotten right away
            end
            lease_one(id, key, f, seq)
          else
            drop[#drop + 1] = g
            redis.call('HSET', F .. 'why', g, why)
            if verdict == 'park' then
              redis.call('SADD', F .. 'parked', g)
            else
              redis.call('ZADD', F .. 'gdelay', string.format('%.17g', verdict), g)
            end
            if whole then  -- the queue's own limit said no: nothing else may start now
              rounds = max_rounds
            end
          end
        end
      end
    end
    if #back > 0 then bulk('ZADD', F .. 'groups', back) end
    if #drop > 0 then bulk('ZREM', F .. 'groups', drop) end
  end
  if gone > 0 then redis.call('DECRBY', F .. 'npend', gone) end
end
