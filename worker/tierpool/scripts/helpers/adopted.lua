-- helpers/adopted.lua (after helpers/stream.lua): entries of the formats a pool takes from a stream it adopts
-- (tiers[].stream), by the same rules as tierpool.protocol.adopted, so that a task moved by a script keeps the id,
-- the payload, the created_at and the escalation time a worker gives it.
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
-- The fields that are the envelope's, not a payload's (tierpool.protocol.adopted.ENVELOPE_FIELDS).
local ADOPTED_ENVELOPE = {}
for _, k in ipairs({'attempts', 'cost', 'created_at', 'deadline', 'due', 'escalated_from', 'paid', 'payload',
                    'priority_ttl_s', 'protocol', 'rate_limit', 'task', 'task_id', 'tenant', 'tier', 'timeout',
                    'traceparent', 'tracestate'}) do
  ADOPTED_ENVELOPE[k] = true
end
-- A created_at with a fraction as whole ms: seconds below 1e11, ms from there; any other value as it is.
local function adopted_created_at(value)
  if not string.match(value, '^%d+%.%d*$') then return value end
  local n = tonumber(value)
  if n < 1e11 then n = n * 1000 end
  return string.format('%.0f', math.floor(n))
end
-- The created_at of an entry in ms (its own, read as adopted_created_at, a whole number below 1e11 as seconds, as
-- the envelope reads it; else its id's time); nil when its own is not a number.
local function adopted_created_ms(id, ft)
  local own = ft['created_at']
  if not own then return tonumber(string.match(id, '^(%d+)-')) end
  if string.match(own, '^%d+$') then
    local n = tonumber(own)
    return n < 1e11 and n * 1000 or n
  end
  return tonumber(adopted_created_at(own))
end
-- An adopted entry's fields (a flat array) completed, as tierpool.protocol.adopted.adopt_fields does: a payload
-- (the JSON object of the fields that are not the envelope's) when it has none, its task_id (adopted_task_id), its
-- tier (``tier``) and its created_at in ms (its entry id's time when absent). ``fields`` itself when nothing lacks.
-- Every script that moves an entry of a tier that adopts a stream writes this into the copy, so the copy is an
-- envelope wherever it lands (a tier of the pool's own, the due set, the held set, the dead letters).
local function adopted_entry(stream, id, fields, tier)
  local ft = pairs_to_table(fields)
  local ca = ft['created_at']
  if ft['task_id'] and ft['tier'] and ft['payload'] and ca and not string.find(ca, '.', 1, true) then
    return fields
  end
  local out = {}
  for i = 1, #fields, 2 do
    if fields[i] ~= 'created_at' then out[#out + 1] = fields[i]; out[#out + 1] = fields[i + 1] end
  end
  if not ft['payload'] then
    local parts = {}
    for i = 1, #fields, 2 do
      if not ADOPTED_ENVELOPE[fields[i]] then
        parts[#parts + 1] = cjson.encode(fields[i]) .. ': ' .. cjson.encode(fields[i + 1])
      end
    end
    ft['payload'] = '{' .. table.concat(parts, ', ') .. '}'
    out[#out + 1] = 'payload'; out[#out + 1] = ft['payload']
  end
  if not ft['task_id'] then out[#out + 1] = 'task_id'; out[#out + 1] = adopted_task_id(stream, id, ft) end
  if not ft['tier'] then out[#out + 1] = 'tier'; out[#out + 1] = tier end
  out[#out + 1] = 'created_at'
  out[#out + 1] = ca and adopted_created_at(ca) or string.match(id, '^(%d+)-')
  return out
end
-- The escalation time of an entry, ms: with ``own_ttls`` (a tier that adopts a stream) its own ``priority_ttl_s``
-- (seconds: digits, or digits, a dot and digits) when it has a valid one, else the tier's (``default``; -1: none).
-- -1: it never escalates. Second value: whether it is the entry's own.
local function escalation_ms(ft, default, own_ttls)
  local own = own_ttls and ft['priority_ttl_s']
  if own and (string.match(own, '^%d+$') or string.match(own, '^%d+%.%d+$')) then
    return math.floor(tonumber(own) * 1000), true
  end
  return default, false
end
-- Whether the undelivered entry ``id`` is due to move up a tier at ``now`` (ms): its own ``priority_ttl_s`` counts
-- from its created_at (adopted_created_ms), once, as the seed's sweeper counts it, so a task past it moves up a tier
-- on each pass; the tier's escalateAfter counts from when it entered its stream (the entry id's time).
local function escalation_due(id, ft, now, default, own_ttls)
  local after, own = escalation_ms(ft, default, own_ttls)
  if after < 0 then return false end
  local since = tonumber(string.match(id, '^(%d+)-'))
  if own then since = adopted_created_ms(id, ft) or since end
  return since + after <= now
end
