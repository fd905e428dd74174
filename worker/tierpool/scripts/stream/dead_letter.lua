-- include: helpers/stream.lua
-- KEYS: stream, dlq, result key, errors hash, events, checkpoint. ARGV: group, id, reason, error, deliveries, tier,
-- ttl ms, consumer, events maxlen, dlq max length (0: none). Moves one pending entry to the dead-letter stream and
-- acks (and deletes) it, atomically, only if this consumer owns it; appends the final event and drops the
-- checkpoint (protocol 4). An empty error stands for the task's remembered one (the errors hash), as when a
-- reclaim finds it past max deliveries. The dead-letter stream is trimmed to about its max length.
-- Returns 1, 0 when it is no longer pending, -1 when another consumer owns it.
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[8] then return -1 end
local entry = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
local fields = {}
if #entry > 0 then fields = entry[1][2] end
local err, task_id = ARGV[4], pairs_to_table(fields)['task_id']
if err == '' and task_id then err = redis.call('HGET', KEYS[4], task_id) or '' end
dead_letter(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], fields, ARGV[3], err,
            tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[10])
redis.call('DEL', KEYS[6])
final_event(KEYS[5], ARGV[9], ARGV[7], 'dead_lettered')
return 1
