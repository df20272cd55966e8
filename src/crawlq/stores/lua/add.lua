-- add(now, then per entry: fp, key, prio, item, not_before, revisit_at, bloom)
-- Empty strings stand for None. bloom is "" (exact seen-set) or "block pos pos ...".
-- Returns one status character per entry: 0 added, 1 duplicate, 2 over budget.
local now = tonumber(ARGV[A0 + 1])
local out = {}
local seen_key, rv_key = P .. ':seen', P .. ':rv'
local has_rv = redis.call('EXISTS', rv_key) == 1
local added, seen_added, dups, over = 0, 0, 0, 0
local touched = {}
local i = A0 + 2
while i <= #ARGV do
  local fp, key, prio, item = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local nb, rv, bl = ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  i = i + 7
  local q = loadq(key)
  local status = '0'
  local bkey, bits
  if fp ~= '' then
    if bl ~= '' then
      local parts = {}
      for w in string.gmatch(bl, '%d+') do parts[#parts + 1] = tonumber(w) end
      bkey = P .. ':bl:' .. parts[1]
      bits = parts
      local all = true
      for j = 2, #parts do
        if redis.call('GETBIT', bkey, parts[j]) == 0 then all = false; break end
      end
      if all then status = '1' end
    elseif redis.call('SISMEMBER', seen_key, fp) == 1 then
      local at = has_rv and redis.call('HGET', rv_key, fp)
      if not at or tonumber(at) > now then status = '1' end
    end
  end
  if status == '0' and q.max_queue_urls > 0 and q.acc >= q.max_queue_urls then
    status = '2'
  end
  if status == '1' then
    dups = dups + 1
  elseif status == '2' then
    over = over + 1
  else
    if fp ~= '' then
      if bkey then
        for j = 2, #bits do redis.call('SETBIT', bkey, bits[j], 1) end
      else
        redis.call('SADD', seen_key, fp)
        if rv ~= '' then
          redis.call('HSET', rv_key, fp, rv)
          has_rv = true
        elseif has_rv then
          redis.call('HDEL', rv_key, fp)
        end
      end
      seen_added = seen_added + 1
    end
    q.acc = q.acc + 1
    added = added + 1
    if nb ~= '' and tonumber(nb) > now then
      schedule(key, tonumber(prio), item, tonumber(nb))
    else
      push(q, prio, item, false)
      touched[key] = q
    end
  end
  out[#out + 1] = status
end
for _, q in pairs(touched) do settle(q, now, false) end
count('added', added)
count('seen', seen_added)
count('duplicates', dups)
if over > 0 then redis.call('HINCRBY', P .. ':rej', 'queue-budget', over) end
save_all()
return table.concat(out)
