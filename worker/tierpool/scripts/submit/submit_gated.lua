-- include: helpers/stream.lua helpers/where.lua helpers/tenants.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: stream, dedupe key, tenants, admitted, held, held seq. ARGV: dedupe ttl ms (0: no dedupe), limit, tenant,
-- fields... A submit with a tenant to a tier with tenantConcurrency: enqueued once per task_id within the window
-- (like SUBMIT_ONCE) when a dedupe ttl is given, then admitted or held. Returns the entry id, 'held', or nil for
-- a duplicate.
if tonumber(ARGV[1]) > 0 and not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return false end
where_key = KEYS[#KEYS]
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
return gate(KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[3], tonumber(ARGV[2]), fields)
