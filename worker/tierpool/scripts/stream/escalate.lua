-- include: helpers/stream.lua helpers/adopted.lua helpers/where.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: source stream, target stream. ARGV: group, escalator consumer, now ms, max count, source tier, target tier,
-- max target backlog (-1: none), the source tier's escalateAfter in ms (-1: none), '1' when the source tier adopts
-- a stream (its entries' own ``priority_ttl_s`` count) else '0'.
-- Takes the oldest undelivered entries that are due (helpers/adopted.lua: the tier's escalateAfter, or an adopted
-- entry's own ``priority_ttl_s``, counted from when it entered the stream; the walk stops at the first not due)
-- through the group (so the source lag stays valid), re-adds them one tier up with the same task_id and created_at
-- (an entry of a tier that adopts a stream is completed first, helpers/adopted.lua's adopted_entry: the copy is an
-- envelope, whatever tier it lands in), and acks (and deletes: see delete_acked) them.
-- With a max target backlog N, moves only as many as keep the target's waiting count below N; with 0, one entry
-- and only when the target has nothing waiting. Returns the count.
local src, dst = KEYS[1], KEYS[2]
where_key = KEYS[#KEYS]
local group, escalator, now, default = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[8])
local own_ttls = ARGV[9] == '1'
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
-- pages of 1, 2, 4 ... 64 entries: the walk reads at most one entry it does not move, and few when none is due
local after, due, page, stop = '(' .. info['last-delivered-id'], 0, 1, false
while due < limit and not stop do
  local want = math.min(page, limit - due)
  local entries = redis.call('XRANGE', src, after, '+', 'COUNT', want)
  for _, e in ipairs(entries) do
    if not escalation_due(e[1], pairs_to_table(e[2]), now, default, own_ttls) then stop = true; break end
    due = due + 1
  end
  if #entries < want then stop = true end
  if not stop then after = '(' .. entries[#entries][1] end
  page = math.min(page * 2, 64)
end
if due == 0 then return 0 end
local r = redis.call('XREADGROUP', 'GROUP', group, escalator, 'COUNT', due, 'STREAMS', src, '>')
local moved, done = 0, {}
for _, e in ipairs(r[1][2]) do
  local fields = e[2]
  if own_ttls then fields = adopted_entry(src, e[1], fields, ARGV[5]) end
  local ft = pairs_to_table(fields)
  local out = {}
  for i = 1, #fields, 2 do
    local k = fields[i]
    if k ~= 'tier' and k ~= 'escalated_from' then out[#out + 1] = k; out[#out + 1] = fields[i + 1] end
  end
  if not ft['task_id'] then out[#out + 1] = 'task_id'; out[#out + 1] = adopted_task_id(src, e[1], ft) end
  if not ft['created_at'] then out[#out + 1] = 'created_at'; out[#out + 1] = string.match(e[1], '^(%d+)-') end
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
