"""Lua sources for every multi-step protocol operation, so each one is atomic on the server.

The protocol-4 scripts (cancel, checkpoint) live in tierpool.scripts.task_control.

All keys of a pool share one hash tag, so these scripts are valid on Redis Cluster too. Every script declares
every key it touches in KEYS (since protocol 4, when reclaim stopped deriving result keys from a prefix).
"""

# Shared helpers, prepended to scripts that need them.
_HELPERS = r"""
local function pairs_to_table(flat)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end
local function group_info(stream, group)
  local ok, groups = pcall(redis.call, 'XINFO', 'GROUPS', stream)
  if not ok then return nil end
  for _, g in ipairs(groups) do
    local info = pairs_to_table(g)
    if info['name'] == group then return info end
  end
  return nil
end
local function next_id(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return ms .. '-' .. tostring(tonumber(seq) + 1)
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The final event goes only to an event stream that exists (the task reported progress, or someone follows it:
-- a follower creates the stream before it reads the result record), so unwatched tasks cost nothing extra.
local function final_event(events, maxlen, ttl, status)
  if redis.call('EXISTS', events) == 0 then return end
  redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', 'type', 'outcome', 'status', status, 'at', tostring(now_ms()))
  redis.call('PEXPIRE', events, ttl)
end
local function dead_letter(stream, dlq, result_key, errors, group, id, fields, reason, err, deliveries, tier, ttl)
  local ft = pairs_to_table(fields)
  local out = {}
  for i = 1, #fields do out[#out + 1] = fields[i] end
  local extra = {'reason', reason, 'error', err or '', 'deliveries', tostring(deliveries),
                 'source_tier', tier, 'source_id', id, 'dead_lettered_at', tostring(now_ms())}
  for i = 1, #extra do out[#out + 1] = extra[i] end
  redis.call('XADD', dlq, '*', unpack(out))
  redis.call('XACK', stream, group, id)
  if ft['task_id'] then
    redis.call('HDEL', errors, ft['task_id'])
    local record = cjson.encode({task_id = ft['task_id'], status = 'dead_lettered', tier = tier,
      error = (err ~= '' and err) or reason, reason = reason, attempts = deliveries, finished_at = now_ms()})
    redis.call('SET', result_key, record, 'PX', ttl)
  end
end
"""

# KEYS: tier streams, highest priority first. ARGV: group, consumer, want[1..n], room[1..n] (-1 = no cap).
# Reads the planned counts, then hands any shortfall to the tiers that still have work, in priority order.
TAKE = r"""
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
"""

# KEYS: stream, errors hash, then four keys a task: result, events, checkpoint, cancel marker.
# ARGV: group, consumer, ttl ms, forget errors 0/1, events maxlen, then pairs of (entry id, task_id), one a task.
# ARGV[6 + 2k] is the k-th task's result JSON (k from 0): three arguments a task.
# Completes a whole batch of one stream in one call, but only the entries this consumer still owns: an entry
# another worker has reclaimed is left to that worker, and one already acked writes nothing. A task whose cancel
# marker is set (protocol 4: it was cancelled while it ran) gets a cancelled record instead of its result. Each
# written outcome appends its final event and drops the task's checkpoint.
# Returns per entry 1 (acked, record written), 0 (no longer pending) or -1 (owned by another consumer).
COMPLETE_MANY = (
    _HELPERS
    + r"""
local group, consumer, ttl, forget, maxlen = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5]
local acked = {}
for k = 0, (#ARGV - 5) / 3 - 1 do
  local id, task_id, record = ARGV[6 + 3 * k], ARGV[7 + 3 * k], ARGV[8 + 3 * k]
  local result, events, checkpoint, marker = KEYS[3 + 4 * k], KEYS[4 + 4 * k], KEYS[5 + 4 * k], KEYS[6 + 4 * k]
  local p = redis.call('XPENDING', KEYS[1], group, id, id, 1)
  local ok = 0
  if #p > 0 and p[1][2] ~= consumer then ok = -1 end
  if #p > 0 and p[1][2] == consumer then
    ok = redis.call('XACK', KEYS[1], group, id)
    local status = 'succeeded'
    if redis.call('EXISTS', marker) == 1 then
      status = 'cancelled'
      record = cjson.encode({task_id = task_id, status = status, worker = consumer, attempts = tonumber(p[1][4]),
        reason = 'cancelled while running; its result was discarded', finished_at = now_ms()})
    end
    redis.call('SET', result, record, 'PX', ttl)
    redis.call('DEL', checkpoint)
    final_event(events, maxlen, ttl, status)
    if forget then redis.call('HDEL', KEYS[2], task_id) end
  end
  acked[#acked + 1] = ok
end
return acked
"""
)

# KEYS: stream, errors hash. ARGV: group, consumer, entry id, idle ms to set, task_id, error text, parking consumer.
# Keeps the failed entry pending but makes it reclaimable after the retry backoff, without counting a delivery.
# Only the owner may do this. The entry moves to the parking consumer, so that its former owner, which skips its
# own entries when it reclaims, can still pick the retry up. Returns 1, or 0 when this consumer does not own it.
RETRY_LATER = r"""
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 or p[1][2] ~= ARGV[2] then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[7], 0, ARGV[3], 'IDLE', ARGV[4], 'JUSTID')
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
return 1
"""

# KEYS: stream, errors hash, deferrals counter. ARGV: group, consumer, entry id, defer idle ms, task_id, error text,
# parking consumer, max deferrals, counter ttl ms, fallback idle ms.
# A RetryAfter: like RETRY_LATER, but while the task has deferrals left its delivery count is set back by one
# (XCLAIM RETRYCOUNT), so that the reclaim that runs it again does not count a failed delivery, and no error is
# remembered. Past max deferrals it is an ordinary failed attempt with the fallback idle. Only the owner may do
# this. Returns 1 (deferred), 2 (failed attempt), 0 when no longer pending, -1 when another consumer owns it.
DEFER = r"""
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[2] then return -1 end
local n = redis.call('INCR', KEYS[3])
redis.call('PEXPIRE', KEYS[3], ARGV[9])
if n <= tonumber(ARGV[8]) then
  local count = math.max(tonumber(p[1][4]) - 1, 0)
  redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[7], 0, ARGV[3], 'IDLE', ARGV[4], 'RETRYCOUNT', count, 'JUSTID')
  return 1
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[7], 0, ARGV[3], 'IDLE', ARGV[10], 'JUSTID')
redis.call('HSET', KEYS[2], ARGV[5], ARGV[6])
return 2
"""

# KEYS: stream, dlq, result key, errors hash, events, checkpoint. ARGV: group, id, reason, error, deliveries, tier,
# ttl ms, consumer, events maxlen. Moves one pending entry to the dead-letter stream and acks it, atomically, only
# if this consumer owns it; appends the final event and drops the checkpoint (protocol 4). An empty error
# stands for the task's remembered one (the errors hash), as when a reclaim finds it past max deliveries.
# Returns 1, 0 when it is no longer pending, -1 when another consumer owns it.
DEAD_LETTER = (
    _HELPERS
    + r"""
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[8] then return -1 end
local entry = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
local fields = {}
if #entry > 0 then fields = entry[1][2] end
local err, task_id = ARGV[4], pairs_to_table(fields)['task_id']
if err == '' and task_id then err = redis.call('HGET', KEYS[4], task_id) or '' end
dead_letter(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], fields, ARGV[3], err,
            tonumber(ARGV[5]), ARGV[6], ARGV[7])
redis.call('DEL', KEYS[6])
final_event(KEYS[5], ARGV[9], ARGV[7], 'dead_lettered')
return 1
"""
)

# KEYS: stream. ARGV: group, consumer, min idle ms, start cursor, count, max deliveries, then entry ids to adopt
# (optional).
# Scans pending entries idle at least that long from the cursor (XPENDING IDLE) and claims up to ``count`` of
# them, skipping the entries this consumer owns itself: those are running here, or their outcome is on its way
# (a worker never claims back, and runs twice, its own work). Those it skips are returned, so that the worker
# can name the ones it does not hold (a read whose reply was lost in an outage) for adoption in the next call:
# adopted ids are claimed like the others. A claimed entry past max deliveries is returned apart, as exhausted:
# the worker, which owns it now, dead-letters it at once with DEAD_LETTER (protocol 4: that script declares the
# task's keys and appends its final event); the claim that finds it exhausted counted a delivery that never
# runs, so the dead letter records deliveries - 1 attempts. Should the worker die first, the next claim finds it
# exhausted again. A pending entry whose stream entry is gone is dropped from the PEL and reported.
# Returns {next cursor ('0-0' after the end), {{id, fields, deliveries}...}, deleted ids,
# exhausted {{id, fields, deliveries}...}, own idle ids}.
RECLAIM = r"""
local stream = KEYS[1]
local group, consumer, min_idle, maxd = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[6])
local count = tonumber(ARGV[5])
local claimed, deleted, exhausted, own, taken = {}, {}, {}, {}, 0
local function take(id, delivered)
  local exists = redis.call('XRANGE', stream, id, id)
  if #exists == 0 then
    redis.call('XACK', stream, group, id)
    deleted[#deleted + 1] = id
    return
  end
  local c = redis.call('XCLAIM', stream, group, consumer, min_idle, id)
  if #c == 0 then return end
  taken = taken + 1
  local fields = c[1][2]
  -- protocol 5: deliveries counted before this entry (it came back through the due-time index)
  local carried = 0
  for i = 1, #fields, 2 do
    if fields[i] == 'attempts' then carried = tonumber(fields[i + 1]) or 0 end
  end
  local deliveries = delivered + 1 + carried
  if deliveries > maxd then
    exhausted[#exhausted + 1] = {id, fields, deliveries}
  else
    claimed[#claimed + 1] = {id, fields, delivered + 1}  -- this entry's count: the worker adds the carried ones
  end
end
for i = 7, #ARGV do
  local p = redis.call('XPENDING', stream, group, ARGV[i], ARGV[i], 1)
  if #p > 0 and p[1][2] == consumer and taken < count then take(ARGV[i], p[1][4]) end
end
local start = '-'
if ARGV[4] ~= '0-0' then start = '(' .. ARGV[4] end
local scan_limit = math.max(count, 64)
local scanned = redis.call('XPENDING', stream, group, 'IDLE', min_idle, start, '+', scan_limit)
local cursor = '0-0'
for _, p in ipairs(scanned) do
  if taken >= count then break end
  cursor = p[1]
  if p[2] ~= consumer then take(p[1], p[4]) else own[#own + 1] = p[1] end
end
if #scanned < scan_limit and taken < count then cursor = '0-0' end
return {cursor, claimed, deleted, exhausted, own}
"""

# KEYS: stream. ARGV: group, consumer, ids...
# Resets idle on entries this consumer still owns (XCLAIM JUSTID does not count a delivery).
# Returns {lost, gone}: the ids another consumer now owns (reclaimed while this one still runs them), and the ids
# no longer this consumer's otherwise: not pending (acked by another worker) or deleted from the stream. A deleted
# entry is never claimed: XCLAIM JUSTID would silently drop it from the PEL (Redis 7+).
HEARTBEAT = r"""
local mine, lost, gone = {}, {}, {}
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if #p == 0 then
    gone[#gone + 1] = ARGV[i]
  elseif p[1][2] ~= ARGV[2] then
    lost[#lost + 1] = ARGV[i]
  elseif #redis.call('XRANGE', KEYS[1], ARGV[i], ARGV[i]) == 0 then
    gone[#gone + 1] = ARGV[i]
  else
    mine[#mine + 1] = ARGV[i]
  end
end
if #mine > 0 then
  -- unpack() must come last in an argument list: anywhere else Lua passes only its first value
  local args = {'XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0}
  for _, id in ipairs(mine) do args[#args + 1] = id end
  args[#args + 1] = 'JUSTID'
  redis.call(unpack(args))
end
return {lost, gone}
"""

# KEYS: source stream, target stream. ARGV: group, escalator consumer, cutoff ms, max count, source tier,
# target tier, max target backlog (-1: none). Takes undelivered entries older than the cutoff through the group
# (so the source lag stays valid), re-adds them one tier up with the same task_id and created_at, and acks them.
# With a max target backlog N, moves only as many as keep the target's waiting count below N; with 0, one entry
# and only when the target has nothing waiting. Returns the count.
ESCALATE = (
    _HELPERS
    + r"""
local src, dst = KEYS[1], KEYS[2]
local group, escalator, cutoff = ARGV[1], ARGV[2], ARGV[3]
local info = group_info(src, group)
if not info then return 0 end
local limit = tonumber(ARGV[4])
local max_target = tonumber(ARGV[7])
if max_target >= 0 then
  local target = group_info(dst, group)
  local waiting = redis.call('XLEN', dst)
  if target and target['lag'] then waiting = target['lag'] end
  -- N keeps the target below N waiting (at most N - 1 - waiting move); 0: one task, only into an empty target
  local room = max_target - 1 - waiting
  if max_target == 0 then room = (waiting == 0) and 1 or 0 end
  limit = math.min(limit, room)
  if limit <= 0 then return 0 end
end
local candidates = redis.call('XRANGE', src, '(' .. info['last-delivered-id'], cutoff .. '-18446744073709551615',
                              'COUNT', limit)
if #candidates == 0 then return 0 end
local r = redis.call('XREADGROUP', 'GROUP', group, escalator, 'COUNT', #candidates, 'STREAMS', src, '>')
local moved = 0
for _, e in ipairs(r[1][2]) do
  local ft = pairs_to_table(e[2])
  local out = {}
  for i = 1, #e[2], 2 do
    local k = e[2][i]
    if k ~= 'tier' and k ~= 'escalated_from' then out[#out + 1] = k; out[#out + 1] = e[2][i + 1] end
  end
  out[#out + 1] = 'tier'; out[#out + 1] = ARGV[6]
  out[#out + 1] = 'escalated_from'; out[#out + 1] = ft['escalated_from'] or ARGV[5]
  redis.call('XADD', dst, '*', unpack(out))
  redis.call('XACK', src, group, e[1])
  moved = moved + 1
end
redis.call('XGROUP', 'DELCONSUMER', src, group, escalator)
return moved
"""
)

# KEYS: stream. ARGV: group. Deletes acknowledged history only: everything below the oldest pending entry
# and at or below the last delivered one. Never touches undelivered or pending entries. Returns the count.
TRIM = (
    _HELPERS
    + r"""
local info = group_info(KEYS[1], ARGV[1])
if not info or info['last-delivered-id'] == '0-0' then return 0 end
local threshold = next_id(info['last-delivered-id'])
local summary = redis.call('XPENDING', KEYS[1], ARGV[1])
if summary[1] > 0 then threshold = summary[2] end
return redis.call('XTRIM', KEYS[1], 'MINID', threshold)
"""
)

# KEYS: stream. ARGV: group, min idle ms. Deletes consumers that own nothing and have been idle that long.
# Consumers with pending entries are kept: deleting them would make those entries unclaimable.
CLEANUP_CONSUMERS = (
    _HELPERS
    + r"""
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
"""
)

# KEYS: lease key. ARGV: holder, ttl ms. Acquires or renews; returns 1 when this holder has the lease.
LEASE = r"""
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if not holder then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0
"""

# KEYS: lease key. ARGV: holder.
RELEASE = r"""
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# KEYS: stream, dedupe key. ARGV: dedupe ttl ms, fields... Enqueues once per task_id within the window.
SUBMIT_ONCE = r"""
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return false end
return redis.call('XADD', KEYS[1], '*', unpack(ARGV, 2))
"""

# Shared by REPLAY and lua_tenants.REPLAY_GATED (KEYS[1] = dlq, ARGV[1] = dlq entry id, ARGV[2] = target tier):
# the dead letter's envelope as `out`, with every optional field a task carries, and its fields as `ft`.
_REPLAYED_ENVELOPE = r"""
local entry = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #entry == 0 then return redis.error_reply('no such dead-letter entry ' .. ARGV[1]) end
local ft = pairs_to_table(entry[1][2])
if not ft['task_id'] or not ft['payload'] or not ft['created_at'] then
  return redis.error_reply('entry ' .. ARGV[1] .. ' is not a task envelope: ' .. (ft['reason'] or ''))
end
local out = {'task_id', ft['task_id'], 'tier', ARGV[2], 'payload', ft['payload'], 'created_at', ft['created_at']}
for _, k in ipairs({'escalated_from', 'deadline', 'timeout', 'rate_limit', 'cost', 'tenant'}) do
  if ft[k] then out[#out + 1] = k; out[#out + 1] = ft[k] end
end
"""

# KEYS: dlq, target stream, result key, cancel marker, events stream (of the entry's task_id). ARGV: dlq entry id,
# target tier. Re-enqueues a dead-lettered task, atomically. A replay is a new life for the task: its old result
# record (dead_lettered) goes, so that cancel and wait_result see a task that is waiting again; its cancel marker
# goes (replaying is an explicit decision to run it); its event stream, which ends with the old final event, goes.
REPLAY = (
    _HELPERS
    + _REPLAYED_ENVELOPE
    + r"""
local id = redis.call('XADD', KEYS[2], '*', unpack(out))
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
return id
"""
)
