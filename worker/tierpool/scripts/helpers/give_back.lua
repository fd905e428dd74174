-- helpers/give_back.lua (after helpers/stream.lua), for HAND_BACK and PREEMPT.
-- Gives an entry ``consumer`` still owns back to the pool: to the ``parking`` consumer with ``idle_ms`` of idle
-- time (claimIdle: any worker's next reclaim takes it) and its delivery count set back by one (XCLAIM RETRYCOUNT),
-- since the delivery it got never ended in a failure. False (nothing changes) when another consumer owns it or it
-- is not pending.
local function give_back(stream, group, consumer, parking, idle_ms, id)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  if #p == 0 or p[1][2] ~= consumer then return false end
  local count = math.max(tonumber(p[1][4]) - 1, 0)
  redis.call('XCLAIM', stream, group, parking, 0, id, 'IDLE', idle_ms, 'RETRYCOUNT', count, 'JUSTID')
  return true
end
