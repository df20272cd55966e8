-- lease(now, limit, ttl, queue, line, park): returns {token, key, prio, item, ...};
-- queue '': any; line > 0: a sharded crawl's share of its crawl-wide line
-- (redis_shards.py): one pass, whose line holds that many queues at most, after the
-- queues in park (a msgpack array: ready queues of a full domain the crawl's line passed
-- over) are parked; one more value ends the reply: 1 if a queue served is ready again
-- at once (its session ended without a rest), else 0
local now, limit, ttl = tonumber(ARGV[A0 + 1]), tonumber(ARGV[A0 + 2]), tonumber(ARGV[A0 + 3])
local only = ARGV[A0 + 4] or ''
local line_cap = tonumber(ARGV[A0 + 5] or '0') or 0
local expires = now + ttl
local out = {}
local got = 0
local function line_max()  -- (the queues a pass's line may hold)
  if line_cap > 0 and line_cap < limit - got then return line_cap end
  return limit - got
end
local records = {}
local first = tonumber(redis.call('HGET', M, 'token') or '0') + 1
local tok = first - 1
wake(now)
if (ARGV[A0 + 6] or '') ~= '' then
  for _, key in ipairs(cmsgpack.unpack(ARGV[A0 + 6])) do
    if redis.call('EXISTS', P .. ':qm:' .. key) == 1 then
      local q = loadq(key)
      if q.st == READY then
        park(q, now)
        settle(q, now, false)
      end
    end
  end
end
-- Under domain_concurrency (crawlq.stores.rules): the leases in flight of each domain
-- met (read once a call), and whether ready queue q joins the line, its domain having
-- room for one more lease than its queues ahead in the line take; else it rests
-- DOMAIN.wait, not served.
local capped = DOMAIN.concurrency > 0
local dinf, ddelta, ahead = {}, {}, {}  -- (ddelta: this call's changes, wake's included)
if capped then
  for _, q in pairs(cache) do
    if q.dom ~= '' and q.inf ~= q.inf0 then
      ddelta[q.dom] = (ddelta[q.dom] or 0) + q.inf - q.inf0
    end
  end
end
local function domain_inflight(d)
  if dinf[d] == nil then dinf[d] = tonumber(redis.call('HGET', P .. ':di', d) or '0') end
  return dinf[d] + (ddelta[d] or 0)
end
local function domain_admits(q)
  local d = q.dom
  if d == '' then return true end
  local n = ahead[d] or 0
  if DOMAIN.concurrency - domain_inflight(d) - n <= 0 then
    park(q, now)
    settle(q, now, false)
    return false
  end
  ahead[d] = n + 1
  return true
end
-- Passes, until the limit is reached or no queue can give more now: a queue whose
-- session ended without a rest is ready again at once, behind the others. (A pass
-- leases one at least, or ends the session of a queue that spent it before this call
-- and leased nothing since, once per queue at most: limit + its queues passes.)
local again = true
local passes, cap = 0, limit + redis.call('SCARD', P .. ':qk') + 1
while again and got < limit do
  passes = passes + 1
  if passes > cap then overrun('the passes of lease', cap) end
  again = false
  -- The line: the best ready queues in order (levels best first, each in waiting
  -- order), one per lease still wanted.
  local line = {}
  ahead = {}
  if only ~= '' then
    -- One queue's line: itself, when it is ready.
    if redis.call('EXISTS', P .. ':qm:' .. only) == 1 and loadq(only).st == READY
        and (not capped or domain_admits(loadq(only))) then
      line[1] = only
    end
  else
    for _, level in ipairs(redis.call('ZRANGE', P .. ':rp', 0, -1)) do
      if #line >= line_max() then break end
      local from = 0  -- (queues a full domain rests leave the level: the rest moves up)
      -- (a pass takes one of the level's queues in line at least, or rests one: as many
      -- passes as it has queues, and the last)
      local rounds, most = 0, nil
      while #line < line_max() do
        rounds = rounds + 1
        if rounds > 1 then
          most = most or redis.call('ZCARD', P .. ':r:' .. level) + rounds
          if rounds > most then overrun('the line of level ' .. level, most) end
        end
        local want = line_max() - #line
        local keys = redis.call('ZRANGE', P .. ':r:' .. level, from, from + want - 1)
        if #keys == 0 then
          if from == 0 then redis.call('ZREM', P .. ':rp', level) end  -- (an empty level)
          break
        end
        if capped then prefetch(keys) end
        for _, key in ipairs(keys) do
          if not capped or domain_admits(cache[key]) then
            line[#line + 1] = key
            from = from + 1
          end
        end
        if not capped or #keys < want then break end
      end
    end
  end
  prefetch(line)
  -- A round-robin over the line in its order (as the memory store's lease): a fair
  -- share of what is left from each queue asked, so one big queue needs few rounds;
  -- then on with those not asked yet (the limit cut the round short) and those with
  -- more. A queue gives at most its room (rules.lease_room), counted at the start.
  local room = {}
  for _, key in ipairs(line) do room[key] = lease_room(loadq(key)) end
  if capped then
    -- The queues of a domain share its room, one at least for each behind
    -- (crawlq.stores.rules.share_domains).
    local left, behind = {}, {}
    for _, key in ipairs(line) do
      local q = cache[key]
      local d = q.dom
      if d ~= '' then
        if left[d] == nil then left[d] = DOMAIN.concurrency - domain_inflight(d) end
        behind[d] = (behind[d] or 0) + 1
      end
    end
    for _, key in ipairs(line) do
      local d = cache[key].dom
      if d ~= '' then
        behind[d] = behind[d] - 1
        local r = math.min(room[key], left[d] - behind[d])
        room[key] = r
        left[d] = left[d] - r
      end
    end
  end
  local active = line
  -- (a round leases one at least, from each queue asked: limit rounds at most)
  local rounds = 0
  while #active > 0 and got < limit do
    rounds = rounds + 1
    if rounds > limit then overrun('the rounds of lease', limit) end
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
        if capped and q.dom ~= '' then ddelta[q.dom] = (ddelta[q.dom] or 0) + taken end
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
    local spent = q.session_budget > 0 and q.ses >= q.session_budget
    if spent then
      -- Yield to the others: rest a while, then the back of the line.
      q.ses = 0
      q.ra = math.max(q.ra, now + q.session_rest)
    end
    settle(q, now, true)
    if spent then again = true end
  end
  -- (a sharded crawl's share: one pass; the crawl makes the next ones over its line)
  if line_cap > 0 then break end
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
if line_cap > 0 then out[#out + 1] = (again and passes > 0) and 1 or 0 end
return out
