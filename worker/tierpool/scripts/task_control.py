"""Lua sources of protocol 4: cancelling a task, and a running task's checkpoint. Each declares every key it
touches in KEYS (all of them carry the pool's hash tag)."""

from tierpool.scripts.core import _HELPERS

# KEYS: result key, cancel marker. ARGV: marker ttl ms.
# A producer's cancel: when the task has a result record it is finished and nothing is written (returns
# {'finished', record}); otherwise the marker is set, and the workers act on it (returns {'marked'}).
CANCEL = r"""
local record = redis.call('GET', KEYS[1])
if record then return {'finished', record} end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[1])
return {'marked'}
"""

# KEYS: stream, result key, events stream, checkpoint, errors hash. ARGV: group, consumer, entry id, task_id,
# record JSON, ttl ms, events maxlen.
# The outcome of a cancelled task, written only by the consumer that owns its entry: ack, the cancelled record,
# the final event; the checkpoint and the remembered error are dropped. Nothing retries it.
# Returns 1, 0 when the entry is no longer pending, -1 when another consumer owns it.
CANCELLED = (
    _HELPERS
    + r"""
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[3])
redis.call('SET', KEYS[2], ARGV[5], 'PX', ARGV[6])
redis.call('DEL', KEYS[4])
redis.call('HDEL', KEYS[5], ARGV[4])
final_event(KEYS[3], ARGV[7], ARGV[6], 'cancelled')
return 1
"""
)

# KEYS: stream, checkpoint key. ARGV: group, consumer, entry id, state JSON, ttl ms.
# Saves a running task's checkpoint, only while this consumer owns its entry.
# Returns 1, 0 when the entry is no longer pending, -1 when another consumer owns it.
CHECKPOINT = r"""
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
return 1
"""

SCRIPTS = {"CANCELLED": CANCELLED, "CHECKPOINT": CHECKPOINT}
"""The scripts a worker loads (CANCEL is the producer's)."""
