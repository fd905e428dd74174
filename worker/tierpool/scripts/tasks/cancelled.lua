-- include: helpers/stream.lua helpers/where.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): the task's place is dropped with its outcome.
-- KEYS: stream, result key, events stream, checkpoint, errors hash. ARGV: group, consumer, entry id, task_id,
-- record JSON, ttl ms, events maxlen.
-- The outcome of a cancelled task, written only by the consumer that owns its entry: ack (and delete: see
-- delete_acked), the cancelled record, the final event; the checkpoint and the remembered error are dropped.
-- Nothing retries it.
-- Returns 1, 0 when the entry is no longer pending, -1 when another consumer owns it.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
delete_acked(KEYS[1], last_delivered(KEYS[1], ARGV[1]), {ARGV[3]})
redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[6])
redis.call('DEL', KEYS[4])
redis.call('HDEL', KEYS[5], ARGV[4])
where_key = KEYS[#KEYS]
drop_where(ARGV[4])
final_event(KEYS[3], ARGV[7], ARGV[6], 'cancelled')
return 1
