-- helpers/adopted.lua (after helpers/stream.lua): entries of the formats a pool takes from a stream it adopts
-- (tiers[].stream), by the same rules as tierpool.protocol.adopted, so that a task moved by a script keeps the id
-- and the escalation time a worker gives it.
-- The task_id of an entry: its own field; else its payload's own, a JSON object's ``task_id`` that is a string of
-- 1 to 200 bytes; else '<stream>/<entry id>'.
local function adopted_task_id(stream, id, ft)
  if ft['task_id'] then return ft['task_id'] end
  if ft['payload'] then
    local ok, p = pcall(cjson.decode, ft['payload'])
    if ok and type(p) == 'table' and type(p['task_id']) == 'string' and #p['task_id'] >= 1
        and #p['task_id'] <= 200 then
      return p['task_id']
    end
  end
  return stream .. '/' .. id
end
-- The escalation time of an entry, ms: with ``own_ttls`` (a tier that adopts a stream) its own ``priority_ttl_s``
-- (seconds: digits, or digits, a dot and digits) when it has a valid one, else the tier's (``default``; -1: none).
-- -1: it never escalates.
local function escalation_ms(ft, default, own_ttls)
  local own = own_ttls and ft['priority_ttl_s']
  if own and (string.match(own, '^%d+$') or string.match(own, '^%d+%.%d+$')) then
    return math.floor(tonumber(own) * 1000)
  end
  return default
end
-- Whether the undelivered entry ``id`` is due to move up a tier at ``now`` (ms): it entered its stream (the entry
-- id's time) at least its escalation time ago.
local function escalation_due(id, ft, now, default, own_ttls)
  local after = escalation_ms(ft, default, own_ttls)
  if after < 0 then return false end
  return tonumber(string.match(id, '^(%d+)-')) + after <= now
end
