-- include: helpers/stream.lua helpers/adopted.lua helpers/where.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): the task's place is dropped with its outcome.
-- KEYS: stream, dlq, result key, errors hash, events, checkpoint. ARGV: group, id, reason, error, deliveries, tier,
-- ttl ms, consumer, events maxlen, dlq max length (0: none), and optionally cut bytes N (0 or absent: no cut),
-- the most fields kept M and the failed run's traceback (empty or absent: none; kept in the dead letter and the
-- result record as ``traceback``), and the task's id (empty or absent: none), written into the dead letter of an
-- entry that has no task_id field (an adopted stream's), so that its record is written, and the tier when it adopts
-- a stream ('' or absent: it does not): the dead letter of an entry that was not cut is then the completed envelope
-- (helpers/adopted.lua's adopted_entry: the payload, task_id and created_at a worker gives it), so it can be
-- replayed.
-- Moves one pending entry to the dead-letter stream and acks (and deletes) it, atomically, only if this consumer
-- owns it; appends the final event and drops the checkpoint (protocol 4). An empty error stands for the task's
-- remembered one (the errors hash), as when a reclaim finds it past max deliveries. The
-- dead-letter stream is trimmed to about its max length.
-- With a cut (an entry over the size limit): the dead letter keeps the entry's first M fields whose names have at
-- most N bytes, each value cut to its first N bytes, and a field ``truncated`` that says what is missing,
-- space-separated: ``<name>=<its bytes>`` for each value cut, and ``other=<count>:<bytes>`` for the fields left
-- out. A task_id that had to be cut is no task_id: it is left out too, and no result record is written.
-- Returns 1, 0 when it is no longer pending, -1 when another consumer owns it.
local function cut(fields, n, most)
  local out, cuts, others, other_bytes = {}, {}, 0, 0
  for i = 1, #fields, 2 do
    local k, v = fields[i], fields[i + 1]
    if #k > n or #out >= 2 * most then
      others, other_bytes = others + 1, other_bytes + #k + #v
    elseif #v > n then
      cuts[#cuts + 1] = k .. '=' .. tostring(#v)
      if k ~= 'task_id' then out[#out + 1] = k; out[#out + 1] = string.sub(v, 1, n) end
    else
      out[#out + 1] = k; out[#out + 1] = v
    end
  end
  if others > 0 then cuts[#cuts + 1] = 'other=' .. tostring(others) .. ':' .. tostring(other_bytes) end
  out[#out + 1] = 'truncated'; out[#out + 1] = table.concat(cuts, ' ')
  return out
end
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[8] then return -1 end
local entry = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
local fields = {}
if #entry > 0 then fields = entry[1][2] end
local n = tonumber(ARGV[11] or '0')
if n > 0 then
  fields = cut(fields, n, tonumber(ARGV[12]))
elseif (ARGV[15] or '') ~= '' then
  fields = adopted_entry(KEYS[1], ARGV[2], fields, ARGV[15])
end
local err, task_id = ARGV[4], pairs_to_table(fields)['task_id']
if not task_id and (ARGV[14] or '') ~= '' then
  task_id = ARGV[14]
  local named = {'task_id', task_id}
  for i = 1, #fields do named[#named + 1] = fields[i] end
  fields = named
end
if err == '' and task_id then err = redis.call('HGET', KEYS[4], task_id) or '' end
dead_letter(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], fields, ARGV[3], err,
            tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[10], ARGV[13] or '')
redis.call('DEL', KEYS[6])
where_key = KEYS[#KEYS]
drop_where(task_id)
final_event(KEYS[5], ARGV[9], ARGV[7], 'dead_lettered')
return 1
