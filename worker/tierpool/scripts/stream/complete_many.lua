-- include: helpers/stream.lua helpers/where.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): the task's place is dropped with its outcome.
-- KEYS: stream, errors hash, then four keys a task: result, events, checkpoint, cancel marker.
-- ARGV: group, consumer, ttl ms, forget errors 0/1, events maxlen, then three a task: entry id, task_id, result
-- JSON (ARGV[6 + 3k], ARGV[7 + 3k], ARGV[8 + 3k] for the k-th task, k from 0).
-- Completes a whole batch of one stream in one call, but only the entries this consumer still owns: an entry
-- another worker has reclaimed is left to that worker, and one already acked writes nothing. A task whose cancel
-- marker is set (protocol 4: it was cancelled while it ran) gets a cancelled record instead of its result. Each
-- written outcome appends its final event and drops the task's checkpoint. Acked entries are deleted from the
-- stream (but the group's last delivered one: see delete_acked).
-- Returns per entry 1 (acked, record written), 0 (no longer pending) or -1 (owned by another consumer).
local group, consumer, ttl, forget, maxlen = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5]
local acked, done = {}, {}
where_key = KEYS[#KEYS]
for k = 0, (#ARGV - 5) / 3 - 1 do
  local id, task_id, record = ARGV[6 + 3 * k], ARGV[7 + 3 * k], ARGV[8 + 3 * k]
  local result, events, checkpoint, marker = KEYS[3 + 4 * k], KEYS[4 + 4 * k], KEYS[5 + 4 * k], KEYS[6 + 4 * k]
  local p = redis.call('XPENDING', KEYS[1], group, id, id, 1)
  local ok = 0
  if #p > 0 and p[1][2] ~= consumer then ok = -1 end
  if #p > 0 and p[1][2] == consumer then
    ok = redis.call('XACK', KEYS[1], group, id)
    done[#done + 1] = id
    local status = 'succeeded'
    if redis.call('EXISTS', marker) == 1 then
      status = 'cancelled'
      record = cjson.encode({task_id = task_id, status = status, worker = consumer, attempts = tonumber(p[1][4]),
        reason = 'cancelled while running; its result was discarded', finished_at = now_ms()})
    end
    redis.call('SET', result, record, 'PX', ttl)
    redis.call('DEL', checkpoint)
    drop_where(task_id)
    final_event(events, maxlen, ttl, status)
    if forget then redis.call('HDEL', KEYS[2], task_id) end
  end
  acked[#acked + 1] = ok
end
if #done > 0 then delete_acked(KEYS[1], last_delivered(KEYS[1], group), done) end
return acked
