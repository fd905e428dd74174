-- include: helpers/stream.lua helpers/due.lua helpers/where.lua helpers/tenants.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- MOVE_DUE (protocol 7): due tasks of the due-time index back into their tier streams, through the tenant gate on
-- tiers with tenantConcurrency, and stranded (kept, not dead-lettered) when they name a tier the moving worker's
-- spec does not have.
-- A tenant's count covers its admitted entries and its throttled tasks: a task waiting for its rate limit
-- reservation keeps its slot (THROTTLE moves its admitted record to t:<paid>:<task_id>, and this script binds it to
-- the new entry, without the gate). A task waiting for a delay or a long backoff holds no slot, and passes its
-- tenant's gate again when it comes due. A new task coming due (a delayed submit) is gated like a submit: admitted
-- when its tenant has room and nothing held, else held at the back of its tenant's queue. A task coming back (a
-- retry, a deferral, a throttle: it carries ``attempts`` or ``paid``) had been admitted before anything its tenant
-- holds now, so it is admitted when its tenant has room, else held at the front of its tenant's queue: its held
-- member's seq is ``-`` and 15 digits (its re-entry time in ms and its rank in the mover's call, two digits), which
-- sorts before every submit's 16-digit seq (``-`` < ``0``), and in re-entry order among such tasks (past 99 in one
-- call, by envelope).
--
-- KEYS: due set, throttled set, stranded set, dlq, re-entry counts, tier streams (n), then per tier its tenant
-- keys (tenants, admitted, queued, held, held seq: 5n). ARGV: max count, ms until a stranded task is tried again,
-- then per tier its name and its tenantConcurrency (-1: none), in KEYS order.
-- Moves every task whose due time has come (Redis' clock) out of the due, throttled and stranded sets, each one
-- by exactly one call however many workers race (ZREM and the move in one script): into its tier stream (XADD),
-- or, for a task with a tenant on a limited tier, through the gate (admitted into the stream, or held). Tasks
-- coming back (``attempts`` or ``paid``) that enter their stream are counted per tier in the re-entry hash, so
-- that the scaler does not take them for arrivals. A member naming a tier this call was not given (a tier renamed
-- or removed while workers of both specs run) is stranded: kept in the stranded set and tried again later, by any
-- worker. Only a member that does not decode goes to the dead-letter stream. Returns {count taken, ms until the
-- next task is due (-1: none scheduled), count stranded by this call}.
-- A due task of a limited tier with a tenant: gated (new work) or admitted-or-held at its tenant's front (back).
-- ``order`` (the task's rank in this call, at most 99 counted) keeps re-entry order within one call.
local function come_in(g, tenant, limit, fields, back, now, order)
  if not back then return gate(g, tenant, limit, fields) end
  if occupied(g, tenant) < limit then return admit(g.stream, g.tenants, g.admitted, tenant, fields) end
  hold(g.held, tenant, '-' .. string.format('%015d', now * 100 + math.min(order, 99)), fields)
  return 'held'
end
-- A paid task coming back whose tenant slot THROTTLE kept (pseudo entry t:<paid>:<task_id>): bound to its new
-- entry, without the gate, count unchanged. nil when there is no such record (then it goes through the gate).
local function rebind(stream, admitted, tenant, ft, fields)
  if not ft['paid'] or not ft['task_id'] then return nil end
  local pseudo = 't:' .. ft['paid'] .. ':' .. ft['task_id']
  if redis.call('HGET', admitted, pseudo) ~= tenant then return nil end
  redis.call('HDEL', admitted, pseudo)
  local id = redis.call('XADD', stream, '*', unpack(fields))
  redis.call('HSET', admitted, id, tenant)
  put_where(fields, in_stream(stream, id))
  return id
end
local function envelope_of(member)
  local ok, item = pcall(cjson.decode, member)
  if ok and type(item) == 'table' and type(item[1]) == 'string' and type(item[2]) == 'table' then return item end
  return nil
end
local now, limit, taken, stranded = now_ms(), tonumber(ARGV[1]), 0, 0
where_key = KEYS[#KEYS]
local n = (#ARGV - 2) / 2
local tiers = {}
for i = 1, n do
  local b = 5 + n + 5 * (i - 1)
  local g = {stream = KEYS[5 + i], tenants = KEYS[b + 1], admitted = KEYS[b + 2], queued = KEYS[b + 3],
             held = KEYS[b + 4], seq = KEYS[b + 5]}
  tiers[ARGV[1 + 2 * i]] = {KEYS[5 + i], tonumber(ARGV[2 + 2 * i]), g}
end
local function place(name, fields)
  local tier, ft = tiers[name], pairs_to_table(fields)
  local back = (ft['attempts'] or ft['paid']) and true or false
  local id
  if ft['tenant'] and tier[2] >= 0 then
    id = rebind(tier[1], tier[3].admitted, ft['tenant'], ft, fields)
      or come_in(tier[3], ft['tenant'], tier[2], fields, back, now, taken)
  else
    id = redis.call('XADD', tier[1], '*', unpack(fields))
    put_where(fields, in_stream(tier[1], id))
  end
  if back and id ~= 'held' then redis.call('HINCRBY', KEYS[5], name, 1) end
end
for k = 1, 3 do
  if limit - taken <= 0 then break end
  local items = redis.call('ZRANGEBYSCORE', KEYS[k], '-inf', now, 'LIMIT', 0, limit - taken)
  for _, member in ipairs(items) do
    redis.call('ZREM', KEYS[k], member)
    local item = envelope_of(member)
    if not item then
      redis.call('XADD', KEYS[4], '*', 'reason', 'scheduled task is not an envelope', 'scheduled', member,
        'dead_lettered_at', tostring(now))
    elseif tiers[item[1]] then
      place(item[1], item[2])
    else
      redis.call('ZADD', KEYS[3], now + tonumber(ARGV[2]), member)
      put_where(item[2], in_set(KEYS[3], now + tonumber(ARGV[2])))
      stranded = stranded + 1
    end
    taken = taken + 1
  end
end
local wait = -1
for k = 1, 3 do
  local first = redis.call('ZRANGE', KEYS[k], 0, 0, 'WITHSCORES')
  if #first > 0 then
    local left = math.max(tonumber(first[2]) - now, 0)
    if wait < 0 or left < wait then wait = left end
  end
end
return {taken, wait, stranded}
