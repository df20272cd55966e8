-- line(now, limit): wakes what came due, then returns {the first `limit` queues of the
-- ready line, the line in brief} (common.lua's ready_heads and ready_levels): what a
-- sharded crawl reads of a shard whose line it does not know (redis_shards.py).
local now, limit = tonumber(ARGV[A0 + 1]), tonumber(ARGV[A0 + 2])
wake(now)
save_all()
return {ready_heads(limit), ready_levels(false)}
