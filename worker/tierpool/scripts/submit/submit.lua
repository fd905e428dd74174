-- include: helpers/stream.lua helpers/where.lua
-- KEYS: stream, ...:where. ARGV: fields... A plain submit (no dedupe, no tenant gate, no delay): the entry, and the
-- task's place in the task-id index, in one step. Returns the entry id.
where_key = KEYS[#KEYS]
local id = redis.call('XADD', KEYS[1], '*', unpack(ARGV))
put_where(ARGV, in_stream(KEYS[1], id))
return id
