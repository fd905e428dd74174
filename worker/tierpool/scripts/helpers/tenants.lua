-- helpers/tenants.lua (after helpers/stream.lua and helpers/where.lua), protocol 6: fairness inside a tier
-- (tiers[].tenantConcurrency).
-- Per tier with a limit N, three keys (all with the pool's hash tag, so one slot): ...:tenants:<tier> (hash tenant ->
-- admitted count), ...:admitted:<tier> (hash entry id -> tenant: the admitted entries not yet known to be finished)
-- and ...:held:<tier> (a sorted set, every score 0, ordered by member: <tenant>\0<seq>\0<fields JSON>, so a tenant's
-- held tasks are one contiguous range in submit order, its oldest found with one ZRANGEBYLEX ... LIMIT 0 1 in
-- O(log n), whatever other tenants hold), plus ...:heldseq:<tier> (the counter of seq). A task is admitted (added to
-- the tier stream) only while its tenant has fewer than N admitted entries.
-- An admitted entry is finished when it is no longer pending and the group has delivered it (its id is at or below
-- the group's last-delivered-id): acked by any outcome (completion, dead letter, cancel) or by the escalator.
-- RELEASE_TENANTS tests that state, so it needs no trust in its caller and is idempotent: a worker runs it for the
-- entries of each outcome batch right after the outcome scripts, in the same pipelined round trip, and the lease
-- holder's REPAIR_TENANTS finds whatever a crash in between left behind.
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
  put_where(fields, in_stream(stream, id))
  return id
end
-- Holds the task as held member <tenant>\0<seq>\0<fields JSON> (seq: 16 characters that order it).
local function hold(held, tenant, seq, fields)
  redis.call('ZADD', held, 0, tenant .. '\0' .. seq .. '\0' .. cjson.encode(fields))
  put_where(fields, 'held:' .. key_suffix(held) .. ':' .. tenant .. '\0' .. seq)
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
  hold(held, tenant, string.format('%016d', redis.call('INCR', seq)), fields)
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
