-- include: helpers/stream.lua
-- KEYS: stream. ARGV: group, min idle ms. Deletes consumers that own nothing and have been idle that long.
-- Consumers with pending entries are kept: deleting them would make those entries unclaimable. Returns the names
-- of the consumers deleted.
local ok, consumers = pcall(redis.call, 'XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if not ok then return {} end
local removed = {}
for _, c in ipairs(consumers) do
  local info = pairs_to_table(c)
  if info['pending'] == 0 and info['idle'] >= tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    removed[#removed + 1] = info['name']
  end
end
return removed
