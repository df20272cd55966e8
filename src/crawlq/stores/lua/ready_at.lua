-- next_ready_at(now): now if a queue is ready, else the earliest rest end, scheduled
-- time or lease expiry (as strings), or false when nothing is queued or leased.
local now = tonumber(ARGV[A0 + 1])
wake(now)
save_all()
if first_ready_level() then return f17(now) end
local best = next_event(true)
if best then return f17(best) end
return false
