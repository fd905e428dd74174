-- include: helpers/stream.lua helpers/where.lua helpers/tenants.lua helpers/replay.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: dlq, target stream, queued, held, held seq, then the task's result key, cancel marker and events stream.
-- ARGV: dlq entry id, target tier, limit (-1: none), the target's tenants key (read only: see helpers/tenants.lua).
-- REPLAY into a tier with a tenant limit: the same new life (the old record, marker and events go), and a task
-- with a tenant goes through the gate like a submit (queued or held). Returns the entry id or 'held'.
local ft, out = replayed_envelope(KEYS[1], ARGV[1], ARGV[2])
if not ft then return out end
where_key = KEYS[#KEYS]
local id
if ft['tenant'] and tonumber(ARGV[3]) >= 0 then
  local g = {stream = KEYS[2], tenants = ARGV[4], queued = KEYS[3], held = KEYS[4], seq = KEYS[5]}
  id = gate(g, ft['tenant'], tonumber(ARGV[3]), out)
else
  id = redis.call('XADD', KEYS[2], '*', unpack(out))
  put_where(out, in_stream(KEYS[2], id))
end
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[6], KEYS[7], KEYS[8])
return id
