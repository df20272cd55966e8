-- next_ready_at(now): now if a queue is ready, else the earliest rest end, scheduled
-- time or lease expiry (as strings), or false when nothing is queued or leased.
local now = tonumber(ARGV[A0 + 1])
wake(now)
save_all()
if first_ready_level() then return f17(now) end
-- Drop expiry records none of whose leases is still held until their time (each was
-- answered, or renewed, which gave it a record of its own), to see a real one. (A pass
-- breaks or takes one record off P:lx.)
local cap = redis.call('ZCARD', P .. ':lx') + 1
for pass = 1, cap + 1 do
  if pass > cap then overrun('the expiry records of ready_at', cap) end
  local r = redis.call('ZRANGE', P .. ':lx', 0, 0, 'WITHSCORES')
  if not r[1] then break end
  local first, last = string.match(r[1], '^(%d+):(%d+)$')
  local at = tonumber(r[2])
  local live = false
  for lo = tonumber(first), tonumber(last), 1000 do
    local toks = {}
    for t = lo, math.min(lo + 999, tonumber(last)) do toks[#toks + 1] = t end
    for j, rec in ipairs(redis.call('HMGET', P .. ':ls', unpack(toks))) do
      if rec then
        local own = first ~= last and
          redis.call('ZSCORE', P .. ':lx', toks[j] .. ':' .. toks[j])
        if not (own and tonumber(own) > at) then live = true; break end
      end
    end
    if live then break end
  end
  if live then break end
  redis.call('ZREM', P .. ':lx', r[1])
end
local best
for _, z in ipairs({':rest', ':sc', ':lx'}) do
  local r = redis.call('ZRANGE', P .. z, 0, 0, 'WITHSCORES')
  if r[2] then
    local t = tonumber(r[2])
    if not best or t < best then best = t end
  end
end
if best then return f17(best) end
return false
