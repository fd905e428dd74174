-- helpers/where.lua (after helpers/stream.lua, before helpers/tenants.lua): the task-id index ...:where, a hash
-- task_id -> where the task is now, so that a cancel finds a task with one HGET, however long the streams are:
--   stream:<tier>:<entry id>   an entry of that tier's stream (waiting, running or parked for a retry)
--   due:<ms> | throttled:<ms> | stranded:<ms>   a member of that sorted set, with that score
--   held:<tier>:<tenant>\0<seq>   the held member of that tier starting with <tenant>\0<seq>\0
-- Every script that moves a task writes its new place in the same script, and the final outcomes drop it, so the
-- hash holds the tasks that have not finished. A script that writes it names ...:where as its last key and sets
-- where_key to it before it calls these functions (or the tenant helpers, which call them); where_key nil writes
-- nothing. A task without a task_id field, or enqueued by a plain XADD, has no place in it.
local where_key = nil
local function field_of(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil
end
-- the last part of a key (a tier stream or held key ends with its tier, ...:due with due)
local function key_suffix(key)
  return string.match(key, '([^:]+)$')
end
local function put_where(fields, place)
  local task_id = field_of(fields, 'task_id')
  if where_key and task_id then redis.call('HSET', where_key, task_id, place) end
end
local function in_stream(stream, id)
  return 'stream:' .. key_suffix(stream) .. ':' .. id
end
local function in_set(key, score)
  return key_suffix(key) .. ':' .. string.format('%d', score)
end
local function drop_where(task_id)
  if where_key and task_id then redis.call('HDEL', where_key, task_id) end
end
