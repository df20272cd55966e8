-- add(now, entries): entries is a msgpack array of
-- [fp, key, prio, item, not_before, revisit_at, bloom] (nil for None; bloom is nil for
-- the exact seen-set, else [block, bit, bit...]).
-- Returns one status character per entry: 0 added, 1 duplicate, 2 over budget.
local now = tonumber(ARGV[A0 + 1])
local out = {}
local rv_key = P .. ':rv'
local has_rv = redis.call('EXISTS', rv_key) == 1
local added, seen_added, dups, over = 0, 0, 0, 0
local touched = {}
local entries = cmsgpack.unpack(ARGV[A0 + 2])
-- Up front, in few commands: the queues, and which fingerprints the seen-set has.
local keys, fps, fpat = {}, {}, {}
for i, e in ipairs(entries) do
  keys[i] = e[2]
  if e[1] and not e[7] then
    fps[#fps + 1] = e[1]
    fpat[#fps] = i
  end
end
prefetch(keys)
local member, bucket = {}, {}
for j, fp in ipairs(fps) do
  local has, key = sb_has(fp)
  if has then member[fpat[j]] = true else bucket[fpat[j]] = key end
end
local batch, fresh, fresh_at = {}, {}, {}  -- accepted by this call; new to the set
for i, e in ipairs(entries) do
  local fp, key, prio, item, nb, rv, bl = e[1], e[2], e[3], e[4], e[5], e[6], e[7]
  local q = cache[key]
  local status = '0'
  local bkey, bits
  if fp then
    if bl then
      bkey = P .. ':bl:' .. bl[1]
      bits = bl
      local all = true
      for j = 2, #bl do
        if redis.call('GETBIT', bkey, bl[j]) == 0 then all = false; break end
      end
      if all then status = '1' end
    elseif batch[fp] then
      status = '1'  -- an earlier entry of this call (its revisit time lies ahead)
    elseif member[i] then
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
    if fp then
      if bkey then
        for j = 2, #bits do redis.call('SETBIT', bkey, bits[j], 1) end
      else
        batch[fp] = true
        if not member[i] then
          fresh[#fresh + 1] = fp
          fresh_at[#fresh] = bucket[i]
        end
        if rv then
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
    if nb and nb > now then
      schedule(key, prio, item, nb)
    else
      local st, best = q.st, q.best
      push(q, prio, item, TAIL)
      -- Only an empty queue, or a ready one whose best level rose, changes its place.
      if st == EMPTY or (st == READY and q.best ~= best) then touched[key] = q end
    end
  end
  out[#out + 1] = status
end
sb_add(fresh, fresh_at)
for _, q in pairs(touched) do settle(q, now, false) end
count('added', added)
count('seen', seen_added)
count('duplicates', dups)
if over > 0 then redis.call('HINCRBY', P .. ':rej', 'queue-budget', over) end
save_all()
return table.concat(out)
