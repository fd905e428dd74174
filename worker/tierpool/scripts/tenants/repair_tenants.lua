-- include: helpers/stream.lua helpers/where.lua helpers/tenants.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: stream, tenants, admitted, held. ARGV: group, limit (-1: none, the tier lost its limit), cap.
-- The lease holder's repair: releases every admitted entry that is finished (a worker that died between its
-- outcome and its release, an escalated entry), recomputes every tenant's count from the admitted entries, then
-- admits held tasks of every tenant with room (at most cap in all). Cost: one XPENDING per admitted entry (at
-- most tenants x limit) and one ZRANGEBYLEX per waiting tenant. Returns {released, drift, admitted}: drift is the
-- sum over tenants of |stored count - admitted entries| found before the recount (0 when nothing had leaked).
local stream, tenants, admitted, held = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
where_key = KEYS[#KEYS]
local info = group_info(stream, ARGV[1])
if not info then return {0, 0, 0} end
local last, limit, cap = info['last-delivered-id'], tonumber(ARGV[2]), tonumber(ARGV[3])
local stored = pairs_to_table(redis.call('HGETALL', tenants))
local flat = redis.call('HGETALL', admitted)
local counts, live, released, drift = {}, {}, 0, 0
local now = now_ms()
for i = 1, #flat, 2 do
  local id, tenant = flat[i], flat[i + 1]
  counts[tenant] = (counts[tenant] or 0) + 1
  if stale_pseudo(id, now) or finished(stream, ARGV[1], id, last) then
    redis.call('HDEL', admitted, id)
    released = released + 1
  else
    live[tenant] = (live[tenant] or 0) + 1
  end
end
for tenant, v in pairs(stored) do drift = drift + math.abs(tonumber(v) - (counts[tenant] or 0)) end
for tenant, c in pairs(counts) do if stored[tenant] == nil then drift = drift + c end end
redis.call('DEL', tenants)
for tenant, c in pairs(live) do redis.call('HSET', tenants, tenant, c) end
local added, cursor = 0, '-'
while added < cap do
  local m = redis.call('ZRANGEBYLEX', held, cursor, '+', 'LIMIT', 0, 1)
  if #m == 0 then break end
  local tenant = string.sub(m[1], 1, string.find(m[1], '\0', 1, true) - 1)
  added = added + fill(stream, tenants, admitted, held, tenant, limit, cap - added)
  cursor = '(' .. tenant .. '\1'
end
return {released, drift, added}
