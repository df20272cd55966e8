-- line(now, limit): wakes what came due, then returns the first `limit` queues of the
-- ready line, in its order, as {level, since, key, room, domain, domain's leases out,
-- ...} (room: lease_room; domain '' when none is kept), then the earliest time
-- something may become ready (next_event, or earlier; '' for none): what a sharded
-- crawl merges into the crawl-wide line before it leases from each shard its share
-- (redis_shards.py).
local now, limit = tonumber(ARGV[A0 + 1]), tonumber(ARGV[A0 + 2])
wake(now)
save_all()
local out = {}
local n = 0
local dinf = {}
for _, level in ipairs(redis.call('ZRANGE', P .. ':rp', 0, -1)) do
  if n >= limit then break end
  local got = redis.call('ZRANGE', P .. ':r:' .. level, 0, limit - n - 1, 'WITHSCORES')
  local keys = {}
  for i = 1, #got, 2 do keys[#keys + 1] = got[i] end
  prefetch(keys)
  for i = 1, #got, 2 do
    out[#out + 1] = level
    out[#out + 1] = got[i + 1]
    out[#out + 1] = got[i]
    local q = cache[got[i]]
    out[#out + 1] = lease_room(q)
    out[#out + 1] = q.dom
    if q.dom ~= '' and dinf[q.dom] == nil then
      dinf[q.dom] = tonumber(redis.call('HGET', P .. ':di', q.dom) or '0')
    end
    out[#out + 1] = q.dom ~= '' and dinf[q.dom] or 0
    n = n + 1
  end
end
local t = next_event(false)  -- (too early at worst: the heads are read again)
out[#out + 1] = t and f17(t) or ''
return out
