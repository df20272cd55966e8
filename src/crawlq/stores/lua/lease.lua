-- lease(now, limit, ttl, queue): returns {token, key, prio, item, ...}; queue '': any
local now, limit, ttl = tonumber(ARGV[A0 + 1]), tonumber(ARGV[A0 + 2]), tonumber(ARGV[A0 + 3])
local only = ARGV[A0 + 4] or ''
local expires = now + ttl
local out = {}
local got = 0
local records = {}
local first = tonumber(redis.call('HGET', M, 'token') or '0') + 1
local tok = first - 1
wake(now)
-- Passes, until the limit is reached or no queue can give more now: a queue whose
-- session ended without a rest is ready again at once, behind the others.
local again = true
while again and got < limit do
  again = false
  -- The line: the best ready queues in order (levels best first, each in waiting
  -- order), one per lease still wanted.
  local line = {}
  if only ~= '' then
    -- One queue's line: itself, when it is ready.
    if redis.call('EXISTS', P .. ':qm:' .. only) == 1 and loadq(only).st == READY then
      line[1] = only
    end
  else
    for _, level in ipairs(redis.call('ZRANGE', P .. ':rp', 0, -1)) do
      if #line >= limit - got then break end
      local keys = redis.call('ZRANGE', P .. ':r:' .. level, 0, limit - got - #line - 1)
      if #keys == 0 then redis.call('ZREM', P .. ':rp', level) end  -- (an empty level)
      for _, key in ipairs(keys) do line[#line + 1] = key end
    end
  end
  prefetch(line)
  -- A round-robin over the line in its order (as the memory store's lease): a fair
  -- share of what is left from each queue asked, so one big queue needs few rounds;
  -- then on with those not asked yet (the limit cut the round short) and those with
  -- more. A queue gives at most its room (rules.lease_room), counted at the start.
  local room = {}
  for _, key in ipairs(line) do
    local q = loadq(key)
    local free = q.concurrency - q.inf
    if q.session_budget > 0 and q.session_budget - q.ses < free then
      free = q.session_budget - q.ses
    end
    room[key] = math.max(free, 1)
  end
  local active = line
  while #active > 0 and got < limit do
    local nwant = math.min(#active, limit - got)
    local share = math.max(1, math.floor((limit - got) / nwant))
    local more = {}
    for i = nwant + 1, #active do more[#more + 1] = active[i] end
    for i = 1, nwant do
      local key = active[i]
      local q = loadq(key)
      local k = math.min(share, limit - got, room[key], q.n)
      if k > 0 then
        local items = pop(q, k)
        local taken = #items / 2
        for j = 1, #items, 2 do
          tok = tok + 1
          local prio, item = items[j], items[j + 1]
          records[#records + 1] = tok
          records[#records + 1] = cmsgpack.pack(key, tonumber(prio), item)
          out[#out + 1] = tok
          out[#out + 1] = key
          out[#out + 1] = prio
          out[#out + 1] = item
        end
        got = got + taken
        q.inf = q.inf + taken
        q.ses = q.ses + taken
        room[key] = room[key] - taken
      end
      if q.n > 0 and room[key] > 0 then more[#more + 1] = key end
    end
    active = more
  end
  -- The served queues go to the back of the line, in their order.
  for _, key in ipairs(line) do
    local q = loadq(key)
    if q.session_budget > 0 and q.ses >= q.session_budget then
      -- Yield to the others: rest a while, then the back of the line.
      q.ses = 0
      q.ra = math.max(q.ra, now + q.session_rest)
    end
    settle(q, now, true)
    if q.st == READY then again = true end
  end
end
if tok >= first then
  -- The leases of one call expire together: one expiry record for the token range.
  for i = 1, #records, 2000 do
    redis.call('HSET', P .. ':ls', unpack(records, i, math.min(i + 1999, #records)))
  end
  redis.call('HSET', M, 'token', tok)
  redis.call('ZADD', P .. ':lx', f17(expires), first .. ':' .. tok)
end
save_all()
return out
