-- maintain(now, op, ...): 'stats' | 'requeue_dead' id... ('*' for all) | 'load_seen' fp... |
-- 'load_entry' key domain prio item not_before
-- | 'load_queue' key domain accepted ready_at name value...
-- | 'load_since' key since ...
local now, op = tonumber(ARGV[A0 + 1]), ARGV[A0 + 2]
if op == 'stats' then
  wake(now)
  save_all()
  local ready = 0
  for _, level in ipairs(redis.call('ZRANGE', P .. ':rp', 0, -1)) do
    ready = ready + redis.call('ZCARD', P .. ':r:' .. level)
  end
  return {redis.call('HGETALL', M), redis.call('HGETALL', P .. ':rej'),
          redis.call('ZCARD', P .. ':sc'), redis.call('HLEN', P .. ':ls'),
          redis.call('HLEN', P .. ':dead'), redis.call('SCARD', P .. ':qk'), ready,
          redis.call('ZCARD', P .. ':rest')}
elseif op == 'requeue_dead' then
  local ids
  if ARGV[A0 + 3] == '*' then
    ids = redis.call('ZRANGE', P .. ':dz', 0, -1)
  else
    ids = {}
    for j = A0 + 3, #ARGV do ids[#ids + 1] = ARGV[j] end
  end
  local n = 0
  local touched = {}
  for _, id in ipairs(ids) do
    local rec = redis.call('HGET', P .. ':dead', id)
    if rec then
      local key, prio, retries, payload = cmsgpack.unpack(rec)
      local q = loadq(key)
      push(q, prio, '\0\0' .. payload, TAIL)
      touched[key] = q
      redis.call('HDEL', P .. ':dead', id)
      redis.call('ZREM', P .. ':dz', id)
      n = n + 1
    end
  end
  for _, q in pairs(touched) do settle(q, now, false) end
  save_all()
  return n
elseif op == 'load_entry' then
  local key, prio, item, nb = ARGV[A0 + 3], ARGV[A0 + 5], ARGV[A0 + 6], ARGV[A0 + 7]
  DOMS[key] = ARGV[A0 + 4]
  if nb ~= '' then
    schedule(key, tonumber(prio), item, tonumber(nb))
    loadq(key)
  else
    local q = loadq(key)
    push(q, prio, item, LAST)
    settle(q, now, false)
  end
  save_all()
  return 1
elseif op == 'load_seen' then
  local fps = {}
  for j = A0 + 3, #ARGV do
    if not sb_has(ARGV[j]) then fps[#fps + 1] = ARGV[j] end
  end
  sb_add(fps)
  return #fps
elseif op == 'load_dead' then
  local id = redis.call('HINCRBY', M, 'deadid', 1)
  redis.call('HSET', P .. ':dead', id, cmsgpack.pack(ARGV[A0 + 3], tonumber(ARGV[A0 + 4]),
             tonumber(ARGV[A0 + 5]), ARGV[A0 + 6], ARGV[A0 + 7], ARGV[A0 + 8]))
  redis.call('ZADD', P .. ':dz', id, id)
  return 1
elseif op == 'load_queue' then
  local key = ARGV[A0 + 3]
  DOMS[key] = ARGV[A0 + 4]
  local q = loadq(key)
  q.acc = math.max(q.acc, tonumber(ARGV[A0 + 5]))
  q.ra = math.max(q.ra, tonumber(ARGV[A0 + 6]))
  for j = A0 + 7, #ARGV, 2 do
    set_setting(q, ARGV[j], tonumber(ARGV[j + 1]))
  end
  if q.st == READY or q.st == RESTING then settle(q, now, false) end
  save_all()
  return 1
elseif op == 'load_since' then
  -- key since, ...: loaded queues that are ready have waited since then (their place
  -- in the ready line, as dumped)
  for j = A0 + 3, #ARGV, 2 do
    local q = loadq(ARGV[j])
    if q.st == READY and q.rp ~= '' then
      q.si = tonumber(ARGV[j + 1])
      redis.call('ZADD', P .. ':r:' .. q.rp, f17(q.si), q.key)
    end
  end
  save_all()
  return 1
end
return redis.error_reply('crawlq: unknown maintenance op ' .. tostring(op))
