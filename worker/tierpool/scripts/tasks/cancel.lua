-- include: helpers/stream.lua helpers/where.lua helpers/tenants.lua helpers/placed.lua
-- CANCEL: a producer's cancel, in one atomic step (protocol 8). KEYS: result, cancel marker, events, checkpoint,
-- errors hash, due, throttled, stranded, then per tier its stream and held set (2n), then ...:where.
-- ARGV: task_id, marker ttl ms, result ttl ms, events maxlen, group, parking consumer, then per tier its name, in
-- KEYS order. Returns {'finished', record}, {'cancelled'}, {'waiting'}, {'running'} or {'marked'}, as follows.
-- A task with a result record is finished and nothing is written: {'finished', record}. Otherwise the marker is
-- set (as before; it also cancels a copy of the task within its TTL), and the task-id index says where the task is:
-- - in the due-time index, the throttled or stranded set, or a held set: it is taken out and its cancelled record
--   and final event are written at once: {'cancelled'}. A throttled task's tenant slot is not released here: a
--   producer may not write the tenant counts (helpers/tenants.lua), so the lease holder's REPAIR_TENANTS
--   releases it, and admits the tenant's next held task, within a sweep;
-- - an entry of a tier stream not yet delivered, or parked for a retry: the worker that takes it writes its
--   record (at take time): {'waiting'}; an entry a worker owns: that worker stops it: {'running'};
-- - nowhere (a plain XADD by another producer), a place older scripts left stale (dropped here), or a tier this
--   caller was not given: {'marked'}, and the caller looks for the task by scanning (tierpool.client.cancels).
local task_id, group, parking = ARGV[1], ARGV[5], ARGV[6]
local record = redis.call('GET', KEYS[1])
if record then return {'finished', record} end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
where_key = KEYS[#KEYS]
local place = redis.call('HGET', where_key, task_id)
if not place then return {'marked'} end
local tiers = {}
for i = 1, #ARGV - 6 do
  local b = 8 + 2 * (i - 1)
  tiers[ARGV[6 + i]] = {stream = KEYS[b + 1], held = KEYS[b + 2]}
end
tiers = by_stream_suffix(tiers)
local sets = {due = KEYS[6], throttled = KEYS[7], stranded = KEYS[8]}

local function finish(tier, fields)
  local attempts = tonumber(field_of(fields, 'attempts') or '0') or 0
  redis.call('SET', KEYS[1], cjson.encode({task_id = task_id, status = 'cancelled', tier = tier, attempts = attempts,
    reason = 'cancelled before it started', finished_at = now_ms()}), 'PX', ARGV[3])
  redis.call('DEL', KEYS[4])
  redis.call('HDEL', KEYS[5], task_id)
  drop_where(task_id)
  final_event(KEYS[3], ARGV[4], ARGV[3], 'cancelled')
  return {'cancelled'}
end
local state, key, member, item = placed(task_id, place, tiers, sets, group, parking)
if state == 'running' or state == 'waiting' then return {state} end
if state == 'set' or state == 'held' then
  redis.call('ZREM', key, member)
  return finish(item[1], item[2])
end
if state == nil then drop_where(task_id) end  -- stale: the scan finds the task, wherever it went
return {'marked'}
