-- include: helpers/stream.lua helpers/where.lua helpers/replay.lua
-- Last key: ...:where, the task-id index (helpers/where.lua): written where this script moves a task.
-- KEYS: dlq, target stream, result key, cancel marker, events stream (of the entry's task_id). ARGV: dlq entry id,
-- target tier. Re-enqueues a dead-lettered task, atomically. A replay is a new life for the task: its old result
-- record (dead_lettered) goes, so that cancel and wait_result see a task that is waiting again; its cancel marker
-- goes (replaying is an explicit decision to run it); its event stream, which ends with the old final event, goes.
-- Returns the new entry id (an error reply for an entry that is no task envelope, or was cut).
local ft, out = replayed_envelope(KEYS[1], ARGV[1], ARGV[2])
if not ft then return out end
local id = redis.call('XADD', KEYS[2], '*', unpack(out))
where_key = KEYS[#KEYS]
put_where(out, in_stream(KEYS[2], id))
redis.call('XDEL', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[3], KEYS[4], KEYS[5])
return id
