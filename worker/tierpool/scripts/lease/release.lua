-- KEYS: lease key. ARGV: holder. Gives the lease up if this holder has it. Returns 1 when it did, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
