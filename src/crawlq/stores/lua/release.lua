-- release(now, then per ack: token, kind, duration, not_before, retries, error, failed,
-- delay). kind: 0 done, 1 requeue, 2 dead. Returns one character per ack: 1 held, 0 not.
local now = tonumber(ARGV[A0 + 1])
local out = {}
local touched = {}
local i = A0 + 2
while i <= #ARGV do
  local tok, kind, duration, nb = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local retries, err, failed, delay = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  i = i + 8
  local rec = redis.call('HGET', P .. ':ls', tok)
  if not rec then
    count('late_acks', 1)
    out[#out + 1] = '0'
  else
    redis.call('HDEL', P .. ':ls', tok)
    redis.call('ZREM', P .. ':lx', tok)
    local key, prio, item = cmsgpack.unpack(rec)
    local q = loadq(key)
    q.inf = q.inf - 1
    local rest
    if delay ~= '' then
      rest = tonumber(delay)
    elseif duration == '' then
      rest = q.min_delay  -- what the formula gives for no duration
    else
      rest = math.min(math.max(q.delay_factor * tonumber(duration), q.min_delay), q.max_delay)
    end
    if rest > 0 then
      q.ra = math.max(q.ra, now + rest)
      q.ses = 0
    end
    if kind == '0' then
      count('done', 1)
    elseif kind == '2' then
      count('failed', 1)
      local id = redis.call('HINCRBY', M, 'deadid', 1)
      redis.call('HSET', P .. ':dead', id, cmsgpack.pack(key, prio, tonumber(retries),
                 string.sub(item, 3), err, f17(now)))
      redis.call('ZADD', P .. ':dz', id, id)
    else
      if failed == '1' then count('failed', 1) end
      count('retried', 1)
      local new = set_retries(item, tonumber(retries))
      if nb ~= '' and tonumber(nb) > now then
        schedule(key, prio, new, tonumber(nb))
      else
        push(q, prio, new, true)
      end
    end
    touched[key] = q
    out[#out + 1] = '1'
  end
end
for _, q in pairs(touched) do settle(q, now, false) end
save_all()
return table.concat(out)
