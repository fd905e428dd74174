-- KEYS: stream, dedupe key. ARGV: dedupe ttl ms, fields... Enqueues once per task_id within the window.
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return false end
return redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
