-- helpers/placed.lua (after helpers/tenants.lua): where the task-id index says a task is, checked against the
-- store (CANCEL, PRUNE_WHERE). ``tiers``: tier name -> {stream = key, held = key, ...}; ``sets``: due, throttled,
-- stranded -> their keys. Returns:
--   'running' | 'waiting'   an entry of a tier stream a worker owns | not yet delivered, or parked for a retry
--   'set', key, member, {tier, fields}    a member of a scheduled set (due, throttled, stranded)
--   'held', key, member, {tier, fields}   a held member
--   'unknown'   a tier the caller was not given: it cannot judge
--   nil         the place does not check out: an entry acked without a record, a member gone (left stale by a
--               script of an older release, or its entry lost)
local group_infos = {}
local function cached_group_info(stream, group)
  if group_infos[stream] == nil then group_infos[stream] = group_info(stream, group) or false end
  return group_infos[stream] or nil
end
local function in_tier_stream(stream, id, group, parking)
  local info = cached_group_info(stream, group)
  if info then
    local p = redis.call('XPENDING', stream, group, id, id, 1)
    if #p > 0 then return (p[1][2] == parking) and 'waiting' or 'running' end
    if id_le(id, info['last-delivered-id']) then return nil end
  end
  if #redis.call('XRANGE', stream, id, id) == 0 then return nil end
  return 'waiting'
end
-- Rows of scheduled sets a caller may still read (nil: no bound). PRUNE_WHERE sets one: tasks sharing one due
-- millisecond (a bulk not_before) would otherwise make every check of a page read them all, blocking the server.
local scan_budget = nil
local function limit_scans(rows) -- luacheck: ignore 211 (CANCEL reads without a bound)
  scan_budget = rows
end
-- the member of a scheduled set with that score that carries task_id (few share a score: a page at a time);
-- false when the budget ran out before it was found
local function scheduled_with(key, score, task_id)
  local needle, offset = '"task_id",' .. cjson.encode(task_id), 0
  while true do
    if scan_budget ~= nil then
      if scan_budget <= 0 then return false end
      scan_budget = scan_budget - 100 - offset
    end
    local page = redis.call('ZRANGEBYSCORE', key, score, score, 'LIMIT', offset, 100)
    for _, member in ipairs(page) do
      if string.find(member, needle, 1, true) then
        local ok, item = pcall(cjson.decode, member)
        if ok and type(item) == 'table' and type(item[2]) == 'table' and field_of(item[2], 'task_id') == task_id then
          return member, item
        end
      end
    end
    if #page < 100 then return nil end
    offset = offset + 100
  end
end
-- the held member starting with <prefix>\0 that carries task_id
local function held_with(held, prefix, task_id)
  local first = prefix .. '\0'
  for _, member in ipairs(redis.call('ZRANGEBYLEX', held, '[' .. first, '+', 'LIMIT', 0, 16)) do
    if string.sub(member, 1, #first) ~= first then return nil end
    local ok, fields = pcall(cjson.decode, string.sub(member, #first + 1))
    if ok and type(fields) == 'table' and field_of(fields, 'task_id') == task_id then return member, fields end
  end
  return nil
end
-- A place in a stream names the stream by its key's last part (helpers/where.lua): for a tier that adopts a stream
-- of another name (tiers[].stream), look the place up by that part too, unless a tier has that name.
local function by_stream_suffix(tiers)
  local extra = {}
  for _, tier in pairs(tiers) do
    local suffix = key_suffix(tier.stream)
    if suffix and not tiers[suffix] then extra[suffix] = tier end
  end
  for suffix, tier in pairs(extra) do tiers[suffix] = tier end
  return tiers
end
local function placed(task_id, place, tiers, sets, group, parking)
  local kind, rest = string.match(place, '^(%a+):(.*)$')
  if kind == 'stream' then
    local tier, id = string.match(rest, '^(.*):([^:]+)$')
    if not tier then return nil end
    if not tiers[tier] then return 'unknown' end
    return in_tier_stream(tiers[tier].stream, id, group, parking)
  elseif kind and sets[kind] then
    local member, item = scheduled_with(sets[kind], rest, task_id)
    if member == false then return 'unknown' end
    if member then return 'set', sets[kind], member, item end
  elseif kind == 'held' then
    local tier, prefix = string.match(rest, '^([^:]*):(.*)$')
    if not tier then return nil end
    if not tiers[tier] then return 'unknown' end
    local member, fields = held_with(tiers[tier].held, prefix, task_id)
    if member then return 'held', tiers[tier].held, member, {tier, fields} end
  end
  return nil
end
