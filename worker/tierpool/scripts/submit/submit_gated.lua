-- include: helpers/stream.lua helpers/where.lua helpers/tenants.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: stream, dedupe key, queued, held, held seq. ARGV: dedupe ttl ms (0: no dedupe), limit, tenant, the
-- tenants key (read only: see helpers/tenants.lua), fields... A submit with a tenant to a tier with
-- tenantConcurrency: enqueued once per task_id within the window (like SUBMIT_ONCE) when a dedupe ttl is given,
-- then queued for a worker to admit, or held. Returns the entry id, 'held', or nil for a duplicate.
if tonumber(ARGV[1]) > 0 and not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return false end
where_key = KEYS[#KEYS]
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
local g = {stream = KEYS[1], tenants = ARGV[4], queued = KEYS[3], held = KEYS[4], seq = KEYS[5]}
return gate(g, ARGV[3], tonumber(ARGV[2]), fields)
