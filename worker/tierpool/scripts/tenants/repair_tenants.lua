-- include: helpers/stream.lua helpers/where.lua helpers/tenants.lua helpers/placed.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: stream, tenants, admitted, queued, held, throttled. ARGV: group, limit (-1: none, the tier lost its
-- limit), cap.
-- The lease holder's repair:
-- - drops queued members (at most cap a pass) that no worker will take: with a score other than 0 (not the
--   gate's, and they would break the set's lex order), malformed, of an entry that is gone (escalated, trimmed) or
--   names another tenant, or of an entry delivered and no longer pending (finished without ADMIT_ENTRIES: cancelled
--   or dead-lettered at take) or pending idle more than QUEUED_GRACE_MS (a worker that died between its read and
--   ADMIT_ENTRIES: the entry is gated as new work when it is reclaimed). The grace, counted from the delivery,
--   spares the round trip between a worker's read and its ADMIT_ENTRIES;
-- - releases every admitted entry that is finished (a worker that died between its outcome and its release, an
--   escalated entry), and every throttled task's slot whose task is no longer throttled (a producer cancelled it:
--   CANCEL may not write the counts);
-- - recomputes every tenant's count from the admitted entries, then admits held tasks of every tenant with room
--   (at most cap in all).
-- Cost: one XPENDING per admitted entry (at most tenants x limit), one ZRANGEBYLEX per waiting tenant, one XRANGE
-- and one XPENDING per queued member. Returns {released, drift, admitted}: drift is the sum over tenants of
-- |stored count - admitted entries| found before the recount (0 when nothing had leaked).
local QUEUED_GRACE_MS = 10000
local g = {stream = KEYS[1], tenants = KEYS[2], admitted = KEYS[3], queued = KEYS[4], held = KEYS[5]}
where_key = KEYS[#KEYS]
local info = group_info(g.stream, ARGV[1])
if not info then return {0, 0, 0} end
local last, limit, cap = info['last-delivered-id'], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
redis.call('ZREMRANGEBYSCORE', g.queued, '-inf', '(0')
redis.call('ZREMRANGEBYSCORE', g.queued, '(0', '+inf')
local function stale_member(m)
  local sep = string.find(m, '\0', 1, true)
  local id = sep and string.match(string.sub(m, sep + 1), '^%d+%-%d+$')
  if not id then return true end
  local entry = redis.call('XRANGE', g.stream, id, id)
  if #entry == 0 or pairs_to_table(entry[1][2])['tenant'] ~= string.sub(m, 1, sep - 1) then return true end
  if not id_le(id, last) then return false end
  local p = redis.call('XPENDING', g.stream, ARGV[1], id, id, 1)
  return #p == 0 or tonumber(p[1][3]) > QUEUED_GRACE_MS
end
for _, m in ipairs(redis.call('ZRANGE', g.queued, 0, cap - 1)) do
  if stale_member(m) then redis.call('ZREM', g.queued, m) end
end
local function throttle_ended(id)
  local paid, task_id = string.match(id, '^t:(%d+):(.*)$')
  if not paid then return false end
  return stale_pseudo(id, now) or not scheduled_with(KEYS[6], paid, task_id)
end
local stored = pairs_to_table(redis.call('HGETALL', g.tenants))
local flat = redis.call('HGETALL', g.admitted)
local counts, live, released, drift = {}, {}, 0, 0
for i = 1, #flat, 2 do
  local id, tenant = flat[i], flat[i + 1]
  counts[tenant] = (counts[tenant] or 0) + 1
  if throttle_ended(id) or finished(g.stream, ARGV[1], id, last) then
    redis.call('HDEL', g.admitted, id)
    released = released + 1
  else
    live[tenant] = (live[tenant] or 0) + 1
  end
end
for tenant, v in pairs(stored) do drift = drift + math.abs(tonumber(v) - (counts[tenant] or 0)) end
for tenant, c in pairs(counts) do if stored[tenant] == nil then drift = drift + c end end
redis.call('DEL', g.tenants)
for tenant, c in pairs(live) do redis.call('HSET', g.tenants, tenant, c) end
local added, cursor = 0, '-'
while added < cap do
  local m = redis.call('ZRANGEBYLEX', g.held, cursor, '+', 'LIMIT', 0, 1)
  if #m == 0 then break end
  local tenant = string.sub(m[1], 1, string.find(m[1], '\0', 1, true) - 1)
  added = added + fill(g, tenant, limit, cap - added)
  cursor = '(' .. tenant .. '\1'
end
return {released, drift, added}
