-- include: helpers/stream.lua helpers/where.lua
-- KEYS: parked hash (...:parked:<task_id>), ...:gathering, the parent's tier stream, each child's result key,
-- ...:where. ARGV: task_id, children JSON (as the parked hash holds it), keep (ms).
-- Resumes a parked parent exactly once: when it is parked with exactly these children and this stream, and every
-- child has a result record, its fields go back into its stream and the parking state is removed, in one step.
-- Run by the worker that wrote a child's outcome, and by the lease holder's sweep for every parked parent.
-- Returns 1 (resumed), 2 (a child has no outcome yet), 0 when the task is not parked, -2 when it is parked with
-- other children or another stream than the call names (read the parked hash again). While a child has no outcome,
-- the records of those that have one are kept at least ``keep`` ms longer (PEXPIRE GT), so that none expires while
-- its parent waits for the others: the sweep runs this every sweepInterval.
local stream = redis.call('HGET', KEYS[1], 'stream')
if not stream then return 0 end
if stream ~= KEYS[3] or redis.call('HGET', KEYS[1], 'children') ~= ARGV[2] then return -2 end
local waiting = false
for i = 4, #KEYS - 1 do
  if redis.call('EXISTS', KEYS[i]) == 0 then waiting = true end
end
if waiting then
  local keep = tonumber(ARGV[3] or '0') or 0
  if keep > 0 then
    for i = 4, #KEYS - 1 do redis.call('PEXPIRE', KEYS[i], keep, 'GT') end
  end
  return 2
end
local fields = cjson.decode(redis.call('HGET', KEYS[1], 'fields'))
local id = redis.call('XADD', KEYS[3], '*', unpack(fields))
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
where_key = KEYS[#KEYS]
put_where(fields, in_stream(KEYS[3], id))
return 1
