-- include: helpers/stream.lua
-- KEYS: stream. ARGV: group. Deletes acknowledged history only: everything below the oldest pending entry
-- and at or below the last delivered one. Never touches undelivered or pending entries. Returns the count.
local info = group_info(KEYS[1], ARGV[1])
if not info or info['last-delivered-id'] == '0-0' then return 0 end
local threshold = next_id(info['last-delivered-id'])
local summary = redis.call('XPENDING', KEYS[1], ARGV[1])
if summary[1] > 0 then threshold = summary[2] end
return redis.call('XTRIM', KEYS[1], 'MINID', threshold)
