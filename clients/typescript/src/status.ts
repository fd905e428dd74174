/** Where a task is now, read-only: its result record, else the place the task-id index (`…:where`, written by
 * every script that moves a task; see worker/tierpool/scripts/helpers/where.lua) gives it, checked against the
 * tier stream's pending entries. */

import { type PoolKeys, RETRY_CONSUMER } from "./keys.js";
import { parseResult, type TaskResult } from "./records.js";
import { asMap, isDelivered } from "./cancel.js";
import { pipeline, value, type Connection, type Reply } from "./redis.js";

export type TaskState = "finished" | "running" | "waiting" | "scheduled" | "held" | "unknown";

export interface TaskStatus {
  readonly taskId: string;
  /** `finished` (it has a result record), `running` (a worker owns its entry), `waiting` (in its tier's stream,
   * not delivered yet or parked for a retry), `scheduled` (in the due-time index, throttled or stranded, until
   * `dueAt`), `held` (waiting for its tenant's turn), `unknown` (none of these: never submitted, expired, or
   * enqueued by a plain XADD). */
  readonly state: TaskState;
  readonly result: TaskResult | undefined;
  /** The tier whose stream or held set it is in. */
  readonly tier: string | undefined;
  /** When a scheduled task comes due, ms since the epoch (Redis' clock). */
  readonly dueAt: number | undefined;
}

function lastDelivered(groups: unknown, group: string): string | undefined {
  for (const info of Array.isArray(groups) ? groups : []) {
    const fields = asMap(info);
    if (fields.get("name") === group) return String(fields.get("last-delivered-id"));
  }
  return undefined;
}

function status(taskId: string, state: TaskState, extra: Partial<TaskStatus> = {}): TaskStatus {
  return { taskId, state, result: undefined, tier: undefined, dueAt: undefined, ...extra };
}

export async function taskStatus(connection: Connection, keys: PoolKeys, tiers: readonly string[], taskId: string): Promise<TaskStatus> {
  const [raw, place] = (await pipeline(connection, [["GET", keys.result(taskId)], ["HGET", keys.where, taskId]])).map(value);
  if (typeof raw === "string" && raw) return status(taskId, "finished", { result: parseResult(raw) });
  if (typeof place !== "string") return status(taskId, "unknown");
  const [, kind, rest = ""] = /^([a-z]+):(.*)$/s.exec(place) ?? [];
  if (kind === "stream") {
    const [, named, id] = /^(.*):([^:]+)$/s.exec(rest) ?? [];
    const tier = named === undefined ? undefined : keys.tierOfPlace(named, tiers);
    if (tier === undefined || id === undefined) return status(taskId, "unknown");
    const stream = keys.tier(tier);
    const [[pendingError, pending], [groupsError, groups], [, entries]] = await pipeline(connection, [
      ["XPENDING", stream, keys.group, id, id, 1],
      ["XINFO", "GROUPS", stream],
      ["XRANGE", stream, id, id],
    ]) as [Reply, Reply, Reply];
    const owner = !pendingError && Array.isArray(pending) ? (pending[0] as unknown[] | undefined)?.[1] : undefined;
    if (owner !== undefined) return status(taskId, owner === RETRY_CONSUMER ? "waiting" : "running", { tier });
    const group = groupsError ? undefined : lastDelivered(groups, keys.group);
    // delivered and no longer pending: acked, its record on the way (or expired)
    if (group !== undefined && isDelivered(id, group)) return status(taskId, "unknown", { tier });
    return status(taskId, Array.isArray(entries) && entries.length > 0 ? "waiting" : "unknown", { tier });
  }
  if (kind === "due" || kind === "throttled" || kind === "stranded") return status(taskId, "scheduled", { dueAt: Number(rest) });
  if (kind === "held") return status(taskId, "held", { tier: rest.split(":", 1)[0] });
  return status(taskId, "unknown");
}
