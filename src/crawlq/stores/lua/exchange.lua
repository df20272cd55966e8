-- exchange(now, n_add, add blobs..., n_release, release blobs..., limit, ttl
--          [, line, park, heads]): add's, release's and lease's bodies (each wrapped as
-- a function of its own arguments, see redis_store._lua) run in this order in one
-- script: all of it or none of it runs (Redis refuses a script whose first write finds
-- it out of memory, and a script it does not have, before anything is written), so a
-- page is never answered without the links it found. Returns {add's statuses,
-- release's flags, lease's rows, the seen-set's id (add's, '' without an add)}.
-- A sharded crawl's shard (redis_shards.py) also gives `line` and `park` (lease's:
-- one pass over a share of the crawl-wide line, after parking; line 0: every pass, as
-- one store leases) and `heads` (how many queues of the ready line to list once all
-- is done); the reply then goes on with lease's "ready again" flag (0 without a lease,
-- or with line 0), the listing (common.lua's ready_heads; nil when `heads` is 0) and
-- the line in brief (ready_levels).
local function args(...)
  local t = {}
  for i = 1, A0 do t[i] = ARGV[i] end
  local extra = {...}
  for i = 1, #extra do t[A0 + i] = extra[i] end
  return t
end
local now = ARGV[A0 + 1]
local at = A0 + 2
local statuses, held, sid = {}, {}, ''
for k = 1, tonumber(ARGV[at]) do
  local got = add_part(args(now, ARGV[at + k]))
  sid = string.sub(got, 1, 16)
  statuses[k] = string.sub(got, 17)
end
at = at + tonumber(ARGV[at]) + 1
for k = 1, tonumber(ARGV[at]) do held[k] = release_part(args(now, ARGV[at + k])) end
at = at + tonumber(ARGV[at]) + 1
local limit, ttl = ARGV[at], ARGV[at + 1]
local share = ARGV[at + 2] ~= nil
local line, park, heads = ARGV[at + 2] or '0', ARGV[at + 3] or '', ARGV[at + 4] or '0'
local leased, again = {}, 0
if share then
  if tonumber(limit) > 0 or park ~= '' then
    leased = lease_part(args(now, limit, ttl, '', line, park))
    if line ~= '0' then again = table.remove(leased) end
  end
elseif tonumber(limit) > 0 then
  leased = lease_part(args(now, limit, ttl, ''))
end
if not share then return {table.concat(statuses), table.concat(held), leased, sid} end
wake(tonumber(now))  -- (nothing to do, unless no part ran)
save_all()
local listed = false  -- (not asked: a nil reply; a listing may be empty)
if tonumber(heads) > 0 then listed = ready_heads(tonumber(heads)) end
return {table.concat(statuses), table.concat(held), leased, sid, again, listed,
        ready_levels(true)}
