-- KEYS: tier streams, highest priority first. ARGV: group, consumer, want[1..n], room[1..n] (-1 = no cap).
-- Reads the planned counts, then hands any shortfall to the tiers that still have work, in priority order.
-- Returns {{tier index (0: the first key), {{id, fields}...}}...} for each tier it read entries from.
local group, consumer, n = ARGV[1], ARGV[2], #KEYS
local got, want, out, short = {}, {}, {}, 0
local function read(i, count)
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', count, 'STREAMS', KEYS[i], '>')
  if not r then return 0 end
  local entries = r[1][2]
  if #entries > 0 then out[#out + 1] = {i - 1, entries} end
  return #entries
end
for i = 1, n do
  want[i] = tonumber(ARGV[2 + i])
  got[i] = 0
  if want[i] > 0 then
    got[i] = read(i, want[i])
    short = short + want[i] - got[i]
  end
end
for i = 1, n do
  if short <= 0 then break end
  local exhausted = want[i] > 0 and got[i] < want[i]
  local room = tonumber(ARGV[2 + n + i])
  local count = short
  if room >= 0 then count = math.min(count, room - got[i]) end
  if not exhausted and count > 0 then
    local more = read(i, count)
    got[i] = got[i] + more
    short = short - more
  end
end
return out
