-- renew(now, expires, token...): extend the leases still held among the tokens to
-- expires (never shortened); returns 1 or 0 per token. A renewed lease gets an expiry
-- record of its own, "t:t"; wake() skips it when its call's record comes due.
local now = tonumber(ARGV[A0 + 1])
local expires = tonumber(ARGV[A0 + 2])
wake(now)
-- The calls' records that expire after `expires`: a lease of one of them lasts longer
-- already, and a record of its own would shorten it.
local later = {}
for _, r in ipairs(redis.call('ZRANGEBYSCORE', P .. ':lx', '(' .. f17(expires), '+inf')) do
  local first, last = string.match(r, '^(%d+):(%d+)$')
  later[#later + 1] = {tonumber(first), tonumber(last)}
end
local function lasts_longer(t)
  for _, r in ipairs(later) do
    if r[1] <= t and t <= r[2] then return true end
  end
  return false
end
local out = {}
for i = A0 + 3, #ARGV do
  local tok = ARGV[i]
  if redis.call('HEXISTS', P .. ':ls', tok) == 1 then
    local own = tok .. ':' .. tok
    local cur = redis.call('ZSCORE', P .. ':lx', own)
    if (not cur or tonumber(cur) < expires) and not lasts_longer(tonumber(tok)) then
      redis.call('ZADD', P .. ':lx', f17(expires), own)
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
save_all()
return out
