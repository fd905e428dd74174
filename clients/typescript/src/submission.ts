/** Validating and encoding a task before it is enqueued, as worker/tierpool/protocol/submission.py does (the same
 * checks, limits, messages and envelope fields). Pure, no I/O. */

import { randomUUID } from "node:crypto";

import type { PoolKeys } from "./keys.js";
import { PROTOCOL } from "./scripts.js";
import { msCeil, msFloor, type PoolSpec } from "./spec.js";

/** A task that cannot be enqueued: unknown tier, payload not JSON or too large, bad task_id, ... */
export class SubmitError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SubmitError";
  }
}

export const MAX_TASK_ID_LENGTH = 200;
/** Longest delay a submit may ask for (a year), in seconds. */
export const MAX_DELAY = 366 * 86_400;
/** MAX_DELAY as Python's `{:g}` writes it in the same message. */
const MAX_DELAY_TEXT = "3.16224e+07";
/** A tenant: 1-128 characters, letters, digits and `._:@/+=-`, starting with a letter or digit. */
export const TENANT_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:@/+=-]{0,127}$/;
/** What Python's `str.isspace` calls whitespace (a task_id holds none). */
const WHITESPACE = /[\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]/u;

export interface SubmitOptions {
  /** A chosen id is deduplicated within the pool's `dedupeWindow`; default: a fresh UUID (hex). */
  taskId?: string;
  /** The task is dead-lettered unstarted after this time: a Date, or seconds from now. */
  deadline?: Date | number;
  /** Time limit of each run, in seconds (at least 0.001); default: the pool's `tasks.timeout`. */
  timeout?: number;
  /** Run no earlier than this many seconds from now (on Redis' clock), 0 to a year. */
  delay?: number;
  /** Run no earlier than this time: a Date, or ISO 8601 text with its offset (`2026-01-01T09:00:00Z`). */
  notBefore?: Date | string;
  /** Draw from this `spec.rateLimits` entry before running (wins over the handler's). */
  rateLimit?: string;
  /** Tokens drawn from the rate limit's `tokensPerMinute` bucket (default 1). */
  cost?: number;
  /** Who the task is for: on a tier with `tenantConcurrency` it waits for its tenant's turn. */
  tenant?: string;
  /** The name of the task to run (the envelope's `task` field; see issue #25): written when given. */
  task?: string;
}

export interface TaskRequest extends SubmitOptions {
  tier: string;
  payload: unknown;
}

export interface Gate {
  /** stream, dedupe, queued, held, held seq (the SUBMIT_GATED script). */
  readonly keys: readonly [string, string, string, string, string];
  /** The tier's tenant counts, passed in ARGV: a producer reads it but may not write it. */
  readonly tenants: string;
  readonly limit: number;
  readonly tenant: string;
}

/** A validated task, ready for its script. */
export interface Submission {
  readonly taskId: string;
  readonly stream: string;
  /** The envelope's fields in the order they are written. */
  readonly fields: ReadonlyArray<readonly [string, string]>;
  readonly dedupeKey: string | undefined;
  readonly delayMs: number;
  readonly notBeforeMs: number;
  readonly gate: Gate | undefined;
}

export function scheduled(item: Submission): boolean {
  return item.delayMs > 0 || item.notBeforeMs > 0;
}

function hex4(unit: number): string {
  return "\\u" + unit.toString(16).padStart(4, "0");
}

/** `value` as Python's `json.dumps(value, separators=(",", ":"), allow_nan=False)` writes it (ASCII only,
 * every other character as a `\uXXXX` escape), so a payload's bytes and size are those the Python client would
 * write. SubmitError for what JSON cannot hold (undefined, functions, symbols, BigInt, NaN, Infinity). Numbers
 * are written as JavaScript writes them (JavaScript has no float that prints as `1.0`). */
export function pythonJson(value: unknown): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value, (_key, item: unknown) => {
      if (typeof item === "number" && !Number.isFinite(item)) throw new SubmitError(`${item} is not JSON`);
      if (item === undefined || typeof item === "function" || typeof item === "symbol") {
        throw new SubmitError(`a ${typeof item} is not JSON`);
      }
      // JSON.stringify would write them as {} and lose their contents; Python refuses a set or a mapping type
      if (item instanceof Map || item instanceof Set) throw new SubmitError(`a ${item.constructor.name} is not JSON`);
      return item;
    });
  } catch (error) {
    throw new SubmitError(`payload is not JSON-serialisable: ${(error as Error).message}`);
  }
  if (text === undefined) throw new SubmitError("payload is not JSON-serialisable");
  return text.replace(/[\u007f-\uffff]/g, (c) => hex4(c.charCodeAt(0)));
}

function utf8Length(text: string): number {
  return Buffer.byteLength(text, "utf8");
}

function deadlineMs(deadline: Date | number | undefined, nowMs: number): number | undefined {
  if (deadline === undefined) return undefined;
  if (typeof deadline === "number") {
    if (!Number.isFinite(deadline)) throw new SubmitError(`deadline must be a Date or finite seconds from now`);
    return nowMs + msFloor(deadline);
  }
  if (!(deadline instanceof Date) || Number.isNaN(deadline.getTime())) {
    throw new SubmitError("deadline must be a valid Date (or seconds from now)");
  }
  return deadline.getTime();
}

function timeoutMs(timeout: number | undefined): number | undefined {
  if (timeout === undefined) return undefined;
  if (typeof timeout !== "number" || !(timeout >= 0.001) || timeout === Infinity) {
    throw new SubmitError(`timeout must be a finite duration of at least 1ms, not ${String(timeout)}`);
  }
  return msFloor(timeout);
}

function delayMs(delay: number | undefined): number {
  if (delay === undefined) return 0;
  if (typeof delay !== "number" || !(delay >= 0 && delay <= MAX_DELAY)) {
    throw new SubmitError(`delay must be between 0 and ${MAX_DELAY_TEXT} seconds, not ${String(delay)}`);
  }
  return msCeil(delay);
}

/** ISO 8601 as Python's datetime.fromisoformat reads a time with an offset: `YYYY-MM-DD[T ]HH:MM[:SS[.f…]]`, then
 * `Z` or `±HH[:MM]`. */
const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?)?(Z|[+-]\d{2}(?::?\d{2})?)?$/;

/** ms since the epoch of a not-before time, rounded up (a fraction below 1 ms makes it the next ms). */
function notBeforeMs(when: Date | string | undefined): number {
  if (when === undefined) return 0;
  if (when instanceof Date) {
    if (Number.isNaN(when.getTime())) throw new SubmitError("notBefore is an invalid Date");
    return when.getTime();
  }
  const match = typeof when === "string" ? ISO.exec(when) : null;
  if (!match) throw new SubmitError(`notBefore ${JSON.stringify(when)} is not an ISO 8601 time`);
  const [, y, mo, d, h = "0", mi = "0", s = "0", fraction = "", zone] = match;
  if (zone === undefined) throw new SubmitError("notBefore must carry a time zone (e.g. 2026-01-01T09:00:00Z)");
  let offsetMin = 0;
  let zoneOk = true;
  if (zone !== "Z") {
    const digits = zone.slice(1).replace(":", "");
    const [zoneH, zoneM] = [Number(digits.slice(0, 2)), Number(digits.slice(2) || "0")];
    zoneOk = zoneH <= 23 && zoneM <= 59;
    offsetMin = (zone[0] === "-" ? -1 : 1) * (zoneH * 60 + zoneM);
  }
  const wall = Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s));
  const check = new Date(wall);
  const inRange = Number(h) <= 23 && Number(mi) <= 59 && Number(s) <= 59 && zoneOk;
  if (Number.isNaN(wall) || !inRange || check.getUTCDate() !== Number(d) || check.getUTCMonth() !== Number(mo) - 1) {
    throw new SubmitError(`notBefore ${JSON.stringify(when)} is not an ISO 8601 time`);
  }
  // the fraction in whole microseconds (Python's datetime keeps six digits), then up to the next ms
  const micros = Number((fraction + "000000").slice(0, 6));
  return wall - offsetMin * 60_000 + Math.ceil(micros / 1000);
}

function checkRateLimit(spec: PoolSpec, request: TaskRequest): void {
  if (request.rateLimit !== undefined && !spec.rateLimits.includes(request.rateLimit)) {
    const known = spec.rateLimits.join(", ") || "none";
    throw new SubmitError(`unknown rate limit '${request.rateLimit}'; this pool has ${known}`);
  }
  if (request.cost !== undefined && (typeof request.cost !== "number" || !Number.isInteger(request.cost))) {
    throw new SubmitError(`cost must be a whole number of tokens, not ${String(request.cost)}`);
  }
  if (request.cost !== undefined && request.cost < 1) {
    throw new SubmitError(`cost must be at least 1, not ${request.cost}`);
  }
}

/** Why `tenant` is not a valid tenant name, or undefined. */
export function tenantError(tenant: string): string | undefined {
  if (typeof tenant === "string" && TENANT_PATTERN.test(tenant)) return undefined;
  return "tenant must be 1-128 characters: letters, digits and ._:@/+=-, starting with a letter or digit";
}

function checkId(value: unknown, what: string): asserts value is string {
  if (
    typeof value !== "string" ||
    !value ||
    [...value].length > MAX_TASK_ID_LENGTH ||
    WHITESPACE.test(value)
  ) {
    throw new SubmitError(`${what} must be 1-${MAX_TASK_ID_LENGTH} characters with no whitespace`);
  }
  if (!value.isWellFormed()) {
    throw new SubmitError(`${what} must be UTF-8 text; it holds a lone surrogate`);
  }
}

/** Envelope fields for XADD (tierpool.protocol.envelope.encode), the writer's `protocol` last. */
export function encode(
  taskId: string,
  tier: string,
  payloadJson: string,
  createdAtMs: number,
  options: {
    deadlineMs?: number | undefined;
    timeoutMs?: number | undefined;
    rateLimit?: string | undefined;
    cost?: number | undefined;
    tenant?: string | undefined;
    task?: string | undefined;
  } = {},
): Array<[string, string]> {
  const fields: Array<[string, string]> = [
    ["task_id", taskId],
    ["tier", tier],
    ["payload", payloadJson],
    ["created_at", String(createdAtMs)],
  ];
  if (options.deadlineMs !== undefined) fields.push(["deadline", String(options.deadlineMs)]);
  if (options.timeoutMs !== undefined) fields.push(["timeout", String(options.timeoutMs)]);
  if (options.rateLimit !== undefined) fields.push(["rate_limit", options.rateLimit]);
  if (options.cost !== undefined) fields.push(["cost", String(options.cost)]);
  if (options.tenant !== undefined) fields.push(["tenant", options.tenant]);
  if (options.task !== undefined) fields.push(["task", options.task]);
  fields.push(["protocol", String(PROTOCOL)]);
  return fields;
}

/** A fresh task_id: a UUID4 as 32 hex digits, as Python's `uuid.uuid4().hex`. */
export function newTaskId(): string {
  return randomUUID().replaceAll("-", "");
}

/** The request with each option given as null taken as not given (Python's None), for callers in JavaScript. */
function withoutNulls(request: TaskRequest): TaskRequest {
  const given = Object.entries(request).filter(([name, value]) => value !== null || name === "payload");
  return Object.fromEntries(given) as unknown as TaskRequest;
}

/** Check a request against the pool's rules and encode it; SubmitError says what is wrong. An option given as
 * null counts as not given. */
export function prepare(spec: PoolSpec, keys: PoolKeys, given: TaskRequest, nowMs: number): Submission {
  const request = withoutNulls(given);
  const tier = spec.tiers.find((item) => item.name === request.tier);
  if (tier === undefined) {
    const names = spec.tiers.map((item) => item.name).join(", ");
    throw new SubmitError(`unknown tier '${String(request.tier)}'; this pool has ${names}`);
  }
  const payloadJson = pythonJson(request.payload);
  const size = utf8Length(payloadJson);
  if (size > spec.maxPayloadBytes) {
    throw new SubmitError(`payload is ${size} bytes; this pool accepts at most ${spec.maxPayloadBytes}`);
  }
  const taskId = request.taskId ?? newTaskId();
  checkId(taskId, "task_id");
  if (request.tenant !== undefined) {
    const problem = tenantError(request.tenant);
    if (problem) throw new SubmitError(problem);
  }
  const deadline = deadlineMs(request.deadline, nowMs);
  const timeout = timeoutMs(request.timeout);
  checkRateLimit(spec, request);
  const delay = delayMs(request.delay);
  const notBefore = notBeforeMs(request.notBefore);
  if (request.task !== undefined) checkId(request.task, "task");
  const fields = encode(taskId, tier.name, payloadJson, nowMs, {
    deadlineMs: deadline,
    timeoutMs: timeout,
    rateLimit: request.rateLimit,
    cost: request.cost,
    tenant: request.tenant,
    task: request.task,
  });
  const dedupeKey = request.taskId !== undefined ? keys.dedupe(taskId) : undefined;
  const gate: Gate | undefined =
    request.tenant !== undefined && tier.tenantConcurrency !== undefined
      ? {
          keys: [keys.tier(tier.name), keys.dedupe(taskId), keys.queued(tier.name), keys.held(tier.name), keys.heldSeq(tier.name)],
          tenants: keys.tenants(tier.name),
          limit: tier.tenantConcurrency,
          tenant: request.tenant,
        }
      : undefined;
  return { taskId, stream: keys.tier(tier.name), fields, dedupeKey, delayMs: delay, notBeforeMs: notBefore, gate };
}

/** A script call: its name, KEYS and ARGV. */
export interface ScriptCall {
  readonly name: "SUBMIT" | "SUBMIT_ONCE" | "SUBMIT_GATED" | "SCHEDULE";
  readonly keys: string[];
  readonly args: string[];
}

function flat(item: Submission): string[] {
  return item.fields.flatMap(([name, value]) => [name, value]);
}

/** The write of a prepared task: the schedule, tenant-gate, dedupe or plain submit script, with the KEYS and
 * ARGV of tierpool.client.submits._submit_calls. Pure. */
export function submitCall(keys: PoolKeys, dedupeTtlMs: number, item: Submission): ScriptCall {
  const ttl = item.dedupeKey ? dedupeTtlMs : 0;
  const tierField = item.fields[1]?.[1] ?? "";
  if (scheduled(item)) {
    return {
      name: "SCHEDULE",
      keys: [keys.due, item.stream, item.dedupeKey ?? keys.dedupe(item.taskId), keys.where],
      args: [String(ttl), String(item.delayMs), String(item.notBeforeMs), tierField, item.gate ? "1" : "0", ...flat(item)],
    };
  }
  if (item.gate) {
    return {
      name: "SUBMIT_GATED",
      keys: [...item.gate.keys, keys.where],
      args: [String(ttl), String(item.gate.limit), item.gate.tenant, item.gate.tenants, ...flat(item)],
    };
  }
  if (item.dedupeKey) {
    return { name: "SUBMIT_ONCE", keys: [item.stream, item.dedupeKey, keys.where], args: [String(dedupeTtlMs), ...flat(item)] };
  }
  return { name: "SUBMIT", keys: [item.stream, keys.where], args: flat(item) };
}
