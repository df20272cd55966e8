-- add(now, [entries, domains, known, new_id, id]): entries is a msgpack array of
-- [fp, key, prio, item, not_before, revisit_at, bloom] (nil for None; bloom is nil for
-- the exact seen-set, else [block, bit, bit...]); domains maps each of their queue keys
-- to its domain; known counts the duplicates the client answered itself from the
-- fingerprints it knows the seen-set holds for good, under the set's id `id` (counted
-- here if that is still the set's id; else the client offers them again); new_id is
-- the id to give the set when it has none yet (a random one from the client).
-- Returns the seen-set's id (16 characters: it changes when the set may forget or
-- requalify a fingerprint, see redis_store.KnownSeen), then one status character per
-- entry: 0 added, 1 duplicate for good (no revisit time), 5 a duplicate until its
-- revisit time, 2 over its queue's budget, 3 over its domain's, 4 a queue too many for
-- its domain (crawlq.stores.base; 5 is its 1).
local now = tonumber(ARGV[A0 + 1])
local out = {}
local rv_key = P .. ':rv'
local has_rv = redis.call('EXISTS', rv_key) == 1
local added, seen_added, dups = 0, 0, 0
local refused = {['2'] = 0, ['3'] = 0, ['4'] = 0}
local touched = {}
local arg = cmsgpack.unpack(ARGV[A0 + 2])
local entries = arg[1]
DOMS = arg[2]
local sid = redis.call('HGET', M, 'seen_id')
if not sid then
  sid = arg[4]
  redis.call('HSET', M, 'seen_id', sid)
end
if sid == arg[5] then dups = arg[3] end
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
-- Queues made here are dropped unless they take an entry; the counts of the domains
-- whose caps apply (crawlq.stores.rules.domain_refusal), counted up below.
local dacc, dqn = {}, {}
local doms, seen_dom = {}, {}
for _, key in ipairs(keys) do
  local q = cache[key]
  if q.fresh then q.drop = true end
  if q.dom ~= '' and not seen_dom[q.dom] then
    seen_dom[q.dom] = true
    doms[#doms + 1] = q.dom
  end
end
if #doms > 0 and (DOMAIN.max_urls > 0 or DOMAIN.max_queues > 0) then
  for i = 1, #doms, 500 do
    local part = {unpack(doms, i, math.min(i + 499, #doms))}
    local a = redis.call('HMGET', P .. ':da', unpack(part))
    local n = redis.call('HMGET', P .. ':dq', unpack(part))
    for j, d in ipairs(part) do
      dacc[d] = tonumber(a[j]) or 0
      dqn[d] = tonumber(n[j]) or 0
    end
  end
end
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
      status = '5'  -- an earlier entry of this call (its revisit time lies ahead)
    elseif member[i] then
      local at = has_rv and redis.call('HGET', rv_key, fp)
      if not at then status = '1' elseif tonumber(at) > now then status = '5' end
    end
  end
  if status == '0' then
    local d = q.dom
    if not q.drop and q.max_queue_urls > 0 and q.acc >= q.max_queue_urls then
      status = '2'
    elseif d ~= '' then
      if q.drop and DOMAIN.max_queues > 0 and dqn[d] >= DOMAIN.max_queues then
        status = '4'
      elseif DOMAIN.max_urls > 0 and dacc[d] >= DOMAIN.max_urls then
        status = '3'
      end
    end
    if status == '0' and d ~= '' and dacc[d] then
      if q.drop then dqn[d] = dqn[d] + 1 end
      dacc[d] = dacc[d] + 1
    end
  end
  if status == '1' or status == '5' then
    dups = dups + 1
  elseif status ~= '0' then
    refused[status] = refused[status] + 1
  else
    q.drop = nil
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
for status, reason in pairs({['2'] = 'queue-budget', ['3'] = 'domain-budget',
                              ['4'] = 'domain-queues'}) do
  if refused[status] > 0 then redis.call('HINCRBY', P .. ':rej', reason, refused[status]) end
end
save_all()
return sid .. table.concat(out)
