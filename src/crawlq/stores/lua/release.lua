-- release(now, acks): acks is a msgpack array of
-- [token, kind, duration, not_before, retries, error, failed, delay] (nil for None).
-- kind: 0 done, 1 requeue, 2 dead. Returns one character per ack: 1 held, 0 not.
local now = tonumber(ARGV[A0 + 1])
-- What came due first: an answer after its lease's expiry is late, whether or not a
-- call noticed the expiry before.
wake(now)
local out = {}
local touched = {}
-- Fetch and delete every lease record of the call at once (in chunks: unpack() is
-- limited by Lua's C stack); an ack repeated within the call finds its lease gone.
local acks = cmsgpack.unpack(ARGV[A0 + 2])
local toks, recs = {}, {}
for i, a in ipairs(acks) do toks[i] = a[1] end
for i = 1, #toks, 1000 do
  local part = redis.call('HMGET', P .. ':ls', unpack(toks, i, math.min(i + 999, #toks)))
  for j, rec in ipairs(part) do recs[i + j - 1] = rec end
  redis.call('HDEL', P .. ':ls', unpack(toks, i, math.min(i + 999, #toks)))
end
local decoded, keys = {}, {}
for n = 1, #acks do
  if recs[n] then
    decoded[n] = {cmsgpack.unpack(recs[n])}
    keys[#keys + 1] = decoded[n][1]
  end
end
prefetch(keys)
local taken = {}
local back = {}  -- requeued at once: {token, q, prio, item} (see push_back)
local freed = {}  -- domain -> leases ended (see unpark)
for n, a in ipairs(acks) do
  local tok, kind, duration, nb = a[1], a[2], a[3], a[4]
  local retries, err, failed, delay = a[5], a[6] or '', a[7], a[8]
  local rec = recs[n]
  if rec and taken[tok] then rec = nil end
  if rec then taken[tok] = true end
  if not rec then
    count('late_acks', 1)
    out[#out + 1] = '0'
  else
    local key, prio, item = decoded[n][1], decoded[n][2], decoded[n][3]
    local q = loadq(key)
    q.inf = q.inf - 1
    ended(freed, q)
    if DOMAIN.concurrency > 0 then unpark_one(q, now) end  -- (its rest: from this answer)
    local rest
    if delay then
      rest = delay
    elseif not duration then
      rest = q.min_delay  -- what the formula gives for no duration
    else
      rest = math.min(math.max(q.delay_factor * duration, q.min_delay), q.max_delay)
    end
    if rest > 0 then
      q.ra = math.max(q.ra, now + rest)
      q.ses = 0
    end
    if kind == 0 then
      count('done', 1)
    elseif kind == 2 then
      bury(key, prio, set_retries(item, retries), err, now)
    else
      if failed then count('failed', 1) end
      count('retried', 1)
      local new = set_retries(item, retries)
      if nb and nb > now then
        schedule(key, prio, new, nb)
      else
        back[#back + 1] = {tok, q, prio, new}
      end
    end
    -- A ready queue that neither rests nor got its request back keeps its place.
    if q.st ~= READY or rest > 0 or kind ~= 0 then touched[key] = q end
    out[#out + 1] = '1'
  end
end
push_back(back)
for _, q in pairs(touched) do settle(q, now, false) end
unpark(freed, now)
save_all()
return table.concat(out)
