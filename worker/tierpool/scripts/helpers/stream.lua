-- helpers/stream.lua: functions shared by the stream protocol's scripts (every script that includes a helper
-- includes this one first).
local function pairs_to_table(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end
local function group_info(stream, group)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  if not ok then return nil end
  for _, g in ipairs(groups) do
    local info = pairs_to_table(g)
    if info['name'] == group then return info end
  end
  return nil
end
local function next_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return ms .. '-' .. tostring(tonumber(seq) + 1)
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The final event goes only to an event stream that exists (the task reported progress, or someone follows it:
-- a follower creates the stream before it reads the result record), so unwatched tasks cost nothing extra.
local function final_event(events, maxlen, ttl, status)
  if redis.call('EXISTS', events) == 0 then return end
  redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'type', 'outcome', 'status', status, 'at', tostring(now_ms()))
  redis.call('PEXPIRE', events, ttl)
end
-- The group's last delivered id ('0-0' without the group).
local function last_delivered(stream, group)
  local info = group_info(stream, group)
  return (info and info['last-delivered-id']) or '0-0'
end
-- Deletes acknowledged entries (``ids``) from their stream as they are acked, so that retention never waits for
-- the slowest task; all but the group's last delivered one (``last``): a deletion there makes XINFO GROUPS report
-- the lag as nil (the scaler's exact backlog) until the group has read the stream's newest entry. That one goes
-- with the lease holder's sweep (DELETE_ACKED) once the group has read past it.
local function delete_acked(stream, last, ids)
  local doomed = {}
  for _, id in ipairs(ids) do
    if id ~= last then doomed[#doomed + 1] = id end
  end
  if #doomed > 0 then redis.call('XDEL', stream, unpack(doomed)) end
end
-- ``maxlen``: the dead-letter stream keeps about this many entries (XADD MAXLEN ~: cheap, whole nodes only);
-- 0: no length limit. ``trace``: the failed run's traceback, as the field ``traceback`` of the dead letter and of
-- the result record (none when empty).
local function dead_letter(stream, dlq, result_key, errors, group, id, fields, reason, err, deliveries, tier, ttl,
                           maxlen, trace)
  local ft = pairs_to_table(fields)
  local out = {'XADD', dlq}
  if tonumber(maxlen) > 0 then out[#out + 1] = 'MAXLEN'; out[#out + 1] = '~'; out[#out + 1] = maxlen end
  out[#out + 1] = '*'
  for i = 1, #fields do out[#out + 1] = fields[i] end
  local extra = {'reason', reason, 'error', err or '', 'deliveries', tostring(deliveries),
                 'source_tier', tier, 'source_id', id, 'dead_lettered_at', tostring(now_ms())}
  if trace ~= '' then extra[#extra + 1] = 'traceback'; extra[#extra + 1] = trace end
  for i = 1, #extra do out[#out + 1] = extra[i] end
  redis.call(unpack(out))
  redis.call('XACK', stream, group, id)
  delete_acked(stream, last_delivered(stream, group), {id})
  if ft['task_id'] then
    redis.call('HDEL', errors, ft['task_id'])
    local record = cjson.encode({task_id = ft['task_id'], status = 'dead_lettered', tier = tier,
      error = (err ~= '' and err) or reason, reason = reason, attempts = deliveries, finished_at = now_ms(),
      traceback = (trace ~= '' and trace) or nil})
    redis.call('SET', result_key, record, 'PX', ttl)
  end
end
