-- include: helpers/stream.lua helpers/where.lua helpers/tenants.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: stream, tenants, admitted, queued, held. ARGV: group, limit, entry ids...
-- Run after outcomes: each named entry that is admitted and finished stops counting for its tenant, and each
-- such tenant's oldest held tasks are admitted while it has room. Returns {released, admitted}.
if redis.call('HLEN', KEYS[3]) == 0 then return {0, 0} end
where_key = KEYS[#KEYS]
local g = {stream = KEYS[1], tenants = KEYS[2], admitted = KEYS[3], queued = KEYS[4], held = KEYS[5]}
local info = group_info(g.stream, ARGV[1])
if not info then return {0, 0} end
local last, limit = info['last-delivered-id'], tonumber(ARGV[2])
local released, added, touched = 0, 0, {}
for i = 3, #ARGV do
  local tenant = redis.call('HGET', g.admitted, ARGV[i])
  if tenant and finished(g.stream, ARGV[1], ARGV[i], last) then
    release(g.tenants, g.admitted, ARGV[i], tenant)
    released = released + 1
    touched[tenant] = true
  end
end
for tenant in pairs(touched) do
  added = added + fill(g, tenant, limit, math.max(limit, 1))
end
return {released, added}
