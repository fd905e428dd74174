-- KEYS: result key, cancel marker. ARGV: marker ttl ms.
-- A producer's cancel: when the task has a result record it is finished and nothing is written (returns
-- {'finished', record}); otherwise the marker is set, and the workers act on it (returns {'marked'}).
local record = redis.call('GET', KEYS[1])
if record then return {'finished', record} end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
return {'marked'}
