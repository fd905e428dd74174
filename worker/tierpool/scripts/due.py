"""Lua sources of protocol 5: the due-time index (delayed tasks, long retries and deferrals) and the pool-wide
rate limits (GCRA buckets with reservations). Every key a script touches is in its KEYS, and every key carries
the pool's hash tag. Due-ness is always judged on Redis' clock (``TIME`` inside the script).

A scheduled task is one member of a sorted set (``…:due`` or ``…:throttled``) scored by its due time in ms. The
member is the task itself: the JSON array ``[tier, [field, value, ...]]`` of its envelope, so moving it back is
one ``ZREM`` plus one ``XADD`` in one script, and a due task is moved by exactly one script call.
"""

from tierpool.scripts.core import _HELPERS

_DUE_FUNCS = r"""
-- the envelope's fields with attempts/due/paid replaced: attempts counted so far (-1: none, a new task), the due
-- time, and (for a rate limit reservation) the time its bucket was paid for. A task that carries ``attempts`` or
-- ``paid`` is coming back, not new work (see MOVE_DUE's re-entry count).
local function scheduled_member(tier, fields, attempts, due, paid)
  local out = {}
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
"""
_DUE_HELPERS = _HELPERS + _DUE_FUNCS

# KEYS: due set, tier stream, dedupe key. ARGV: dedupe ttl ms (0: no dedupe), delay ms, not-before ms (0: none),
# tier, gated (1: the task goes through its tenant's gate, so it always enters the due set and MOVE_DUE admits
# or holds it), envelope fields... Schedules a task for max(now + delay, not-before) on Redis' clock; a time
# already reached adds it to its stream at once (unless gated). With a dedupe ttl, enqueues once per task_id
# within the window. Returns the stream entry id, 'due:<ms>', or nil for a duplicate.
SCHEDULE = (
    _DUE_HELPERS
    + r"""
if tonumber(ARGV[1]) > 0 and not redis.call('SET', KEYS[3], '1', 'NX', 'PX', ARGV[1]) then return false end
local now = now_ms()
local due = math.max(now + tonumber(ARGV[2]), tonumber(ARGV[3]))
local fields = {}
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
if due <= now and ARGV[5] ~= '1' then return redis.call('XADD', KEYS[2], '*', unpack(fields)) end
redis.call('ZADD', KEYS[1], due, scheduled_member(ARGV[4], fields, -1, due, nil))
return 'due:' .. due
"""
)

# KEYS: stream, due set, errors hash, deferrals counter. ARGV: group, consumer, entry id, task_id, error, mode
# ('retry' or 'defer'), delay ms, fallback delay ms, max deferrals, counter ttl ms, tier.
# A retry or RetryAfter longer than claimIdle: only the owner may do this. Acks the entry and schedules the task
# in the due set, in one step, carrying in its envelope the deliveries counted so far (``attempts``), so
# maxDeliveries and the dead-letter rules hold across the move. A 'defer' within the task's deferrals counts no
# delivery; past them it is a failed attempt with the fallback delay. Returns 1 (scheduled), 2 (deferral past
# its budget: a failed attempt), 0 (no longer pending), -1 (another consumer owns it).
RESCHEDULE = (
    _DUE_HELPERS
    + r"""
local owned, status = owned_entry(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if not owned then return status end
local attempts, delay = owned[1], tonumber(ARGV[7])
if ARGV[6] == 'defer' then
  local n = redis.call('INCR', KEYS[4])
  redis.call('PEXPIRE', KEYS[4], ARGV[10])
  if n <= tonumber(ARGV[9]) then
    attempts = attempts - 1
  else
    delay, status = tonumber(ARGV[8]), 2
    redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
  end
else
  redis.call('HSET', KEYS[3], ARGV[4], ARGV[5])
end
local due = now_ms() + delay
redis.call('ZADD', KEYS[2], due, scheduled_member(ARGV[11], owned[2], math.max(attempts, 0), due, nil))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
return status
"""
)

# KEYS: stream, throttled set, bucket hash, the tier's admitted hash. ARGV: group, consumer, entry id, tier, ms per
# task, burst (tasks), ms per token (0: no token bucket), token burst, cost (tokens), tenant ('' none), task_id.
# GCRA with reservations, on Redis' clock. Only the consumer that owns the pending entry draws. The task may
# start at s = the earliest time both buckets allow it; both buckets are charged as of s. s now: returns 0 and
# the worker runs it. s later: the entry is acked and the task waits in the throttled set until s, marked paid
# (``paid``: it runs then without drawing again), and the delivery it got here is not counted. Returns 0 (run
# now), the wait in ms (throttled), or -1 (another consumer owns the entry), -2 (no longer pending); nothing is
# charged then. A throttled task of a gated tenant keeps its slot (protocol 7): its admitted record moves from
# the entry id to the pseudo entry ``t:<paid>:<task_id>``, count unchanged, and MOVE_DUE binds it back.
THROTTLE = (
    _DUE_HELPERS
    + r"""
local now = now_ms()
local per, burst = tonumber(ARGV[5]), tonumber(ARGV[6])
local per_token, token_burst, cost = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
local tat = tonumber(redis.call('HGET', KEYS[3], 'tat') or '0') or 0
local tat_t = tonumber(redis.call('HGET', KEYS[3], 'tokens_tat') or '0') or 0
local start = math.max(now, tat + per - burst * per)
if per_token > 0 then
  -- a cost above the token burst starts when the bucket is full, and is charged in full
  start = math.max(start, tat_t + (math.min(cost, token_burst) - token_burst) * per_token)
end
start = math.ceil(start)
-- only the owner draws (a call retried after a lost reply finds its entry acked and throttled already)
local owned, status = owned_entry(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if not owned then return (status == -1) and -1 or -2 end
tat = math.max(tat, start) + per
local horizon = tat
redis.call('HSET', KEYS[3], 'tat', string.format('%.3f', tat))
if per_token > 0 then
  tat_t = math.max(tat_t, start) + cost * per_token
  redis.call('HSET', KEYS[3], 'tokens_tat', string.format('%.3f', tat_t))
  horizon = math.max(horizon, tat_t)
end
redis.call('PEXPIRE', KEYS[3], math.ceil(horizon - now) + 60000)
if start <= now then return 0 end
redis.call('ZADD', KEYS[2], start, scheduled_member(ARGV[4], owned[2], math.max(owned[1] - 1, 0), start, start))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
if ARGV[10] ~= '' and redis.call('HGET', KEYS[4], ARGV[3]) == ARGV[10] then
  redis.call('HDEL', KEYS[4], ARGV[3])
  redis.call('HSET', KEYS[4], 't:' .. tostring(start) .. ':' .. ARGV[11], ARGV[10])
end
return start - now
"""
)

SCRIPTS = {"SCHEDULE": SCHEDULE, "RESCHEDULE": RESCHEDULE, "THROTTLE": THROTTLE}
"""MOVE_DUE is in tierpool.scripts.move_due (it goes through the tenant gate too)."""
