-- include: helpers/stream.lua helpers/where.lua
-- KEYS: stream, dedupe key, ...:where. ARGV: dedupe ttl ms, fields... Enqueues once per task_id within the window,
-- and writes the task's place in the task-id index. Returns the entry id, or nil for a duplicate.
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return false end
where_key = KEYS[#KEYS]
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
put_where(fields, in_stream(KEYS[1], id))
return id
