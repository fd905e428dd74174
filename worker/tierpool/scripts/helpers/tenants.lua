-- helpers/tenants.lua (after helpers/stream.lua and helpers/where.lua), protocol 9: fairness inside a tier
-- (tiers[].tenantConcurrency).
-- Per tier with a limit N, these keys (all with the pool's hash tag, so one slot):
-- - ...:tenants:<tier> (hash tenant -> admitted count) and ...:admitted:<tier> (hash entry id -> tenant: the
--   admitted entries not yet known to be finished): written by workers only. The producer ACL may read them but
--   not write them, so a producer cannot forge a count or admit its own entry: the worker's ADMIT_ENTRIES is the
--   only way into a tenant's count.
-- - ...:queued:<tier> (a sorted set, every score 0, ordered by member: <tenant>\0<entry id>): the entries a
--   producer's gate put into the stream that no worker has taken yet, a tenant's one ZLEXCOUNT range. Producers
--   add to it, workers take from it. A tenant occupies its admitted count plus its queued entries, so a burst of
--   submits queues at most N entries and holds the rest (no flood in the stream ahead of other tenants), and the
--   worker that takes a queued entry admits it if the tenant has room. The admitted count alone bounds what runs:
--   a forged member admits nothing, and only delays the tenant it names until the lease holder's repair drops it
--   (REPAIR_TENANTS: a member with another score, of an entry that is gone, of another tenant, or delivered and
--   not taken by ADMIT_ENTRIES).
-- - ...:held:<tier> (a sorted set, every score 0, ordered by member: <tenant>\0<seq>\0<fields JSON>, so a
--   tenant's held tasks are one contiguous range in submit order, its oldest found with one ZRANGEBYLEX ... LIMIT 0
--   1 in O(log n), whatever other tenants hold), plus ...:heldseq:<tier> (the counter of seq).
-- ``g`` names a tier's keys: {stream, tenants, admitted, queued, held, seq}. On a producer's side (SUBMIT_GATED,
-- REPLAY_GATED) ``admitted`` is nil: its gate queues instead of admitting, and it only reads ``tenants``, whose
-- name it gets in ARGV because a key declared in KEYS needs write access.
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
-- The slots a tenant occupies: its admitted entries and its queued ones.
local function occupied(g, tenant)
  local count = tonumber(redis.call('HGET', g.tenants, tenant) or '0') or 0
  return count + redis.call('ZLEXCOUNT', g.queued, '[' .. tenant .. '\0', '(' .. tenant .. '\1')
end
local function admit(stream, tenants, admitted, tenant, fields)
  local id = redis.call('XADD', stream, '*', unpack(fields))
  redis.call('HSET', admitted, id, tenant)
  redis.call('HINCRBY', tenants, tenant, 1)
  put_where(fields, in_stream(stream, id))
  return id
end
-- A producer's side: into the stream, queued for a worker to admit.
local function queue(g, tenant, fields)
  local id = redis.call('XADD', g.stream, '*', unpack(fields))
  redis.call('ZADD', g.queued, 0, tenant .. '\0' .. id)
  put_where(fields, in_stream(g.stream, id))
  return id
end
local function enter(g, tenant, fields)
  if g.admitted then return admit(g.stream, g.tenants, g.admitted, tenant, fields) end
  return queue(g, tenant, fields)
end
-- Holds the task as held member <tenant>\0<seq>\0<fields JSON> (seq: 16 characters that order it).
local function hold(held, tenant, seq, fields)
  redis.call('ZADD', held, 0, tenant .. '\0' .. seq .. '\0' .. cjson.encode(fields))
  put_where(fields, 'held:' .. key_suffix(held) .. ':' .. tenant .. '\0' .. seq)
end
local function oldest_held(held, tenant)
  return redis.call('ZRANGEBYLEX', held, '[' .. tenant .. '\0', '(' .. tenant .. '\1', 'LIMIT', 0, 1)
end
-- Lets the tenant's oldest held tasks in while it has room (limit < 0: no limit), at most cap of them. A held
-- member whose fields name another tenant (written there directly; the tenant read as ADMIT_ENTRIES and the
-- worker read it, the last of repeated fields) enters uncounted, for the worker that takes it to gate it under
-- the tenant it names.
local function fill(g, tenant, limit, cap)
  local count = occupied(g, tenant)
  local n = 0
  while n < cap and (limit < 0 or count < limit) do
    local m = oldest_held(g.held, tenant)
    if #m == 0 then break end
    redis.call('ZREM', g.held, m[1])
    local ok, fields = pcall(cjson.decode, string.sub(m[1], #tenant + 19))
    if ok and type(fields) == 'table' then  -- else not a gate's member (a direct ZADD): dropped, it held no task
      if pairs_to_table(fields)['tenant'] == tenant then
        enter(g, tenant, fields)
        count = count + 1
      else
        local id = redis.call('XADD', g.stream, '*', unpack(fields))
        put_where(fields, in_stream(g.stream, id))
      end
    end
    n = n + 1
  end
  return n
end
-- Lets the task in when its tenant has room and nothing held before it; else holds it. Returns the entry id or
-- 'held'.
local function gate(g, tenant, limit, fields)
  if (limit < 0 or occupied(g, tenant) < limit) and #oldest_held(g.held, tenant) == 0 then
    return enter(g, tenant, fields)
  end
  hold(g.held, tenant, string.format('%016d', redis.call('INCR', g.seq)), fields)
  fill(g, tenant, limit, math.max(limit, 1))
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
