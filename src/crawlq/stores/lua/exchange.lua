-- exchange(now, n_add, add blobs..., n_release, release blobs..., limit, ttl): add's,
-- release's and lease's bodies (each wrapped as a function of its own arguments, see
-- redis_store._lua) run in this order in one script: all of it or none of it runs
-- (Redis refuses a script whose first write finds it out of memory, and a script it
-- does not have, before anything is written), so a page is never answered without the
-- links it found. Returns {add's statuses, release's flags, lease's rows, the
-- seen-set's id (add's, '' without an add)}.
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
local leased = {}
if tonumber(ARGV[at]) > 0 then leased = lease_part(args(now, ARGV[at], ARGV[at + 1], '')) end
return {table.concat(statuses), table.concat(held), leased, sid}
