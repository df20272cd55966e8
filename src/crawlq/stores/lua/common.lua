-- crawlq Redis store: helpers prepended to every script (see crawlq/stores/redis.py).
--
-- KEYS[1] is the crawl's meta hash "{prefix}:m", KEYS[2] "{prefix}:fence", a key no
-- script may ever write (redis_store.py: declared, it keeps scripts from running while
-- the crawl's slot moves); every other key starts with the same "{prefix}" hash tag,
-- so the whole crawl lives in one hash slot (Redis Cluster safe).
-- ARGV[1..13] is the default policy: concurrency, min_delay, max_delay, delay_factor,
-- max_queue_urls, session_budget, session_rest, lifo (0/1), max_redeliveries, then the
-- domain rules' domain_concurrency, max_domain_urls, max_domain_queues and DOMAIN_WAIT
-- (crawlq.stores.rules). Script arguments follow.
--
-- Per queue K:  P:qm:K  string  struct '<ddddddddd': n inf ra si acc ses st rp hs,
--                 then its domain's name (rp: the ready level it is listed under, NONE
--                 if none; hs: 1 when P:qset:K holds setting overrides)
--               P:qset:K  hash  setting -> value (per-queue policy overrides)
--               P:qp:K  zset  priority levels with entries (score -prio)
--               P:q:<prio>:K  list  items (see payload_of), head on the left
-- Global:       P:rp zset ready priority levels; P:r:<prio> zset ready queues -> since
--               P:rest zset resting queues -> ready_at; P:qk set of queue keys
--               P:sc zset id -> not_before, P:scd hash id -> (key, prio, item),
--               P:scq hash queue key -> how many scheduled entries it has
--               P:ls hash token -> (key, prio, item), P:lx zset "first:last" token
--                 range of one lease call -> expires_at ("t:t" for a renewed lease)
--               P:dead hash id -> record, P:dz zset id; P:rv hash fp -> t
--               P:sb:<n> string of 16-byte fps (exact-sb: hash fp -> ''), P:sbh:<n>
--                 hash fp -> '' (other lengths): the exact seen-set's buckets (sb_add)
--               P:bl:<n> Bloom blocks; P:rej hash reason -> count
-- Per domain D:  P:di, P:da, P:dq  hashes D -> its leases in flight, the entries its
--                 queues accepted, its queues (kept by save_all from its queues' changes)
--               P:dp:D  zset its parked queues -> the end of the rest parking gave them

local M = KEYS[1]
local P = string.sub(M, 1, -3)
local READY, BUSY, RESTING, EMPTY = 0, 1, 2, 3
local DEF = {
  concurrency = tonumber(ARGV[1]), min_delay = tonumber(ARGV[2]),
  max_delay = tonumber(ARGV[3]), delay_factor = tonumber(ARGV[4]),
  max_queue_urls = tonumber(ARGV[5]), session_budget = tonumber(ARGV[6]),
  session_rest = tonumber(ARGV[7]),
}
local LIFO = ARGV[8] == '1'
local MAX_REDELIVERIES = tonumber(ARGV[9])
local DOMAIN = {concurrency = tonumber(ARGV[10]), max_urls = tonumber(ARGV[11]),
                max_queues = tonumber(ARGV[12]), wait = tonumber(ARGV[13])}
-- Domains and their counts are kept only while a domain rule is on (rules.groups): a
-- queue made without gets its domain, and is counted, when a call with them meets it.
local GROUPED = DOMAIN.concurrency > 0 or DOMAIN.max_urls > 0 or DOMAIN.max_queues > 0
local A0 = 13  -- script arguments start at ARGV[A0 + 1]
local DOMS = {}  -- queue key -> its domain, for queues a call may make (add's argument)
local SETTINGS = {'concurrency', 'min_delay', 'max_delay', 'delay_factor',
                  'max_queue_urls', 'session_budget', 'session_rest'}

local cache = {}   -- queues loaded by this call, written back by save_all()
local counters = {}  -- counter deltas, written back by save_all()

local function f17(x) return string.format('%.17g', x) end

-- Every loop that is not a `for` over a range has a cap on its passes, derived from the
-- sizes it works through (a pass consumes one of them), that it can reach only if the
-- crawl's keys contradict each other (a bug). Past it the script ends with this error,
-- never spins: a script that runs on holds the whole server ("BUSY" for every client,
-- and SCRIPT KILL is refused once it has written). Redis keeps what the script wrote
-- before the error.
local function overrun(loop, cap)
  error({err = string.format('ERR crawlq: %s ran past its bound of %d passes: the '
    .. "crawl's keys contradict each other (a bug in crawlq; please report it)", loop, cap)})
end

local function count(name, n)
  counters[name] = (counters[name] or 0) + n
end

local function apply_policy(q)
  local s = q.settings
  for _, name in ipairs(SETTINGS) do
    q[name] = s[name] or DEF[name]
  end
  -- A queue told to wait longer than the default cap (Crawl-delay: 60) gets it.
  if s.min_delay and not s.max_delay and s.min_delay > DEF.max_delay then
    q.max_delay = s.min_delay
  end
end

local QFMT = '<ddddddddd'
local QLEN = 72  -- bytes of QFMT; the queue's domain follows
local NONE = 2 ^ 40  -- no ready level (levels are within +-2^31)

-- Build queue `key` from its record `raw` (false: a new queue) and cache it.
local function makeq(key, raw)
  local q = {key = key, n = 0, inf = 0, ra = 0, si = 0, acc = 0, ses = 0, st = EMPTY, rp = '',
       hs = 0, settings = {}}
  if raw then
    local rp
    q.n, q.inf, q.ra, q.si, q.acc, q.ses, q.st, rp, q.hs = struct.unpack(QFMT, raw)
    q.dom = string.sub(raw, QLEN + 1)  -- ('' for a queue made before domains)
    if rp ~= NONE then
      q.rp = string.format('%d', rp)
      -- A ready queue is listed under its best level (settle keeps it so).
      if q.st == READY then q.best = q.rp end
    end
    if q.hs == 1 then
      local s = redis.call('HGETALL', P .. ':qset:' .. key)
      for i = 1, #s, 2 do q.settings[s[i]] = tonumber(s[i + 1]) end
    end
  else
    q.fresh = true  -- (listed in P:qk by save_all, unless add drops it)
    q.dom = GROUPED and DOMS[key] or ''
  end
  q.n0, q.inf0, q.acc0 = q.n, q.inf, q.acc
  apply_policy(q)
  cache[key] = q
  return q
end

local function loadq(key)
  return cache[key] or makeq(key, redis.call('GET', P .. ':qm:' .. key))
end

-- Load the queues named in `keys` with one MGET per 500 (a redis.call costs more than
-- the work it does here, so the hot paths fetch their queues up front).
local function prefetch(keys)
  local need, wanted = {}, {}
  for _, k in ipairs(keys) do
    if not cache[k] and not wanted[k] then
      wanted[k] = true
      need[#need + 1] = k
    end
  end
  for i = 1, #need, 500 do
    local names = {}
    for j = i, math.min(i + 499, #need) do names[#names + 1] = P .. ':qm:' .. need[j] end
    local raws = redis.call('MGET', unpack(names))
    for j = 1, #names do makeq(need[i + j - 1], raws[j]) end
  end
end

-- How many leases ready queue q may give in one call (crawlq.stores.rules.lease_room):
-- what its concurrency and its session budget leave room for, no more than it holds
-- (so that its domain's room it cannot use goes to the others), one at least.
local function room_of(concurrency, budget, inf, ses, n)
  local free = concurrency - inf
  if budget > 0 and budget - ses < free then free = budget - ses end
  if n < free then free = n end
  return math.max(free, 1)
end

local function lease_room(q)
  return room_of(q.concurrency, q.session_budget, q.inf, q.ses, q.n)
end

-- The best (highest) priority level with entries in q, as a string, or false.
-- q.best caches it for the call (nil: not known yet).
local function best_level(q)
  if q.best == nil then
    q.best = redis.call('ZRANGE', P .. ':qp:' .. q.key, 0, 0)[1] or false
  end
  return q.best
end

-- Empty levels stay in P:rp until the next look finds them empty (saves a ZCARD
-- per queue state change); first_ready_level() and lease remove them.
local function unready(q)
  redis.call('ZREM', P .. ':r:' .. q.rp, q.key)
  q.rp = ''
end

-- Store q's setting overrides (value nil removes one) and recompute its policy.
local function set_setting(q, name, value)
  local k = P .. ':qset:' .. q.key
  if value == nil then
    redis.call('HDEL', k, name)
  else
    redis.call('HSET', k, name, value)
  end
  q.settings[name] = value
  q.hs = next(q.settings) and 1 or 0
  apply_policy(q)
end

-- The best priority level that has a ready queue, or nil.
local function first_ready_level()
  -- (a pass returns or takes one level off P:rp)
  local cap = redis.call('ZCARD', P .. ':rp') + 1
  for _ = 1, cap do
    local level = redis.call('ZRANGE', P .. ':rp', 0, 0)[1]
    if not level then return nil end
    if redis.call('ZCARD', P .. ':r:' .. level) > 0 then return level end
    redis.call('ZREM', P .. ':rp', level)
  end
  overrun('first_ready_level', cap)
end

-- Count a lease of q ended into freed (domain -> leases ended), for unpark, when
-- domains have a lease cap.
local function ended(freed, q)
  if DOMAIN.concurrency > 0 and q.dom ~= '' then freed[q.dom] = (freed[q.dom] or 0) + 1 end
end

-- Park q, which a lease call found ready with its domain full (crawlq.stores.rules): it
-- rests DOMAIN.wait at most, and is in P:dp:<domain> to be made ready when a lease of
-- its domain ends (unpark).
local function park(q, now)
  local until_ = now + DOMAIN.wait
  if until_ > q.ra then
    q.ra = until_
    redis.call('ZADD', P .. ':dp:' .. q.dom, f17(until_), q.key)
  end
end

-- Put q in the state (and index) its fields call for. A queue keeps its place in line
-- while it stays ready; one that just became ready has waited since its rest ended;
-- one just served (served = true) goes to the back of the line.
local function settle(q, now, served)
  local old = q.st
  local new
  if q.n <= 0 then new = EMPTY
  elseif q.inf >= q.concurrency then new = BUSY
  elseif q.ra > now then new = RESTING
  else new = READY end
  if old == RESTING and new ~= RESTING then
    redis.call('ZREM', P .. ':rest', q.key)
  end
  if new == RESTING then
    redis.call('ZADD', P .. ':rest', f17(q.ra), q.key)
  end
  if new == READY then
    local level = best_level(q)
    if served then
      q.si = now
    elseif old == RESTING then
      q.si = q.ra
    elseif old ~= READY then
      q.si = now
    end
    if old ~= READY or served or level ~= q.rp then
      local same = old == READY and level == q.rp
      if old == READY and q.rp ~= '' and not same then unready(q) end
      redis.call('ZADD', P .. ':r:' .. level, f17(q.si), q.key)  -- moves it when same
      if not same then redis.call('ZADD', P .. ':rp', -tonumber(level), level) end
      q.rp = level
    end
  elseif old == READY and q.rp ~= '' then
    unready(q)
  end
  q.st = new
end

-- End q's park, if it is parked, at `now` (before a rest or a block applies to it: the
-- park's end must not absorb theirs); whether it was. A park that ended by `now` is
-- over (the queue was ready since its end).
local function unpark_one(q, now)
  if q.dom == '' or q.st ~= RESTING or q.ra <= now then return false end
  local k = P .. ':dp:' .. q.dom
  local sc = redis.call('ZSCORE', k, q.key)
  if sc and tonumber(sc) == q.ra then
    redis.call('ZREM', k, q.key)
    q.ra = now
    return true
  end
  return false
end

-- Make ready at time `at`, per domain, as many of its parked queues as it ended leases
-- (freed: domain -> n), the longest parked first (then by key); a queue whose rest is
-- no longer the one parking set, or whose park ended by `at`, is dropped from the
-- list, not counted.
local function unpark(freed, at)
  for d, n in pairs(freed) do
    local k = P .. ':dp:' .. d
    -- (a pass pops one of the parked queues)
    for _ = 1, redis.call('ZCARD', k) do
      if n <= 0 then break end
      local got = redis.call('ZPOPMIN', k)
      if #got == 0 then break end
      local q = cache[got[1]]
      if not q and redis.call('EXISTS', P .. ':qm:' .. got[1]) == 1 then
        q = loadq(got[1])  -- (not a queue deleted since: that one is gone)
      end
      if q and q.st == RESTING and q.ra == tonumber(got[2]) and q.ra > at
          and q.dom == d then
        q.ra = at
        settle(q, at, false)
        n = n - 1
      end
    end
  end
end

-- An item's place in its list (crawlq.stores.rules.entry_rank): TAIL, an added one
-- (behind the others in FIFO, ahead of them in LIFO); HEAD, one back at once (ahead of
-- them); LAST, a loaded one (behind them). A list is served from its left end (FIFO)
-- or its right end (LIFO).
local TAIL, HEAD, LAST = 0, 1, 2

-- Put an item in q at priority prio, at place (TAIL, HEAD or LAST).
local function push(q, prio, item, place)
  local lk = P .. ':q:' .. prio .. ':' .. q.key
  local len
  local left
  if LIFO then left = place == LAST else left = place == HEAD end
  if left then
    len = redis.call('LPUSH', lk, item)
  else
    len = redis.call('RPUSH', lk, item)
  end
  if len == 1 then
    redis.call('ZADD', P .. ':qp:' .. q.key, -tonumber(prio), tostring(prio))
    if q.n == 0 then
      q.best = tostring(prio)
    elseif q.best ~= nil and (q.best == false or tonumber(prio) > tonumber(q.best)) then
      q.best = tostring(prio)
    elseif q.best == nil and q.st == READY and q.rp ~= '' and tonumber(prio) > tonumber(q.rp)
    then
      q.best = tostring(prio)  -- above the level it is listed under: the new best
    end
  end
  q.n = q.n + 1
end

-- Pop up to k items from the head of q, best priority first: {prio, item, prio, item...}
local function pop(q, k)
  local out = {}
  local qp = P .. ':qp:' .. q.key
  -- (a pass pops an item, or takes a level off P:qp:K, or is the last: k passes, then
  -- if some popped nothing, which a consistent queue never sees, one per level left)
  local passes, cap, counted = 0, k, false
  while k > 0 do
    passes = passes + 1
    if passes > cap then
      if not counted then
        counted = true
        cap = passes + k + redis.call('ZCARD', qp) + 1  -- (+1: a stale q.best)
      end
      if passes > cap then overrun('pop', cap) end
    end
    local level = best_level(q)
    if not level then break end
    local lk = P .. ':q:' .. level .. ':' .. q.key
    local items
    if LIFO then
      items = redis.call('RPOP', lk, k)
    else
      items = redis.call('LPOP', lk, k)
    end
    if not items then items = {} end
    for _, it in ipairs(items) do
      out[#out + 1] = level
      out[#out + 1] = it
    end
    k = k - #items
    q.n = q.n - #items
    if k > 0 or q.n == 0 or redis.call('LLEN', lk) == 0 then
      redis.call('ZREM', qp, level)  -- popped fewer than asked: the level is empty
      q.best = nil
    else
      q.best = level
    end
  end
  return out
end

-- Put back at the head of their queues the leased items in `back`, {token, q, prio, item}
-- each: the latest lease first, so that the earliest ends at the head, each in its old
-- place as the other stores put them (by their order in the queue).
local function push_back(back)
  table.sort(back, function(x, y) return x[1] > y[1] end)
  for _, b in ipairs(back) do push(b[2], b[3], b[4], HEAD) end
end

local function schedule(key, prio, item, at)
  local id = redis.call('HINCRBY', M, 'schedid', 1)
  redis.call('ZADD', P .. ':sc', f17(at), id)
  redis.call('HSET', P .. ':scd', id, cmsgpack.pack(key, prio, item))
  redis.call('HINCRBY', P .. ':scq', key, 1)
end

-- Count n scheduled entries of queue key gone (P:scq: key -> how many it has).
local function unscheduled(key, n)
  if redis.call('HINCRBY', P .. ':scq', key, -n) <= 0 then redis.call('HDEL', P .. ':scq', key) end
end

-- An item (a queued, scheduled or leased entry) is 2 bytes of its retries; then, once
-- a lease of it expired, '\0' and 2 bytes of how many of its leases expired (its count
-- follows the entry, as the other stores keep one per entry: two requests of one URL
-- have their own); then its payload, a msgpack array (never '\0' first). All big-endian.
-- crawlq/stores/redis_store.py reads it (_item).
local function u16(n) return string.char(math.floor(n / 256) % 256, n % 256) end

local function payload_of(item)
  if string.byte(item, 3) == 0 then return string.sub(item, 6) end
  return string.sub(item, 3)
end

local function set_retries(item, retries)  -- (its expiry count stays)
  return u16(retries) .. string.sub(item, 3)
end

-- How many of the entry's leases expired.
local function expiries(item)
  if string.byte(item, 3) ~= 0 then return 0 end
  local hi, lo = string.byte(item, 4, 5)
  return hi * 256 + lo
end

local function set_expiries(item, n)  -- (a count past 65535 is kept as 65535)
  return string.sub(item, 1, 2) .. '\0' .. u16(math.min(n, 65535)) .. payload_of(item)
end

-- Keep a leased entry as dead (counted as a failure).
local function bury(key, prio, item, err, at)
  count('failed', 1)
  local id = redis.call('HINCRBY', M, 'deadid', 1)
  redis.call('HSET', P .. ':dead', id, cmsgpack.pack(key, prio, string.byte(item, 1) * 256 +
             string.byte(item, 2), payload_of(item), err, f17(at)))
  redis.call('ZADD', P .. ':dz', id, id)
end

-- Move due scheduled entries, expired leases and rested queues to ready. Due entries
-- and expired leases are settled in time order, each at its own time (due entries first
-- at equal times, as the other stores take them): a queue they make ready has waited
-- since then, not since the call that noticed.
local function drop_old_values(now)
  -- Named values whose time is up (put_values keeps each expiry in ':kvx' too), at most
  -- 1000 a call. One put again since then has its new expiry in ':kv' and stays.
  local old = redis.call('ZRANGEBYSCORE', P .. ':kvx', '-inf', f17(now), 'LIMIT', 0, 1000)
  if #old == 0 then return end
  local vals = redis.call('HMGET', P .. ':kv', unpack(old))
  for i, name in ipairs(old) do
    local raw = vals[i]
    if raw and struct.unpack('<d', raw) <= now then redis.call('HDEL', P .. ':kv', name) end
  end
  redis.call('ZREM', P .. ':kvx', unpack(old))
end

-- (A script's parts each wake at the script's time, exchange.lua's three in turn: the
-- first finds what is due; nothing a script does comes due at or before its own time
-- (it schedules and rests only later, a lease expires after a positive TTL), so the
-- others would find nothing and are skipped.)
local woke_at
local function wake(now)
  if woke_at == now then return end
  woke_at = now
  drop_old_values(now)
  local events = {}  -- {time, 0: due entry / 1: expired lease, id or token, key, prio, item}
  local sc = redis.call('ZRANGEBYSCORE', P .. ':sc', '-inf', f17(now), 'WITHSCORES')
  if #sc > 0 then
    local ids = {}
    for i = 1, #sc, 2 do ids[#ids + 1] = sc[i] end
    for i = 1, #ids, 5000 do  -- in chunks: unpack() is limited by Lua's C stack
      local recs = redis.call('HMGET', P .. ':scd', unpack(ids, i, math.min(i + 4999, #ids)))
      for j, rec in ipairs(recs) do
        if rec then
          local key, prio, item = cmsgpack.unpack(rec)
          local n = i + j - 1
          events[#events + 1] = {tonumber(sc[2 * n]), 0, tonumber(ids[n]), key, prio, item}
          unscheduled(key, 1)
        end
      end
    end
    redis.call('ZREMRANGEBYSCORE', P .. ':sc', '-inf', f17(now))
    for i = 1, #ids, 5000 do
      redis.call('HDEL', P .. ':scd', unpack(ids, i, math.min(i + 4999, #ids)))
    end
  end
  local ranges = redis.call('ZRANGEBYSCORE', P .. ':lx', '-inf', f17(now), 'WITHSCORES')
  for r = 1, #ranges, 2 do
    local first, last = string.match(ranges[r], '^(%d+):(%d+)$')
    local at = tonumber(ranges[r + 1])
    first, last = tonumber(first), tonumber(last)
    for lo = first, last, 1000 do
      local toks = {}
      for t = lo, math.min(lo + 999, last) do toks[#toks + 1] = t end
      local recs = redis.call('HMGET', P .. ':ls', unpack(toks))
      for j, rec in ipairs(recs) do
        -- (a lease renewed since has an expiry record of its own, "t:t", later than
        -- its call's: see renew.lua. It expires at that record's time, in this wake
        -- too when both are due, never at its call's.)
        local own = first ~= last and rec and
          redis.call('ZSCORE', P .. ':lx', toks[j] .. ':' .. toks[j])
        if rec and not (own and tonumber(own) > at) then
          local key, prio, item = cmsgpack.unpack(rec)
          events[#events + 1] = {at, 1, toks[j], key, prio, item}
          redis.call('HDEL', P .. ':ls', toks[j])
        end
      end
    end
  end
  if #ranges > 0 then
    redis.call('ZREMRANGEBYSCORE', P .. ':lx', '-inf', f17(now))
  end
  -- (due entries join the tail in the order they were scheduled)
  table.sort(events, function(x, y)
    if x[1] ~= y[1] then return x[1] < y[1] end
    if x[2] ~= y[2] then return x[2] < y[2] end
    return x[3] < y[3]
  end)
  local i = 1
  for _ = 1, #events do  -- (a pass takes the events of one time, at least one)
    if i > #events then break end
    local at = events[i][1]
    local group, back, freed = {}, {}, {}
    while i <= #events and events[i][1] == at do
      local e = events[i]
      local q = loadq(e[4])
      if e[2] == 0 then
        push(q, e[5], e[6], TAIL)
      else
        q.inf = q.inf - 1
        ended(freed, q)
        local n = expiries(e[6]) + 1
        if n > MAX_REDELIVERIES then
          bury(e[4], e[5], e[6], string.format(
            'lease expired unanswered %d times (max_redeliveries %d)', n, MAX_REDELIVERIES), at)
        else
          count('redelivered', 1)
          back[#back + 1] = {e[3], q, e[5], set_expiries(e[6], n)}  -- its old place: the head
        end
      end
      group[e[4]] = q
      i = i + 1
    end
    push_back(back)
    for _, q in pairs(group) do settle(q, at, false) end
    unpark(freed, at)
  end
  local rested = redis.call('ZRANGEBYSCORE', P .. ':rest', '-inf', f17(now))
  for _, key in ipairs(rested) do
    local q = loadq(key)
    settle(q, now, false)
  end
end

-- Write back every loaded queue and the counter deltas.
-- A queue's changes to its domain's counts: leases in flight, entries accepted, and
-- itself (gone: -1) as one of its queues.
local function domain_counts(q, gone)
  local d = q.dom
  if d == '' then
    -- (a queue gets its domain only from a call with domain rules; once it has one,
    -- every call keeps its domain's counts, rules or not)
    if gone or not GROUPED or not DOMS[q.key] then return end
    d = DOMS[q.key]  -- (a queue made before domains, or by a call without them)
    q.dom = d
    q.acc0, q.inf0 = 0, 0
    if not q.fresh then q.fresh = 'counted' end
  end
  if q.inf ~= q.inf0 then redis.call('HINCRBY', P .. ':di', d, q.inf - q.inf0) end
  if q.acc ~= q.acc0 then redis.call('HINCRBY', P .. ':da', d, q.acc - q.acc0) end
  if gone then
    if not q.fresh then redis.call('HINCRBY', P .. ':dq', d, -1) end
  elseif q.fresh then
    redis.call('HINCRBY', P .. ':dq', d, 1)
  end
end

-- Write back every loaded queue and the counter deltas. A queue add made but gave
-- nothing (q.drop) is not kept.
local function save_all()
  local queued, nonempty = 0, 0
  local kv = {}
  for key, q in pairs(cache) do
    if not q.drop then
    domain_counts(q, false)
    if q.fresh == true then redis.call('SADD', P .. ':qk', key) end
    local rp = NONE
    if q.rp ~= '' then rp = tonumber(q.rp) end
    kv[#kv + 1] = P .. ':qm:' .. key
    kv[#kv + 1] = struct.pack(QFMT, q.n, q.inf, q.ra, q.si, q.acc, q.ses, q.st, rp, q.hs)
                  .. q.dom
    if #kv >= 1000 then
      redis.call('MSET', unpack(kv))
      kv = {}
    end
    queued = queued + q.n - q.n0
    if q.n0 == 0 and q.n > 0 then nonempty = nonempty + 1 end
    if q.n0 > 0 and q.n == 0 then nonempty = nonempty - 1 end
    end
  end
  if #kv > 0 then redis.call('MSET', unpack(kv)) end
  if queued ~= 0 then count('queued', queued) end
  if nonempty ~= 0 then count('nonempty', nonempty) end
  for name, n in pairs(counters) do
    if n ~= 0 then redis.call('HINCRBY', M, name, n) end
  end
  -- Written: forgotten, so that a later part of the same script (exchange.lua) loads
  -- the queues afresh and counts from what it finds, not twice.
  cache = {}
  counters = {}
end


-- The exact seen-set: fingerprints in small buckets P:sb:<n>, addressed by linear
-- hashing (level sb_l, split pointer sb_s in M) so that they split one at a time as the
-- crawl grows, keeping ~SB_LOAD fingerprints each, whatever the crawl's size. A crawl of
-- the shape "exact-sb2" keeps its 16-byte fingerprints (the default's) in STRING
-- buckets, one after the other (~17 bytes a fingerprint with the key's own cost; each
-- written whole with SET: APPEND would let Redis double its allocation), and any other
-- length in hash buckets P:sbh:<n>; a crawl of the shape "exact-sb" (crawlq before it)
-- keeps every fingerprint as a field of the hash P:sb:<n> (~23 bytes: Redis keeps small
-- hashes listpack-encoded, a field and an empty value each).
local SB_N0, SB_LOAD, FPW = 256, 48, 16
local sb_l, sb_s, sb_str
local sbc = {}  -- string bucket key -> its value, as read or written by this script

local function sb_state()
  if not sb_l then
    local v = redis.call('HMGET', M, 'sb_l', 'sb_s', 'seenset')
    sb_l, sb_s = tonumber(v[1]) or 0, tonumber(v[2]) or 0
    sb_str = v[3] == 'exact-sb2'
  end
end

local function sb_hash(fp)  -- fingerprints are uniform hash bytes: their first 32 bits
  local a, b, c, d = string.byte(fp, 1, 4)
  return ((a * 256 + b) * 256 + (c or 0)) * 256 + (d or 0)
end

local function sb_bucket(fp)  -- fp's bucket number
  sb_state()
  local m = SB_N0 * 2 ^ sb_l
  local h = sb_hash(fp)
  local n = h % m
  if n < sb_s then n = h % (2 * m) end
  return n
end

local function sb_strkey(n) return P .. ':sb:' .. tostring(n) end  -- (n < 2^32: an integer)
local function sb_hkey(n) return P .. (sb_str and ':sbh:' or ':sb:') .. tostring(n) end

local function sb_string(key)  -- a string bucket's value ('' for none)
  local v = sbc[key]
  if v == nil then
    v = redis.call('GET', key) or ''
    sbc[key] = v
  end
  return v
end

local function sb_in(v, fp)  -- whether fp is one of the FPW-byte records of v
  local at = 1
  for _ = 1, #v + 1 do  -- (a pass moves at least one byte on, or returns)
    local i = string.find(v, fp, at, true)
    if not i then return false end
    if (i - 1) % FPW == 0 then return true end
    at = i + 1
  end
  return false
end

local function sb_whole(fp) return sb_str and #fp == FPW end  -- (kept in a string bucket)

-- Whether fp is in the seen-set, and its bucket (to pass to sb_add).
local function sb_has(fp)
  local n = sb_bucket(fp)
  if sb_whole(fp) then return sb_in(sb_string(sb_strkey(n)), fp), n end
  return redis.call('HEXISTS', sb_hkey(n), fp) == 1, n
end

-- Add fingerprints to the seen-set (with their buckets from sb_has, when known), then
-- split buckets while they are too full. Called once per script, after every membership
-- test of the call: addresses do not change until then.
local function sb_add(fps, buckets)
  if #fps == 0 then return end
  sb_state()
  local new = 0
  local written = {}
  for i, fp in ipairs(fps) do
    local n = buckets and buckets[i] or sb_bucket(fp)
    if sb_whole(fp) then
      local key = sb_strkey(n)
      local v = sb_string(key)
      if not sb_in(v, fp) then  -- (offered twice in one call: added once)
        sbc[key] = v .. fp
        written[key] = true
        new = new + 1
      end
    else
      new = new + redis.call('HSET', sb_hkey(n), fp, '')
    end
  end
  for key in pairs(written) do redis.call('SET', key, sbc[key]) end
  local n = redis.call('HINCRBY', M, 'sb_n', new)
  local m = SB_N0 * 2 ^ sb_l
  local split = false
  -- (a pass splits one bucket: m + sb_s grows by one)
  local cap = math.max(0, math.ceil(n / SB_LOAD - (m + sb_s))) + 1
  local passes = 0
  while n > SB_LOAD * (m + sb_s) do
    passes = passes + 1
    if passes > cap then overrun('sb_add', cap) end
    if sb_str then
      local key, to = sb_strkey(sb_s), sb_strkey(sb_s + m)
      local v = sb_string(key)
      local stay, moved = {}, {}
      for i = 1, #v, FPW do
        local f = string.sub(v, i, i + FPW - 1)
        if sb_hash(f) % (2 * m) ~= sb_s then moved[#moved + 1] = f
        else stay[#stay + 1] = f end
      end
      if #moved > 0 then
        sbc[to] = sb_string(to) .. table.concat(moved)
        redis.call('SET', to, sbc[to])
        sbc[key] = table.concat(stay)
        if sbc[key] == '' then redis.call('DEL', key) else redis.call('SET', key, sbc[key]) end
      end
    end
    local old = sb_hkey(sb_s)
    local moved, args = {}, {}
    for _, f in ipairs(redis.call('HKEYS', old)) do
      if sb_hash(f) % (2 * m) ~= sb_s then
        moved[#moved + 1] = f
        args[#args + 1] = f
        args[#args + 1] = ''
      end
    end
    if #moved > 0 then
      redis.call('HSET', sb_hkey(sb_s + m), unpack(args))
      redis.call('HDEL', old, unpack(moved))
    end
    sb_s = sb_s + 1
    if sb_s == m then
      sb_l, sb_s, m = sb_l + 1, 0, 2 * m
    end
    split = true
  end
  if split then redis.call('HSET', M, 'sb_l', sb_l, 'sb_s', sb_s) end
end

-- The earliest time something may become ready: a rest's end, a scheduled entry's
-- time or a lease's expiry (nil: none). exact: expiry records none of whose leases is
-- still held until their time are dropped on the way first; else such a record's time
-- may stand for a lease's expiry (a time too early, never too late).
local function next_event(exact)
  -- Drop expiry records none of whose leases is still held until their time (each was
  -- answered, or renewed, which gave it a record of its own), to see a real one. (A pass
  -- breaks or takes one record off P:lx.)
  local cap = exact and redis.call('ZCARD', P .. ':lx') + 1 or 0
  for pass = 1, exact and cap + 1 or 0 do
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
  return best
end

-- The first `limit` queues of the ready line, in its order, flat: {level, since, key,
-- room (lease_room), domain ('' when none is kept), the domain's leases out, ...}: what
-- a sharded crawl merges into its crawl-wide line (redis_shards.py). Call it after
-- waking and save_all(). (Read from the queues' records as they are, without loading
-- them as a call that changes them does: a queue with settings of its own is loaded.)
local function ready_heads(limit)
  local out = {}
  local n = 0
  local doms, slots = {}, {}  -- domains met, in order; domain -> its heads' places
  for _, level in ipairs(redis.call('ZRANGE', P .. ':rp', 0, -1)) do
    if n >= limit then break end
    local got = redis.call('ZRANGE', P .. ':r:' .. level, 0, limit - n - 1, 'WITHSCORES')
    if #got > 0 then
      local raws = {}
      for i = 1, #got, 1000 do  -- (MGETs of 500: unpack() is limited by Lua's C stack)
        local names = {}
        for j = i, math.min(i + 999, #got), 2 do names[#names + 1] = P .. ':qm:' .. got[j] end
        for _, raw in ipairs(redis.call('MGET', unpack(names))) do raws[#raws + 1] = raw end
      end
      for j, raw in ipairs(raws) do
        local key = got[2 * j - 1]
        if raw then
          local room, dom
          local qn, inf, _, _, _, ses, _, _, hs = struct.unpack(QFMT, raw)
          if hs == 1 then
            local q = loadq(key)
            room, dom = lease_room(q), q.dom
          else
            room = room_of(DEF.concurrency, DEF.session_budget, inf, ses, qn)
            dom = string.sub(raw, QLEN + 1)
          end
          out[#out + 1] = level
          out[#out + 1] = got[2 * j]
          out[#out + 1] = key
          out[#out + 1] = room
          out[#out + 1] = dom
          out[#out + 1] = 0
          if dom ~= '' then
            if not slots[dom] then
              slots[dom] = {}
              doms[#doms + 1] = dom
            end
            local mine = slots[dom]
            mine[#mine + 1] = #out
          end
          n = n + 1
        end
      end
    end
  end
  for i = 1, #doms, 500 do
    local part = {}
    for j = i, math.min(i + 499, #doms) do part[#part + 1] = doms[j] end
    for j, v in ipairs(redis.call('HMGET', P .. ':di', unpack(part))) do
      local inf = tonumber(v or '0')
      for _, at in ipairs(slots[part[j]]) do out[at] = inf end
    end
  end
  cache = {}  -- (read, not changed: nothing to write back)
  return out
end

-- The ready line in brief, flat: {level, its ready queues, ...} best level first, then
-- the earliest time something may become ready (next_event, or earlier; '' for none),
-- then the line's version (M's 'v', one up when `changed`: a sharded client keeps the
-- newest reading of a shard whatever order its calls' replies come back in): how a
-- sharded crawl shares a call's leases among its shards (redis_shards.py).
local function ready_levels(changed)
  local out = {}
  for _, level in ipairs(redis.call('ZRANGE', P .. ':rp', 0, -1)) do
    local n = redis.call('ZCARD', P .. ':r:' .. level)
    if n > 0 then
      out[#out + 1] = level
      out[#out + 1] = n
    end
  end
  local t = next_event(false)  -- (too early at worst: the shard is read again)
  out[#out + 1] = t and f17(t) or ''
  out[#out + 1] = changed and redis.call('HINCRBY', M, 'v', 1)
                  or tonumber(redis.call('HGET', M, 'v') or '0')
  return out
end
