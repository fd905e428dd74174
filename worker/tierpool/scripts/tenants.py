"""Lua sources of protocol 6: fairness inside a tier (``tiers[].tenantConcurrency``).

Per tier with a limit N, three keys (all with the pool's hash tag, so one slot): ``…:tenants:<tier>`` (hash
tenant -> admitted count), ``…:admitted:<tier>`` (hash entry id -> tenant: the admitted entries not yet known to be
finished) and ``…:held:<tier>`` (a sorted set, every score 0, ordered by member: ``<tenant>\\0<seq>\\0<fields
JSON>``, so a tenant's held tasks are one contiguous range in submit order, its oldest found with one
``ZRANGEBYLEX … LIMIT 0 1`` in O(log n), whatever other tenants hold), plus ``…:heldseq:<tier>`` (the counter of
``seq``). A task is admitted (added to the tier stream) only while its tenant has fewer than N admitted entries.

An admitted entry is finished when it is no longer pending and the group has delivered it (its id is at or
below the group's last-delivered-id): acked by any outcome (completion, dead letter, cancel) or by the escalator.
``RELEASE_TENANTS`` tests that state, so it needs no trust in its caller and is idempotent: a worker runs it for
the entries of each outcome batch right after the outcome scripts, in the same pipelined round trip, and the
lease holder's ``REPAIR_TENANTS`` finds whatever a crash in between left behind.
"""

from tierpool.scripts.core import _HELPERS, _REPLAYED_ENVELOPE

_TENANT_FUNCS = r"""
local function id_le(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if not ams or not bms then return false end
  ams, bms = tonumber(ams), tonumber(bms)
  if ams ~= bms then return ams < bms end
  return tonumber(aseq) <= tonumber(bseq)
end
local function finished(stream, group, id, last)
  if not id_le(id, last) then return false end
  return #redis.call('XPENDING', stream, group, id, id, 1) == 0
end
local function admit(stream, tenants, admitted, tenant, fields)
  local id = redis.call('XADD', stream, '*', unpack(fields))
  redis.call('HSET', admitted, id, tenant)
  redis.call('HINCRBY', tenants, tenant, 1)
  return id
end
local function oldest_held(held, tenant)
  return redis.call('ZRANGEBYLEX', held, '[' .. tenant .. '\0', '(' .. tenant .. '\1', 'LIMIT', 0, 1)
end
-- Admits the tenant's oldest held tasks while it has room (limit < 0: no limit), at most cap of them.
local function fill(stream, tenants, admitted, held, tenant, limit, cap)
  local count = tonumber(redis.call('HGET', tenants, tenant) or '0')
  local n = 0
  while n < cap and (limit < 0 or count < limit) do
    local m = oldest_held(held, tenant)
    if #m == 0 then break end
    redis.call('ZREM', held, m[1])
    admit(stream, tenants, admitted, tenant, cjson.decode(string.sub(m[1], #tenant + 19)))
    count = count + 1
    n = n + 1
  end
  return n
end
-- Admits the task when its tenant has room and nothing held before it; else holds it. Returns the entry id or
-- 'held'.
local function gate(stream, tenants, admitted, held, seq, tenant, limit, fields)
  local count = tonumber(redis.call('HGET', tenants, tenant) or '0')
  if (limit < 0 or count < limit) and #oldest_held(held, tenant) == 0 then
    return admit(stream, tenants, admitted, tenant, fields)
  end
  local n = redis.call('INCR', seq)
  redis.call('ZADD', held, 0, tenant .. '\0' .. string.format('%016d', n) .. '\0' .. cjson.encode(fields))
  fill(stream, tenants, admitted, held, tenant, limit, math.max(limit, 1))
  return 'held'
end
-- A throttled task's record (t:<paid>:<task_id>, protocol 7) is live until its task comes back; one still there a
-- minute past its paid time lost its task (a worker of an older release moved it through the gate): stale.
local function stale_pseudo(id, now)
  local paid = string.match(id, '^t:(%d+):')
  return paid ~= nil and tonumber(paid) + 60000 < now
end
local function release(tenants, admitted, id, tenant)
  redis.call('HDEL', admitted, id)
  if redis.call('HINCRBY', tenants, tenant, -1) <= 0 then redis.call('HDEL', tenants, tenant) end
end
"""
_TENANT_HELPERS = _HELPERS + _TENANT_FUNCS

# KEYS: stream, dedupe key, tenants, admitted, held, held seq. ARGV: dedupe ttl ms (0: no dedupe), limit, tenant,
# fields... A submit with a tenant to a tier with tenantConcurrency: enqueued once per task_id within the window
# (like SUBMIT_ONCE) when a dedupe ttl is given, then admitted or held. Returns the entry id, 'held', or nil for
# a duplicate.
SUBMIT_GATED = (
    _TENANT_HELPERS
    + r"""
if tonumber(ARGV[1]) > 0 and not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return false end
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
return gate(KEYS[1], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[3], tonumber(ARGV[2]), fields)
"""
)

# KEYS: stream, tenants, admitted, held. ARGV: group, limit, entry ids...
# Run after outcomes: each named entry that is admitted and finished stops counting for its tenant, and each
# such tenant's oldest held tasks are admitted while it has room. Returns {released, admitted}.
RELEASE_TENANTS = (
    _TENANT_HELPERS
    + r"""
if redis.call('HLEN', KEYS[3]) == 0 then return {0, 0} end
local info = group_info(KEYS[1], ARGV[1])
if not info then return {0, 0} end
local last, limit = info['last-delivered-id'], tonumber(ARGV[2])
local released, added, touched = 0, 0, {}
for i = 3, #ARGV do
  local tenant = redis.call('HGET', KEYS[3], ARGV[i])
  if tenant and finished(KEYS[1], ARGV[1], ARGV[i], last) then
    release(KEYS[2], KEYS[3], ARGV[i], tenant)
    released = released + 1
    touched[tenant] = true
  end
end
for tenant in pairs(touched) do
  added = added + fill(KEYS[1], KEYS[2], KEYS[3], KEYS[4], tenant, limit, math.max(limit, 1))
end
return {released, added}
"""
)

# KEYS: stream, tenants, admitted, held. ARGV: group, limit (-1: none, the tier lost its limit), cap.
# The lease holder's repair: releases every admitted entry that is finished (a worker that died between its
# outcome and its release, an escalated entry), recomputes every tenant's count from the admitted entries, then
# admits held tasks of every tenant with room (at most cap in all). Cost: one XPENDING per admitted entry (at
# most tenants x limit) and one ZRANGEBYLEX per waiting tenant. Returns {released, drift, admitted}: drift is the
# sum over tenants of |stored count - admitted entries| found before the recount (0 when nothing had leaked).
REPAIR_TENANTS = (
    _TENANT_HELPERS
    + r"""
local stream, tenants, admitted, held = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local info = group_info(stream, ARGV[1])
if not info then return {0, 0, 0} end
local last, limit, cap = info['last-delivered-id'], tonumber(ARGV[2]), tonumber(ARGV[3])
local stored = pairs_to_table(redis.call('HGETALL', tenants))
local flat = redis.call('HGETALL', admitted)
local counts, live, released, drift = {}, {}, 0, 0
local now = now_ms()
for i = 1, #flat, 2 do
  local id, tenant = flat[i], flat[i + 1]
  counts[tenant] = (counts[tenant] or 0) + 1
  if stale_pseudo(id, now) or finished(stream, ARGV[1], id, last) then
    redis.call('HDEL', admitted, id)
    released = released + 1
  else
    live[tenant] = (live[tenant] or 0) + 1
  end
end
for tenant, v in pairs(stored) do drift = drift + math.abs(tonumber(v) - (counts[tenant] or 0)) end
for tenant, c in pairs(counts) do if stored[tenant] == nil then drift = drift + c end end
redis.call('DEL', tenants)
for tenant, c in pairs(live) do redis.call('HSET', tenants, tenant, c) end
local added, cursor = 0, '-'
while added < cap do
  local m = redis.call('ZRANGEBYLEX', held, cursor, '+', 'LIMIT', 0, 1)
  if #m == 0 then break end
  local tenant = string.sub(m[1], 1, string.find(m[1], '\0', 1, true) - 1)
  added = added + fill(stream, tenants, admitted, held, tenant, limit, cap - added)
  cursor = '(' .. tenant .. '\1'
end
return {released, drift, added}
"""
)

# KEYS: dlq, target stream, tenants, admitted, held, held seq, then the task's result key, cancel marker and events
# stream. ARGV: dlq entry id, target tier, limit (-1: none). lua.REPLAY into a tier with a tenant limit: the same new
# life (the old record, marker and events go), and a task with a tenant goes through the gate like a submit
# (admitted or held). Returns the entry id or 'held'.
REPLAY_GATED = (
    _TENANT_HELPERS
    + _REPLAYED_ENVELOPE
    + r"""
local id
if ft['tenant'] and tonumber(ARGV[3]) >= 0 then
  id = gate(KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ft['tenant'], tonumber(ARGV[3]), out)
else
  id = redis.call('XADD', KEYS[2], '*', unpack(out))
end
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[7], KEYS[8], KEYS[9])
return id
"""
)

SCRIPTS = {"RELEASE_TENANTS": RELEASE_TENANTS, "REPAIR_TENANTS": REPAIR_TENANTS}
"""The scripts a worker loads (SUBMIT_GATED and REPLAY_GATED are the producer's and the CLI's)."""
