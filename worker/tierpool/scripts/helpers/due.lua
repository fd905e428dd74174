-- helpers/due.lua (after helpers/stream.lua), protocol 5: the due-time index (delayed tasks, long retries and
-- deferrals) and the pool-wide rate limits (GCRA buckets with reservations). Due-ness is always judged on Redis'
-- clock (TIME inside the script).
-- A scheduled task is one member of a sorted set (...:due or ...:throttled) scored by its due time in ms. The member is
-- the task itself: the JSON array [tier, [field, value, ...]] of its envelope, so moving it back is one ZREM plus
-- one XADD in one script, and a due task is moved by exactly one script call.
-- the envelope's fields with attempts/due/paid replaced: attempts counted so far (-1: none, a new task), the due
-- time, and (for a rate limit reservation) the time its bucket was paid for. A task that carries ``attempts`` or
-- ``paid`` is coming back, not new work (see MOVE_DUE's re-entry count). ``task_id`` and ``entry_id`` (optional):
-- for an entry without a task_id (an adopted stream's), the id a worker gave it (helpers/adopted.lua), and the
-- entry's id, whose time is its created_at when it has none: written into the member so the task keeps both.
local function scheduled_member(tier, fields, attempts, due, paid, task_id, entry_id)
  local out, ft = {}, pairs_to_table(fields)
  if task_id and task_id ~= '' and not ft['task_id'] then out = {'task_id', task_id} end
  if entry_id and not ft['created_at'] then
    out[#out + 1] = 'created_at'; out[#out + 1] = string.match(entry_id, '^(%d+)-')
  end
  for i = 1, #fields, 2 do
    local k = fields[i]
    if k ~= 'attempts' and k ~= 'due' and k ~= 'paid' then out[#out + 1] = k; out[#out + 1] = fields[i + 1] end
  end
  if attempts >= 0 then out[#out + 1] = 'attempts'; out[#out + 1] = tostring(attempts) end
  out[#out + 1] = 'due'; out[#out + 1] = tostring(due)
  if paid then out[#out + 1] = 'paid'; out[#out + 1] = tostring(paid) end
  return cjson.encode({tier, out})
end
-- the owner's pending entry: {deliveries of this entry + attempts carried in its envelope, fields} or a status
local function owned_entry(stream, group, consumer, id)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  if #p == 0 then return nil, 0 end
  if p[1][2] ~= consumer then return nil, -1 end
  local entry = redis.call('XRANGE', stream, id, id)
  if #entry == 0 then
    redis.call('XACK', stream, group, id)
    return nil, 0
  end
  local fields = entry[1][2]
  local carried = tonumber(pairs_to_table(fields)['attempts'] or '0') or 0
  return {tonumber(p[1][4]) + carried, fields}, 1
end
