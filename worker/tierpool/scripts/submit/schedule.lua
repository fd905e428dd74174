-- include: helpers/stream.lua helpers/due.lua helpers/where.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: due set, tier stream, dedupe key. ARGV: dedupe ttl ms (0: no dedupe), delay ms, not-before ms (0: none),
-- tier, gated (1: the task goes through its tenant's gate, so it always enters the due set and MOVE_DUE admits
-- or holds it), envelope fields... Schedules a task for max(now + delay, not-before) on Redis' clock; a time
-- already reached adds it to its stream at once (unless gated). With a dedupe ttl, enqueues once per task_id
-- within the window. Returns the stream entry id, 'due:<ms>', or nil for a duplicate.
if tonumber(ARGV[1]) > 0 and not redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[1]) then return false end
local now = now_ms()
local due = math.max(now + tonumber(ARGV[2]), tonumber(ARGV[3]))
local fields = {}
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
where_key = KEYS[#KEYS]
if due <= now and ARGV[5] ~= '1' then
  local id = redis.call('XADD', KEYS[2], '*', unpack(fields))
  put_where(fields, in_stream(KEYS[2], id))
  return id
end
redis.call('ZADD', KEYS[1], due, scheduled_member(ARGV[4], fields, -1, due, nil))
put_where(fields, in_set(KEYS[1], due))
return 'due:' .. due
