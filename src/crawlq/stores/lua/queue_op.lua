-- queue_op(now, op, key, domain, ...): 'block' until | 'unblock' (ends its rest now)
-- | 'configure' name value ... ('' unsets)
-- | 'delete' (returns how many queued and scheduled entries it removed; a queue left
-- with no lease out and no dead entry is forgotten)
-- | 'remove' level item ... '' id ...: those queued items (at their levels) and
-- scheduled entries (by id) that are still there (returns how many it removed)
local now, op, key = tonumber(ARGV[A0 + 1]), ARGV[A0 + 2], ARGV[A0 + 3]
DOMS[key] = ARGV[A0 + 4]  -- (the domain of the queue, should the op make it)
wake(now)
if (op == 'delete' or op == 'remove' or op == 'unblock')
    and redis.call('EXISTS', P .. ':qm:' .. key) == 0 then
  save_all()  -- (what wake moved: its queues' records must follow their lists and lines)
  return 0
end
local q = loadq(key)
local result = 1
if op == 'block' then
  local until_ = tonumber(ARGV[A0 + 5])
  local unparked = unpark_one(q, now)  -- (a block replaces a park: see rules)
  if until_ > q.ra then q.ra = until_ end
  if (unparked or q.ra == until_) and (q.st == READY or q.st == RESTING) then
    settle(q, now, false)
  end
elseif op == 'unblock' then
  if q.ra > now then
    q.ra = now
    if q.st == RESTING then settle(q, now, false) end
  end
elseif op == 'configure' then
  for j = A0 + 5, #ARGV, 2 do
    local value = ARGV[j + 1]
    set_setting(q, ARGV[j], value ~= '' and tonumber(value) or nil)
  end
  if q.st ~= EMPTY then settle(q, now, false) end
elseif op == 'delete' then
  for _, level in ipairs(redis.call('ZRANGE', P .. ':qp:' .. key, 0, -1)) do
    redis.call('DEL', P .. ':q:' .. level .. ':' .. key)
  end
  redis.call('DEL', P .. ':qp:' .. key)
  result = q.n
  q.n = 0
  q.best = false
  -- Its scheduled entries: a scan of them all (an admin call, not a hot path).
  local recs = redis.call('HGETALL', P .. ':scd')
  local gone = {}
  for i = 1, #recs, 2 do
    if cmsgpack.unpack(recs[i + 1]) == key then gone[#gone + 1] = recs[i] end
  end
  for i = 1, #gone, 5000 do
    local part = {unpack(gone, i, math.min(i + 4999, #gone))}
    redis.call('HDEL', P .. ':scd', unpack(part))
    redis.call('ZREM', P .. ':sc', unpack(part))
  end
  result = result + #gone
  if #gone > 0 then unscheduled(key, #gone) end
  unpark_one(q, now)  -- (an empty queue waits for no domain: see rules)
  settle(q, now, false)
  if q.inf == 0 then
    -- Nothing of it left (no lease out, no dead entry): it goes, settings and counts
    -- with it (a scan of the dead entries: an admin call).
    local left = false
    for _, v in ipairs(redis.call('HVALS', P .. ':dead')) do
      if cmsgpack.unpack(v) == key then left = true break end
    end
    if not left then
      if q.n0 > 0 then
        count('queued', -q.n0)
        count('nonempty', -1)
      end
      domain_counts(q, true)
      cache[key] = nil
      redis.call('DEL', P .. ':qm:' .. key, P .. ':qset:' .. key)
      redis.call('SREM', P .. ':qk', key)
    end
  end
elseif op == 'remove' then
  -- (an item leased or come due since the caller read it is not there: it stays)
  result = 0
  local j = A0 + 5
  while j < #ARGV and ARGV[j] ~= '' do  -- (the arguments are finite: j moves on by 2)
    local lk = P .. ':q:' .. ARGV[j] .. ':' .. key
    local n = redis.call('LREM', lk, 1, ARGV[j + 1])
    if n > 0 then
      result = result + n
      q.n = q.n - n
      q.best = nil  -- (looked up again by settle)
      if redis.call('LLEN', lk) == 0 then redis.call('ZREM', P .. ':qp:' .. key, ARGV[j]) end
    end
    j = j + 2
  end
  for i = j + 1, #ARGV do
    if redis.call('HDEL', P .. ':scd', ARGV[i]) == 1 then
      redis.call('ZREM', P .. ':sc', ARGV[i])
      unscheduled(key, 1)
      result = result + 1
    end
  end
  if q.n == 0 then unpark_one(q, now) end  -- (an empty queue waits for no domain)
  settle(q, now, false)
end
save_all()
return result
