-- include: helpers/stream.lua helpers/where.lua
-- KEYS: stream, parked hash (...:parked:<task_id>), ...:gathering, each child's result key, ...:where.
-- ARGV: group, consumer, entry id, task_id, children JSON (an array of the child ids).
-- A run that gathers children without an outcome gives its slot up, written only by the consumer that owns its
-- entry: the entry is acked (and deleted: see delete_acked), its fields are kept in the parked hash with the
-- children it waits for, and the task joins ...:gathering (and leaves the task-id index); its checkpoint stays.
-- When every child has a result record by now, the same fields go back into the stream at once instead (no lost
-- wake-up). Its deliveries are not counted: the fields keep the ``attempts`` they had, and ``parked`` is set to that
-- value, so the run that takes them with the same ``attempts`` on its first delivery knows it resumes the gather.
-- Returns 1 (parked), 2 (every child done: enqueued again), 0 when the entry is no longer pending, -1 when
-- another consumer owns it.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
local entry = redis.call('XRANGE', KEYS[1], ARGV[3], ARGV[3])
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
delete_acked(KEYS[1], last_delivered(KEYS[1], ARGV[1]), {ARGV[3]})
where_key = KEYS[#KEYS]
if #entry == 0 then
  drop_where(ARGV[4])
  return 0
end
local fields = entry[1][2]
local attempts, marked = '0', false
for i = 1, #fields - 1, 2 do
  if fields[i] == 'attempts' then attempts = fields[i + 1] end
end
for i = 1, #fields - 1, 2 do
  if fields[i] == 'parked' then
    fields[i + 1] = attempts
    marked = true
  end
end
if not marked then
  fields[#fields + 1] = 'parked'
  fields[#fields + 1] = attempts
end
for i = 4, #KEYS - 1 do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    redis.call('HSET', KEYS[2], 'stream', KEYS[1], 'fields', cjson.encode(fields), 'children', ARGV[5])
    redis.call('ZADD', KEYS[3], now_ms(), ARGV[4])
    drop_where(ARGV[4])  -- in no stream or set: a cancel sets the marker, which its children see
    return 1
  end
end
local id = redis.call('XADD', KEYS[1], '*', unpack(fields))
put_where(fields, in_stream(KEYS[1], id))
return 2
