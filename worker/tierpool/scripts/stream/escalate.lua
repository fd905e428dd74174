-- include: helpers/stream.lua helpers/where.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: source stream, target stream. ARGV: group, escalator consumer, cutoff ms, max count, source tier,
-- target tier, max target backlog (-1: none). Takes undelivered entries older than the cutoff through the group
-- (so the source lag stays valid), re-adds them one tier up with the same task_id and created_at, and acks (and
-- deletes: see delete_acked) them.
-- With a max target backlog N, moves only as many as keep the target's waiting count below N; with 0, one entry
-- and only when the target has nothing waiting. Returns the count.
local src, dst = KEYS[1], KEYS[2]
where_key = KEYS[#KEYS]
local group, escalator, cutoff = ARGV[1], ARGV[2], ARGV[3]
local info = group_info(src, group)
if not info then return 0 end
local limit = tonumber(ARGV[4])
local max_target = tonumber(ARGV[7])
if max_target >= 0 then
  local target = group_info(dst, group)
  local waiting = redis.call('XLEN', dst)
  if target and target['lag'] then waiting = target['lag'] end
  -- N keeps the target below N waiting (at most N - 1 - waiting move); 0: one task, only into an empty target
  local room = max_target - 1 - waiting
  if max_target == 0 then room = (waiting == 0) and 1 or 0 end
  limit = math.min(limit, room)
  if limit <= 0 then return 0 end
end
local candidates = redis.call('XRANGE', src, '(' .. info['last-delivered-id'], cutoff .. '-18446744073709551615',
                              'COUNT', limit)
if #candidates == 0 then return 0 end
local r = redis.call('XREADGROUP', 'GROUP', group, escalator, 'COUNT', #candidates, 'STREAMS', src, '>')
local moved, done = 0, {}
for _, e in ipairs(r[1][2]) do
  local ft = pairs_to_table(e[2])
  local out = {}
  for i = 1, #e[2], 2 do
    local k = e[2][i]
    if k ~= 'tier' and k ~= 'escalated_from' then out[#out + 1] = k; out[#out + 1] = e[2][i + 1] end
  end
  out[#out + 1] = 'tier'; out[#out + 1] = ARGV[6]
  out[#out + 1] = 'escalated_from'; out[#out + 1] = ft['escalated_from'] or ARGV[5]
  put_where(out, in_stream(dst, redis.call('XADD', dst, '*', unpack(out))))
  redis.call('XACK', src, group, e[1])
  done[#done + 1] = e[1]
  moved = moved + 1
end
delete_acked(src, last_delivered(src, group), done)
redis.call('XGROUP', 'DELCONSUMER', src, group, escalator)
return moved
