-- KEYS: stream. ARGV: group, consumer, min idle ms, start cursor, count, max deliveries, then entry ids to adopt
-- (optional).
-- Scans pending entries idle at least that long from the cursor (XPENDING IDLE) and claims up to ``count`` of
-- them, skipping the entries this consumer owns itself: those are running here, or their outcome is on its way
-- (a worker never claims back, and runs twice, its own work). Those it skips are returned, so that the worker
-- can name the ones it does not hold (a read whose reply was lost in an outage) for adoption in the next call:
-- adopted ids are claimed like the others. A claimed entry past max deliveries is returned apart, as exhausted:
-- the worker, which owns it now, dead-letters it at once with DEAD_LETTER (protocol 4: that script declares the
-- task's keys and appends its final event); the claim that finds it exhausted counted a delivery that never
-- runs, so the dead letter records deliveries - 1 attempts. Should the worker die first, the next claim finds it
-- exhausted again. A pending entry whose stream entry is gone is dropped from the PEL and reported.
-- Returns {next cursor ('0-0' after the end), {{id, fields, deliveries}...}, deleted ids,
-- exhausted {{id, fields, deliveries}...}, own idle ids}.
local stream = KEYS[1]
local group, consumer, min_idle, maxd = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[6])
local count = tonumber(ARGV[5])
local claimed, deleted, exhausted, own, taken = {}, {}, {}, {}, 0
local function take(id, delivered)
  local exists = redis.call('XRANGE', stream, id, id)
  if #exists == 0 then
    redis.call('XACK', stream, group, id)
    deleted[#deleted + 1] = id
    return
  end
  local c = redis.call('XCLAIM', stream, group, consumer, min_idle, id)
  if #c == 0 then return end
  taken = taken + 1
  local fields = c[1][2]
  -- protocol 5: deliveries counted before this entry (it came back through the due-time index)
  local carried = 0
  for i = 1, #fields, 2 do
    if fields[i] == 'attempts' then carried = tonumber(fields[i + 1]) or 0 end
  end
  local deliveries = delivered + 1 + carried
  if deliveries > maxd then
    exhausted[#exhausted + 1] = {id, fields, deliveries}
  else
    claimed[#claimed + 1] = {id, fields, delivered + 1}  -- this entry's count: the worker adds the carried ones
  end
end
for i = 7, #ARGV do
  local p = redis.call('XPENDING', stream, group, ARGV[i], ARGV[i], 1)
  if #p > 0 and p[1][2] == consumer and taken < count then take(ARGV[i], p[1][4]) end
end
local start = '-'
if ARGV[4] ~= '0-0' then start = '(' .. ARGV[4] end
local scan_limit = math.max(count, 64)
local scanned = redis.call('XPENDING', stream, group, 'IDLE', min_idle, start, '+', scan_limit)
local cursor = '0-0'
for _, p in ipairs(scanned) do
  if taken >= count then break end
  cursor = p[1]
  if p[2] ~= consumer then take(p[1], p[4]) else own[#own + 1] = p[1] end
end
if #scanned < scan_limit and taken < count then cursor = '0-0' end
return {cursor, claimed, deleted, exhausted, own}
