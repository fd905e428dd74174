/** Following a task and waiting for its result without polling, as tierpool.client.tracking does.
 *
 * A follower of an unfinished task first appends a `follow` event to the task's event stream (creating it:
 * outcome scripts append their final event only to a stream that exists), then reads the result record, then
 * blocks on the stream (XREAD BLOCK) for the next events. The final event wakes it at once; the result record is
 * read again at least every second as well, which covers outcomes that append no event. Once the result record
 * is seen, the follower reads the stream to its end before it yields the result, so no event is dropped. */

import { Cluster } from "ioredis";

import { EVENTS_MAXLEN } from "./cancel.js";
import type { PoolKeys } from "./keys.js";
import { parseEvent, parseResult, type TaskEvent, type TaskResult } from "./records.js";
import { api, type Connection } from "./redis.js";
import { msFloor } from "./spec.js";

/** A follower reads the result record again at least this often. */
export const BLOCK_SLICE_MS = 1000;
export const EVENT_BATCH = 100;

/** No result within the time asked for. */
export class TaskTimeoutError extends Error {
  constructor(
    readonly taskId: string,
    readonly timeoutS: number,
  ) {
    super(`no result for task ${taskId} within ${timeoutS}s`);
    this.name = "TimeoutError";
  }
}

/** How long the next blocking read may wait, with `leftMs` to the deadline: 0 when the time is up. */
export function blockMs(leftMs: number): number {
  return leftMs <= 0 ? 0 : Math.max(1, Math.min(Math.floor(leftMs), BLOCK_SLICE_MS));
}

/** A new connection like `connection`, for blocking reads. */
function duplicate(connection: Connection): Connection {
  return connection instanceof Cluster ? (connection as Cluster).duplicate() : api(connection).duplicate();
}

type Entries = Array<[string, string[]]>;

/** The entries of an XREAD of one stream, in each shape ioredis gives it: `[[key, entries]]` (RESP2),
 * `[key, entries]` (RESP3 with ioredis 6's default "legacy" mapping), `{key: entries}` (RESP3, "resp3"). */
export function readEntries(reply: unknown): Entries {
  if (reply === null || typeof reply !== "object") return [];
  if (!Array.isArray(reply)) return (Object.values(reply)[0] as Entries | undefined) ?? [];
  const first: unknown = reply[0];
  if (typeof first === "string") return (reply[1] as Entries | undefined) ?? [];
  return ((first as [string, Entries] | undefined)?.[1] as Entries | undefined) ?? [];
}

/** The task's events as they come (progress and the final one), then its result record, which it also
 * returns; TaskTimeoutError after `timeoutS` seconds without a result. Blocking reads go on their own
 * connection (a duplicate of `connection`, closed at the end), so the client's connection is never blocked. */
export async function* follow(
  connection: Connection,
  keys: PoolKeys,
  taskId: string,
  timeoutS: number,
  ttlMs: number,
): AsyncGenerator<TaskEvent | TaskResult, TaskResult> {
  const key = keys.events(taskId);
  const resultKey = keys.result(taskId);
  const deadline = performance.now() + msFloor(timeoutS);
  let last = "0-0";
  let reader: Connection | undefined;
  const redis = api(connection);
  try {
    if (!(await redis.exists(resultKey))) {
      // finished tasks need no follow event
      const replies = await redis
        .multi()
        .call("XADD", key, "MAXLEN", "~", EVENTS_MAXLEN, "*", "type", "follow", "at", String(Date.now()))
        .call("PEXPIRE", key, ttlMs)
        .exec();
      for (const [error] of replies ?? []) if (error) throw error;
    }
    for (;;) {
      const raw = await redis.get(resultKey);
      const block = raw ? undefined : blockMs(deadline - performance.now());
      if (block === 0) throw new TaskTimeoutError(taskId, timeoutS);
      for (;;) {
        // with the result seen: every event left, then the result (a batch per round trip)
        const args: Array<string | number> = ["COUNT", EVENT_BATCH];
        if (block !== undefined) args.push("BLOCK", block);
        reader ??= duplicate(connection);
        const entries = readEntries(await api(reader).call("XREAD", ...args, "STREAMS", key, last));
        for (const [id, fields] of entries) {
          last = id;
          const event = parseEvent(id, fields);
          if (event.type !== "follow") yield event;
        }
        if (!raw || entries.length === 0) break;
      }
      if (raw) {
        const result = parseResult(raw);
        yield result;
        return result;
      }
    }
  } finally {
    if (reader) api(reader).disconnect();
  }
}
