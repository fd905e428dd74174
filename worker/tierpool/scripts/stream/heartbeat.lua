-- KEYS: stream. ARGV: group, consumer, ids...
-- Resets idle on entries this consumer still owns (XCLAIM JUSTID does not count a delivery).
-- Returns {lost, gone}: the ids another consumer now owns (reclaimed while this one still runs them), and the ids
-- no longer this consumer's otherwise: not pending (acked by another worker) or deleted from the stream. A deleted
-- entry is never claimed: XCLAIM JUSTID would silently drop it from the PEL (Redis 7+).
local mine, lost, gone = {}, {}, {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 0 then
    gone[#gone + 1] = ARGV[i]
  elseif p[1][2] ~= ARGV[2] then
    lost[#lost + 1] = ARGV[i]
  elseif #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i]) == 0 then
    gone[#gone + 1] = ARGV[i]
  else
    mine[#mine + 1] = ARGV[i]
  end
end
if #mine > 0 then
  -- unpack() must come last in an argument list: anywhere else Lua passes only its first value
  local args = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0}
  for _, id in ipairs(mine) do args[#args + 1] = id end
  args[#args + 1] = 'JUSTID'
  redis.call(unpack(args))
end
return {lost, gone}
