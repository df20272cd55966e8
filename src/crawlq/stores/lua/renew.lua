-- renew(now, expires, token...): extend the leases still held among the tokens to
-- expires (never shortened); returns 1 or 0 per token. A renewed lease gets an expiry
-- record of its own, "t:t"; wake() skips it when its call's record comes due.
local now = tonumber(ARGV[A0 + 1])
local expires = tonumber(ARGV[A0 + 2])
wake(now)
local out = {}
for i = A0 + 3, #ARGV do
  local tok = ARGV[i]
  if redis.call('HEXISTS', P .. ':ls', tok) == 1 then
    local own = tok .. ':' .. tok
    local cur = redis.call('ZSCORE', P .. ':lx', own)
    if not cur or tonumber(cur) < expires then
      redis.call('ZADD', P .. ':lx', f17(expires), own)
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
save_all()
return out
