/** Cancelling tasks, as tierpool.client.cancels does: one CANCEL script per task (all in one pipelined round
 * trip) decides through the task-id index (`…:where`); a task the index does not know (a plain XADD of another
 * producer, or an older one) is looked for by scanning, with a number of round trips that does not grow with the
 * number of tasks. */

import { type PoolKeys, RETRY_CONSUMER } from "./keys.js";
import { cancelReport, parseResult, type CancelReport, type CancelState, type TaskResult } from "./records.js";
import { pipeline, runScripts, value, type Call, type Command, type Connection, type Reply } from "./redis.js";
import { markerTtlMs, msFloor, type PoolSpec } from "./spec.js";

/** A task's event stream is trimmed to about this many events (XADD MAXLEN ~). */
export const EVENTS_MAXLEN = 256;
const SCAN_PAGE = 1000;
/** Characters cjson writes as they are (with letters and digits): an id made of them can be a MATCH pattern. */
const JSON_PLAIN = new Set("-_.:@+=~!#$%&'()*,;<>?[]^`{|} ");
const INDEXED: Record<string, CancelState> = { running: "running", waiting: "waiting", cancelled: "waiting" };

/** KEYS and ARGV of the CANCEL script for one task (tierpool.client.cancels.cancel_call). Pure. */
export function cancelCall(keys: PoolKeys, tiers: readonly string[], taskId: string, markerMs: number, resultMs: number): Call {
  const names = [keys.result(taskId), keys.cancel(taskId), keys.events(taskId), keys.checkpoint(taskId), keys.errors];
  names.push(keys.due, keys.throttled, keys.stranded);
  const args = [taskId, String(markerMs), String(resultMs), String(EVENTS_MAXLEN), keys.group, RETRY_CONSUMER];
  for (const tier of tiers) {
    names.push(keys.tier(tier), keys.held(tier));
    args.push(tier);
  }
  return { name: "CANCEL", keys: [...names, keys.where], args };
}

export async function cancelMany(connection: Connection, keys: PoolKeys, spec: PoolSpec, taskIds: readonly string[]): Promise<CancelReport[]> {
  const ids = [...new Set(taskIds)];
  const tiers = spec.tiers.map((tier) => tier.name);
  const markerMs = markerTtlMs(spec);
  const calls = ids.map((id) => cancelCall(keys, tiers, id, markerMs, msFloor(spec.resultTtlS)));
  const replies = await runScripts(connection, calls);
  const reports = new Map<string, CancelReport>();
  ids.forEach((id, i) => {
    const reply = replies[i] as unknown[];
    const kind = String(reply[0]);
    if (kind === "finished") reports.set(id, cancelReport(id, "finished", parseResult(String(reply[1]))));
    else if (kind in INDEXED) reports.set(id, cancelReport(id, INDEXED[kind] as CancelState));
  });
  const open = ids.filter((id) => !reports.has(id));
  if (open.length > 0) for (const [id, report] of await locate(connection, keys, tiers, open, markerMs)) reports.set(id, report);
  return taskIds.map((id) => reports.get(id) as CancelReport);
}

interface EntryState {
  owner: string | undefined;
  delivered: boolean;
}

function idParts(id: string): [number, number] {
  const [ms = "0", seq = "0"] = id.split("-");
  return [Number(ms), Number(seq || "0")];
}

/** Whether a stream ID is at or below the group's last-delivered-id. */
export function isDelivered(entryId: string, lastDelivered: string): boolean {
  const [a, b] = idParts(entryId);
  const [c, d] = idParts(lastDelivered);
  return a < c || (a === c && b <= d);
}

/** The state of a task from the entries that carry it and whether it has a result
 * (tierpool.protocol.task_state.classify). */
export function classify(found: readonly EntryState[], hasResult: boolean): CancelState {
  if (found.some((entry) => entry.owner !== undefined && entry.owner !== RETRY_CONSUMER)) return "running";
  if (found.some((entry) => entry.owner === RETRY_CONSUMER || !entry.delivered)) return "waiting";
  if (hasResult || found.length > 0) return "finished";
  return "unknown";
}

/** A RESP map reply as a Map: a flat `[key, value, ...]` array (RESP2, or ioredis 6's "legacy" RESP3 mapping) or
 * an object (its "resp3" mapping). */
export function asMap(flat: unknown): Map<string, unknown> {
  const out = new Map<string, unknown>();
  if (flat !== null && typeof flat === "object" && !Array.isArray(flat)) return new Map(Object.entries(flat));
  if (!Array.isArray(flat)) return out;
  for (let i = 0; i + 1 < flat.length; i += 2) out.set(String(flat[i]), flat[i + 1]);
  return out;
}

function fieldsTaskId(flat: unknown): string | undefined {
  const found = asMap(flat).get("task_id");
  return typeof found === "string" ? found : undefined;
}

/** A payload's own task_id (a JSON object's `task_id` string of 1 to 200 UTF-8 bytes), as a worker takes it
 * from an entry of an adopted stream that carries none. */
export function payloadTaskId(payload: string): string | undefined {
  if (!payload.includes("task_id")) return undefined;
  try {
    const value = JSON.parse(payload) as unknown;
    const id = value !== null && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>)["task_id"] : undefined;
    return typeof id === "string" && id.length > 0 && Buffer.byteLength(id, "utf8") <= 200 ? id : undefined;
  } catch {
    return undefined;
  }
}

/** The task_id of an entry of an adopted stream (`tiers[].stream`): its own, its payload's own, else
 * `<stream>/<entry id>`, as the workers give it (tierpool.protocol.adopted.task_id_of). */
export function adoptedTaskId(flat: unknown, stream: string, entryId: string): string {
  const fields = asMap(flat);
  const own = fields.get("task_id");
  if (typeof own === "string") return own;
  const payload = fields.get("payload");
  return (typeof payload === "string" ? payloadTaskId(payload) : undefined) ?? `${stream}/${entryId}`;
}

/** The task_id of a scheduled member (`[tier, [field, value, …]]`). */
export function memberTaskId(member: string): string | undefined {
  try {
    const item = JSON.parse(member) as unknown;
    return Array.isArray(item) && item.length === 2 && typeof item[0] === "string" ? fieldsTaskId(item[1]) : undefined;
  } catch {
    return undefined;
  }
}

/** The task_id of a held member (`<tenant>\0<seq>\0<fields JSON>`). */
export function heldTaskId(member: string): string | undefined {
  const first = member.indexOf("\0");
  const second = first < 0 ? -1 : member.indexOf("\0", first + 1);
  if (second < 0) return undefined;
  try {
    return fieldsTaskId(JSON.parse(member.slice(second + 1)));
  } catch {
    return undefined;
  }
}

function globEscape(text: string): string {
  return [...text].map((c) => ("*?[]\\".includes(c) ? "\\" + c : c)).join("");
}

/** ZSCAN's MATCH for one task id, when the id reads the same inside the members' JSON; else undefined. */
export function matchPattern(ids: readonly string[]): string | undefined {
  const only = ids.length === 1 ? ids[0] : undefined;
  if (only === undefined || ![...only].every((c) => /^[A-Za-z0-9]$/.test(c) || JSON_PLAIN.has(c))) return undefined;
  return `*${globEscape(only)}*`;
}

async function scanSets(connection: Connection, names: string[], match: string | undefined): Promise<Map<string, Array<[string, number]>>> {
  const found = new Map(names.map((name): [string, Array<[string, number]>] => [name, []]));
  const cursors = new Map(names.map((name) => [name, "0"]));
  while (cursors.size > 0) {
    const order = [...cursors.keys()];
    const pattern = match ? ["MATCH", match] : [];
    const replies = await pipeline(connection, order.map((name): Command => ["ZSCAN", name, cursors.get(name) ?? "0", ...pattern, "COUNT", SCAN_PAGE]));
    order.forEach((name, i) => {
      const [error, reply] = replies[i] as Reply;
      const [cursor, items] = error ? ["0", []] : (reply as [string, string[]]);
      for (let j = 0; j + 1 < items.length; j += 2) found.get(name)?.push([items[j] as string, Number(items[j + 1])]);
      if (cursor === "0") cursors.delete(name);
      else cursors.set(name, cursor);
    });
  }
  return found;
}

type Match = [stream: string, id: string, taskId: string];

async function streamMatches(
  connection: Connection,
  streams: string[],
  wanted: Set<string>,
  group: string,
  adopted: ReadonlySet<string>,
): Promise<[Map<string, string | undefined>, Match[]]> {
  const infos = await pipeline(connection, streams.map((stream): Command => ["XINFO", "GROUPS", stream]));
  const lasts = new Map<string, string | undefined>();
  streams.forEach((stream, i) => {
    const [error, groups] = infos[i] as Reply;
    if (error) return;
    const found = (groups as unknown[]).map(asMap).find((info) => info.get("name") === group);
    lasts.set(stream, found === undefined ? undefined : String(found.get("last-delivered-id")));
  });
  const cursors = new Map([...lasts.keys()].map((stream) => [stream, "-"]));
  const matches: Match[] = [];
  while (cursors.size > 0) {
    const order = [...cursors.keys()];
    const pages = await pipeline(connection, order.map((stream): Command => ["XRANGE", stream, cursors.get(stream) ?? "-", "+", "COUNT", SCAN_PAGE]));
    order.forEach((stream, i) => {
      const [error, page] = pages[i] as Reply;
      const entries = error ? [] : (page as Array<[string, string[]]>);
      if (entries.length === 0) {
        cursors.delete(stream);
        return;
      }
      for (const [entryId, fields] of entries) {
        const taskId = adopted.has(stream) ? adoptedTaskId(fields, stream, entryId) : fieldsTaskId(fields);
        if (taskId !== undefined && wanted.has(taskId)) matches.push([stream, entryId, taskId]);
      }
      cursors.set(stream, "(" + (entries[entries.length - 1] as [string, string[]])[0]);
    });
  }
  return [lasts, matches];
}

function isParked(reply: Reply | undefined): boolean {
  const [error, count] = reply ?? [null, 0];
  return error !== null || Number(count) > 0;
}

/** What a cancel found, and what becomes of the marker: `extend`, `drop` or undefined
 * (tierpool.client.cancels.decide). Pure. */
export function decide(
  taskId: string,
  found: readonly EntryState[],
  rawResult: unknown,
  dueMs: number | undefined,
  held: boolean,
): [CancelReport, "extend" | "drop" | undefined] {
  const result: TaskResult | undefined = typeof rawResult === "string" && rawResult ? parseResult(rawResult) : undefined;
  const report = cancelReport(taskId, classify(found, result !== undefined), result);
  if ((report.state !== "finished" || !report.result) && dueMs !== undefined) return [cancelReport(taskId, "waiting"), "extend"];
  if (report.state === "unknown") return held ? [cancelReport(taskId, "waiting"), undefined] : [report, "drop"];
  return [report, undefined];
}

async function locate(connection: Connection, keys: PoolKeys, tiers: string[], ids: string[], markerMs: number): Promise<Map<string, CancelReport>> {
  // the places a task moves from before the places it moves to (see tierpool.client.cancels._locate); a parent
  // moves both ways between its stream and its parked hash: that is read before the streams and after
  const parkedBefore = await pipeline(connection, ids.map((id): Command => ["EXISTS", keys.parked(id)]));
  const indexed = [keys.due, keys.throttled, keys.stranded];
  const sets = await scanSets(connection, [...indexed, ...tiers.map((tier) => keys.held(tier))], matchPattern(ids));
  const due = new Map<string, number>();
  for (const name of indexed) {
    for (const [member, score] of sets.get(name) ?? []) {
      const id = memberTaskId(member);
      if (id !== undefined) due.set(id, Math.trunc(score));
    }
    sets.delete(name);
  }
  const held = new Set<string>();
  for (const members of sets.values()) {
    for (const [member] of members) {
      const id = heldTaskId(member);
      if (id !== undefined) held.add(id);
    }
  }
  // lowest priority first: an escalation moves a task up, into a tier not yet seen
  const streams = tiers.map((tier) => keys.tier(tier)).reverse();
  const [lasts, matches] = await streamMatches(connection, streams, new Set(ids), keys.group, new Set(keys.adopted.values()));
  const read = matches.filter(([stream]) => lasts.get(stream) !== undefined);
  const replies = await pipeline(connection, [
    ...read.map(([stream, id]): Command => ["XPENDING", stream, keys.group, id, id, 1]),
    ...ids.map((id): Command => ["GET", keys.result(id)]),
    ...ids.map((id): Command => ["EXISTS", keys.parked(id)]),
  ]);
  const pending = new Map(read.map(([stream, id], i) => [`${stream}\n${id}`, replies[i] as Reply]));
  const found = new Map(ids.map((id): [string, EntryState[]] => [id, []]));
  for (const [stream, entryId, taskId] of matches) {
    const last = lasts.get(stream);
    const [error, owners] = pending.get(`${stream}\n${entryId}`) ?? [null, []];
    const first = !error && Array.isArray(owners) ? (owners[0] as unknown[] | undefined) : undefined;
    found.get(taskId)?.push({ owner: first ? String(first[1]) : undefined, delivered: last !== undefined && isDelivered(entryId, last) });
  }
  const reports = new Map<string, CancelReport>();
  const after: Command[] = [];
  ids.forEach((id, i) => {
    const [error, raw] = replies[read.length + i] as Reply;
    // a parent parked in a gather waits like a held task: the worker that resumes it, and its children, see the
    // marker; a failed read counts as parked, so the marker is kept (as the Python client does)
    const waits = held.has(id) || [parkedBefore[i], replies[read.length + ids.length + i]].some(isParked);
    const [report, marker] = decide(id, found.get(id) ?? [], error ? undefined : raw, due.get(id), waits);
    if (marker === "extend") after.push(["PEXPIREAT", keys.cancel(id), (due.get(id) ?? 0) + markerMs]);
    else if (marker === "drop") after.push(["DEL", keys.cancel(id)]);
    reports.set(id, report);
  });
  (await pipeline(connection, after)).forEach(value);
  return reports;
}
