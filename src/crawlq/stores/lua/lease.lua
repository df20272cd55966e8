-- lease(now, limit, ttl): returns {token, key, prio, item, ...}
local now, limit, ttl = tonumber(ARGV[A0 + 1]), tonumber(ARGV[A0 + 2]), tonumber(ARGV[A0 + 3])
local expires = now + ttl
local out = {}
local got = 0
local records = {}
local first = tonumber(redis.call('HGET', M, 'token') or '0') + 1
local tok = first - 1
wake(now)
while got < limit do
  local level = first_ready_level()
  if not level then break end
  local rk = P .. ':r:' .. level
  -- Round-robin over the ready queues of the best level in waiting order; each may
  -- take a fair share of what is left, so one big queue needs few rounds.
  local keys = redis.call('ZRANGE', rk, 0, limit - got - 1)
  local share = math.max(1, math.floor((limit - got) / redis.call('ZCARD', rk)))
  local progress = false
  prefetch(keys)
  for _, key in ipairs(keys) do
    if got >= limit then break end
    local q = loadq(key)
    local k = math.min(share, limit - got, q.concurrency - q.inf, q.n)
    if q.session_budget > 0 then k = math.min(k, q.session_budget - q.ses) end
    if k > 0 then
      local items = pop(q, k)
      local taken = #items / 2
      if taken > 0 then
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
        progress = true
      end
    end
    if q.session_budget > 0 and q.ses >= q.session_budget then
      -- Yield to the others: rest a while, then the back of the line.
      q.ses = 0
      q.ra = math.max(q.ra, now + q.session_rest)
    end
    settle(q, now, true)
  end
  if not progress then break end
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
