-- next_ready_at(now): now if a queue is ready, else the earliest rest end, scheduled
-- time or lease expiry (as strings), or false when nothing is queued or leased.
local now = tonumber(ARGV[A0 + 1])
wake(now)
save_all()
if redis.call('ZCARD', P .. ':rp') > 0 then return f17(now) end
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
