-- include: helpers/stream.lua helpers/where.lua helpers/tenants.lua helpers/placed.lua
-- PRUNE_WHERE: the lease holder's clean-up of the task-id index, a page per sweep. KEYS: due,
-- throttled, stranded, then per tier its stream and held set (2n), then ...:where. ARGV: HSCAN cursor, count,
-- group, parking consumer, then the tier names, in KEYS order.
-- Drops each place of the page that does not check out (helpers/placed.lua): what scripts of an older release
-- moved or finished without writing the index, and tasks whose entry was lost (trimmed or deleted by another
-- producer). A place in a tier this worker's spec lacks is kept. Returns {next cursor ('0': a full pass), dropped}.
where_key = KEYS[#KEYS]
local tiers, sets = {}, {due = KEYS[1], throttled = KEYS[2], stranded = KEYS[3]}
for i = 5, #ARGV do
  local b = 3 + 2 * (i - 5)
  tiers[ARGV[i]] = {stream = KEYS[b + 1], held = KEYS[b + 2]}
end
tiers = by_stream_suffix(tiers)
limit_scans(5000)  -- rows of scheduled sets read at most per call; a place not checked in time is kept
local scan = redis.call('HSCAN', where_key, ARGV[1], 'COUNT', ARGV[2])
local flat, dropped = scan[2], 0
for i = 1, #flat, 2 do
  if placed(flat[i], flat[i + 1], tiers, sets, ARGV[3], ARGV[4]) == nil then
    drop_where(flat[i])
    dropped = dropped + 1
  end
end
return {scan[1], dropped}
