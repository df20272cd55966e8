-- queue_op(now, op, key, ...): 'block' until | 'configure' name value ... ('' unsets)
local now, op, key = tonumber(ARGV[A0 + 1]), ARGV[A0 + 2], ARGV[A0 + 3]
wake(now)
local q = loadq(key)
if op == 'block' then
  local until_ = tonumber(ARGV[A0 + 4])
  if until_ > q.ra then
    q.ra = until_
    if q.st == READY or q.st == RESTING then settle(q, now, false) end
  end
elseif op == 'configure' then
  for j = A0 + 4, #ARGV, 2 do
    local value = ARGV[j + 1]
    set_setting(q, ARGV[j], value ~= '' and tonumber(value) or nil)
  end
  if q.st ~= EMPTY then settle(q, now, false) end
end
save_all()
return 1
