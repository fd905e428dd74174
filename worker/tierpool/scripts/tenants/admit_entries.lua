-- include: helpers/stream.lua helpers/where.lua helpers/tenants.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: stream, tenants, admitted, held, held seq. ARGV: group, consumer, limit, entry ids...
-- The worker's side of the tenant gate, for the entries with a tenant that it read or claimed on a tier with
-- tenantConcurrency: an entry that did not pass the gate (a plain XADD by a producer that is not a tierpool
-- client, an escalated copy, a task moved by a worker whose spec had no limit) must not run outside its tenant's
-- count, and must not be lost. For each entry this consumer owns:
-- - admitted already (the gate's record, or this script's): 1, run it;
-- - otherwise the gate decides as it does for a submit, on the stored entry: with room for its tenant (and, for
--   new work, nothing of its tenant held) the entry is admitted where it is (HSET admitted, HINCRBY tenants), 1,
--   run it; without, it is acked (and deleted: see delete_acked) and held, 0, not run: new work at the back of its
--   tenant's queue (and the tenant's oldest held task admitted if it has room), a task coming back (it carries
--   attempts, paid or escalated_from) at the front, as MOVE_DUE holds it. The held task keeps every field,
--   created_at included.
-- An entry that is not pending, is another consumer's or is gone: -1, not run, left alone. An entry without a
-- tenant: 1. Returns one status per entry id, in order.
local stream, tenants, admitted, held, seq = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local group, consumer, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now, out = now_ms(), {}
where_key = KEYS[#KEYS]
local function decide(id, order)
  local p = redis.call('XPENDING', stream, group, id, id, 1)
  if #p == 0 or p[1][2] ~= consumer then return -1 end
  if redis.call('HGET', admitted, id) then return 1 end
  local entry = redis.call('XRANGE', stream, id, id)
  if #entry == 0 then return -1 end
  local fields = entry[1][2]
  local ft = pairs_to_table(fields)
  local tenant = ft['tenant']
  if not tenant then return 1 end
  local back = (ft['attempts'] or ft['paid'] or ft['escalated_from']) and true or false
  local count = tonumber(redis.call('HGET', tenants, tenant) or '0')
  if count < limit and (back or #oldest_held(held, tenant) == 0) then
    redis.call('HSET', admitted, id, tenant)
    redis.call('HINCRBY', tenants, tenant, 1)
    return 1
  end
  local rank
  if back then
    rank = '-' .. string.format('%015d', now * 100 + math.min(order, 99))
  else
    rank = string.format('%016d', redis.call('INCR', seq))
  end
  hold(held, tenant, rank, fields)
  redis.call('XACK', stream, group, id)
  delete_acked(stream, last_delivered(stream, group), {id})
  if not back then fill(stream, tenants, admitted, held, tenant, limit, math.max(limit, 1)) end
  return 0
end
for i = 4, #ARGV do out[#out + 1] = decide(ARGV[i], i - 4) end
return out
