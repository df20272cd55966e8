-- line(now, limit): wakes what came due, then returns the first `limit` queues of the
-- ready line and the shard's next event (common.lua's ready_heads): what a sharded
-- crawl reads of a shard whose heads it does not know (redis_shards.py).
local now, limit = tonumber(ARGV[A0 + 1]), tonumber(ARGV[A0 + 2])
wake(now)
save_all()
return ready_heads(limit)
