-- include: helpers/stream.lua helpers/adopted.lua helpers/where.lua helpers/tenants.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: stream, tenants, admitted, queued, held, held seq. ARGV: group, consumer, limit, the tier when it adopts a
-- stream ('': it does not; a held entry is completed first, helpers/adopted.lua's adopted_entry, so it keeps the
-- task_id and created_at a worker gives it), entry ids...
-- The worker's side of the tenant gate, the only way into a tenant's count, for the entries with a tenant that it
-- read or claimed on a tier with tenantConcurrency. No entry runs outside its tenant's count, however it got into
-- the stream (a producer's gate, a plain XADD, an escalated copy, a task moved by a worker whose spec had no
-- limit), and none is lost. For each entry this consumer owns:
-- - admitted already (a worker's record: this script's, MOVE_DUE's, a fill's): 1, run it;
-- - otherwise it is admitted where it is (HSET admitted, HINCRBY tenants), 1, run it, when its tenant has room
--   and it may go before its tenant's held tasks: it passed a producer's gate (its queued member, taken here), it
--   comes back (it carries attempts, paid or escalated_from), or nothing of its tenant is held;
-- - otherwise it is acked (and deleted: see delete_acked) and held, 0, not run: an entry that passed the gate or
--   comes back at the front of its tenant's queue, as MOVE_DUE holds it, new work at the back (and the tenant's
--   oldest held task let in if it has room). The held task keeps every field, created_at included.
-- An entry that is not pending, is another consumer's or is gone: -1, not run, left alone. An entry without a
-- tenant: 1. Returns one status per entry id, in order.
local g = {stream = KEYS[1], tenants = KEYS[2], admitted = KEYS[3], queued = KEYS[4], held = KEYS[5], seq = KEYS[6]}
local group, consumer, limit, adopt = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local now, out = now_ms(), {}
where_key = KEYS[#KEYS]
local function decide(id, order)
  local p = redis.call('XPENDING', g.stream, group, id, id, 1)
  if #p == 0 or p[1][2] ~= consumer then return -1 end
  if redis.call('HGET', g.admitted, id) then return 1 end
  local entry = redis.call('XRANGE', g.stream, id, id)
  if #entry == 0 then return -1 end
  local fields = entry[1][2]
  local ft = pairs_to_table(fields)
  local tenant = ft['tenant']
  if not tenant then return 1 end
  local passed = redis.call('ZREM', g.queued, tenant .. '\0' .. id) == 1
  local front = passed or ((ft['attempts'] or ft['paid'] or ft['escalated_from']) and true or false)
  if occupied(g, tenant) < limit and (front or #oldest_held(g.held, tenant) == 0) then
    redis.call('HSET', g.admitted, id, tenant)
    redis.call('HINCRBY', g.tenants, tenant, 1)
    return 1
  end
  local rank
  if front then
    rank = '-' .. string.format('%015d', now * 100 + math.min(order, 99))
  else
    rank = string.format('%016d', redis.call('INCR', g.seq))
  end
  if adopt ~= '' then fields = adopted_entry(g.stream, id, fields, adopt) end
  hold(g.held, tenant, rank, fields)
  redis.call('XACK', g.stream, group, id)
  delete_acked(g.stream, last_delivered(g.stream, group), {id})
  if not front then fill(g, tenant, limit, math.max(limit, 1)) end
  return 0
end
for i = 5, #ARGV do out[#out + 1] = decide(ARGV[i], i - 5) end
return out
