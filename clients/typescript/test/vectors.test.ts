/** The conformance vectors of schemas/vectors/ (submit, cancel, results) against the real TypeScript client and a
 * real Valkey; the Python client runs the same files (tests/integration/test_vectors.py). Format:
 * schemas/vectors/README.md. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { isDeepStrictEqual } from "node:util";
import { after, before, describe, it } from "node:test";

import type { Redis } from "ioredis";

import {
  Client, PoolKeys, SubmitError, TaskTimeoutError, type CancelReport, type TaskEvent, type TaskRequest, type TaskResult,
} from "../src/index.js";
import { connect, poolName, ROOT } from "./support.js";

interface Vector {
  name: string;
  input: Record<string, unknown>;
  repeat?: number;
  error?: string;
  expect?: {
    task_id: string;
    written: { kind: "stream" | "due"; key: string; tier?: string; score?: string; fields: Record<string, string> };
    where: string;
    ttl?: Record<string, number>;
    absent?: string[];
    members?: Record<string, string[]>;
  };
}

/** What a cancel or a follower wrote, or left alone (README.md). */
interface KeysExpected {
  strings?: Record<string, string>;
  records?: Record<string, Record<string, unknown>>;
  events?: Record<string, Array<Record<string, string>>>;
  entries?: Record<string, number>;
  where?: string | null;
  ttl?: Record<string, number>;
  absent?: string[];
  members?: Record<string, string[]>;
}

interface CancelVector {
  name: string;
  submit?: Record<string, unknown>;
  task_id?: string;
  record?: Record<string, unknown>;
  xadd?: { tier: string; fields: Record<string, string> };
  zadd?: { key: string; in_ms: number; member: string };
  hset?: { key: string; fields: Record<string, string> };
  take?: string;
  followed?: boolean;
  expect: KeysExpected & { report: Record<string, unknown> };
}

interface ResultVector {
  name: string;
  task_id: string;
  record?: Record<string, unknown>;
  events: Array<Record<string, string>>;
  timeout_s?: number;
  expect: {
    result: Record<string, unknown> | null;
    follow: Array<Record<string, unknown>>;
    events?: Array<Record<string, string>>;
    ttl?: Record<string, number>;
  };
}

const BODY = JSON.parse(readFileSync(join(ROOT, "schemas", "vectors", "submit.json"), "utf8")) as {
  spec: Record<string, unknown>;
  vectors: Vector[];
};
const CANCELS = JSON.parse(readFileSync(join(ROOT, "schemas", "vectors", "cancel.json"), "utf8")) as {
  spec: Record<string, unknown>;
  vectors: CancelVector[];
};
const RESULTS = JSON.parse(readFileSync(join(ROOT, "schemas", "vectors", "results.json"), "utf8")) as {
  spec: Record<string, unknown>;
  vectors: ResultVector[];
};
const TOKEN = /<(any|task-id|entry-id|now(?:\+[0-9]+)?)>/;
const CLOCK_SLACK_MS = 2000;
const TTL_SLACK_MS = 5000;

/** The vector's input as this client's request (`*_s` are seconds). */
function request(input: Record<string, unknown>): TaskRequest {
  const names: Record<string, string> = {
    task_id: "taskId", deadline_s: "deadline", timeout_s: "timeout", delay_s: "delay", not_before: "notBefore",
    rate_limit: "rateLimit", cost: "cost", tenant: "tenant", tier: "tier", payload: "payload",
  };
  return Object.fromEntries(Object.entries(input).map(([name, value]) => [names[name] ?? name, value])) as unknown as TaskRequest;
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Templates against what was written (the same rules as test_vectors.py's Matcher). */
class Matcher {
  readonly bound = new Map<string, string>();
  constructor(private readonly before: number, private readonly after: number, taskId: string) {
    this.bound.set("task-id", taskId);
  }
  text(template: string): string {
    return template.replace(new RegExp(TOKEN, "g"), (whole, name: string) => this.bound.get(name) ?? whole);
  }
  matches(template: string, actual: string): boolean {
    const parts = template.split(TOKEN);
    const times: number[] = [];
    let pattern = "";
    parts.forEach((part, i) => {
      if (i % 2 === 0) pattern += escape(part);
      else if (this.bound.has(part)) pattern += escape(this.bound.get(part) as string);
      else if (part === "any") pattern += "(?:[\\s\\S]*)";
      else if (part === "entry-id") pattern += "(?:[0-9]+-[0-9]+)";
      else {
        pattern += "([0-9]+)";
        times.push(Number(part.split("+")[1] ?? 0));
      }
    });
    const found = new RegExp(`^${pattern}$`).exec(actual);
    if (!found) return false;
    return times.every((plus, i) => {
      const value = Number(found[i + 1]);
      return this.before + plus - CLOCK_SLACK_MS <= value && value <= this.after + plus + CLOCK_SLACK_MS;
    });
  }
  /** A JSON value: a text with a placeholder matches a text or a whole number as its digits; else equal. */
  value(template: unknown, actual: unknown): boolean {
    if (typeof template === "string" && TOKEN.test(template) && (typeof actual === "string" || Number.isInteger(actual))) {
      return this.matches(template, String(actual));
    }
    return isDeepStrictEqual(template, actual);
  }
  record(expected: Record<string, unknown>, actual: Record<string, unknown>): void {
    assert.deepEqual(Object.keys(actual).sort(), Object.keys(expected).sort());
    for (const [name, template] of Object.entries(expected)) {
      assert.ok(this.value(template, actual[name]), `${name}=${JSON.stringify(actual[name])} does not match ${JSON.stringify(template)}`);
    }
  }
  fields(expected: Record<string, string>, actual: Record<string, string>): void {
    assert.deepEqual(Object.keys(actual).sort(), Object.keys(expected).sort());
    for (const [name, template] of Object.entries(expected)) {
      assert.ok(this.matches(template, actual[name] as string), `${name}=${JSON.stringify(actual[name])} does not match ${JSON.stringify(template)}`);
    }
  }
}

function pairs(flat: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i] as string] = flat[i + 1] as string;
  return out;
}

describe("conformance vectors (schemas/vectors/submit.json)", () => {
  let redis: Redis;
  before(() => {
    redis = connect();
  });
  after(async () => {
    await redis.quit();
  });

  for (const vector of BODY.vectors) {
    it(vector.name, async () => {
      const keys = new PoolKeys("vectors", poolName());
      const client = await Client.create(redis, keys, { spec: BODY.spec });
      if (vector.error !== undefined) {
        await assert.rejects(client.submitMany([request(vector.input)]), (error: unknown) => {
          assert.ok(error instanceof SubmitError, String(error));
          assert.ok(error.message.includes(vector.error as string), `${error.message} lacks ${vector.error}`);
          return true;
        });
        assert.deepEqual(await redis.keys(`${keys.prefix}*`), []);
        return;
      }
      const expect = vector.expect!;
      const startMs = Date.now();
      const ids: string[] = [];
      for (let i = 0; i < (vector.repeat ?? 1); i++) ids.push(...(await client.submitMany([request(vector.input)])));
      const m = new Matcher(startMs, Date.now(), ids[0] as string);
      assert.equal(new Set(ids).size, 1);
      if (expect.task_id === "<task-id>") assert.match(ids[0] as string, /^[0-9a-f]{32}$/);
      else assert.equal(ids[0], expect.task_id);
      const written = expect.written;
      const key = keys.prefix + written.key;
      if (written.kind === "stream") {
        const entries = await redis.xrange(key, "-", "+");
        assert.equal(entries.length, 1, `${key} holds ${entries.length} entries`);
        const [id, flat] = entries[0] as [string, string[]];
        m.bound.set("entry-id", id);
        m.fields(written.fields, pairs(flat));
      } else {
        const members = await redis.zrange(key, "0", "-1", "WITHSCORES");
        assert.equal(members.length, 2, `${key} holds ${members.length / 2} members`);
        const [tier, flat] = JSON.parse(members[0] as string) as [string, string[]];
        assert.equal(tier, written.tier);
        assert.ok(m.matches(written.score as string, members[1] as string), `score ${members[1]}`);
        m.fields(written.fields, pairs(flat));
      }
      const where = await redis.hget(keys.where, ids[0] as string);
      assert.ok(where !== null && m.matches(expect.where, where), `where ${where}`);
      for (const [name, ttl] of Object.entries(expect.ttl ?? {})) {
        const left = await redis.pttl(keys.prefix + m.text(name));
        assert.ok(ttl - TTL_SLACK_MS <= left && left <= ttl, `${name} lives ${left} ms, expected about ${ttl}`);
      }
      for (const name of expect.absent ?? []) assert.equal(await redis.exists(keys.prefix + m.text(name)), 0, `${name} exists`);
      for (const [name, templates] of Object.entries(expect.members ?? {})) {
        const members = await redis.zrange(keys.prefix + m.text(name), "0", "-1");
        assert.equal(members.length, templates.length);
        templates.forEach((template, i) => assert.ok(m.matches(template, members[i] as string), `${name}: ${members[i]}`));
      }
    });
  }
});

/** A result as the vectors write it: snake_case names, null for what is absent. */
function resultJson(result: TaskResult | undefined): Record<string, unknown> | null {
  if (result === undefined) return null;
  return {
    task_id: result.taskId, status: result.status, ok: result.ok, result: result.result, error: result.error ?? null,
    attempts: result.attempts, tier: result.tier ?? null, worker: result.worker ?? null,
    queue_wait_ms: result.queueWaitMs ?? null, run_ms: result.runMs ?? null, finished_at: result.finishedAt ?? null,
    reason: result.reason ?? null, children: result.children ?? null, traceback: result.traceback ?? null,
  };
}

function eventJson(event: TaskEvent): Record<string, unknown> {
  return { type: event.type, at: event.at ?? null, data: event.data, status: event.status ?? null, final: event.final };
}

function reportJson(report: CancelReport): Record<string, unknown> {
  return { state: report.state, found: report.found, cancelled: report.cancelled, result: resultJson(report.result) };
}

async function checkCommon(redis: Redis, keys: PoolKeys, expect: KeysExpected, m: Matcher): Promise<void> {
  for (const [name, ttl] of Object.entries(expect.ttl ?? {})) {
    const left = await redis.pttl(keys.prefix + m.text(name));
    assert.ok(ttl - TTL_SLACK_MS <= left && left <= ttl, `${name} lives ${left} ms, expected about ${ttl}`);
  }
  for (const name of expect.absent ?? []) assert.equal(await redis.exists(keys.prefix + m.text(name)), 0, `${name} exists`);
  for (const [name, templates] of Object.entries(expect.members ?? {})) {
    const members = await redis.zrange(keys.prefix + m.text(name), "0", "-1");
    assert.equal(members.length, templates.length, `${name}: ${members.join(" ")}`);
    templates.forEach((template, i) => assert.ok(m.matches(template, members[i] as string), `${name}: ${members[i]}`));
  }
}

/** The keys a cancel or a follower wrote (or left alone), as a vector's `expect` gives them. */
async function checkKeys(redis: Redis, keys: PoolKeys, expect: KeysExpected, m: Matcher): Promise<void> {
  for (const [name, template] of Object.entries(expect.strings ?? {})) {
    const value = await redis.get(keys.prefix + m.text(name));
    assert.ok(value !== null && m.matches(template, value), `${name}=${value}`);
  }
  for (const [name, record] of Object.entries(expect.records ?? {})) {
    const text = await redis.get(keys.prefix + m.text(name));
    assert.ok(text !== null, `${name} is missing`);
    m.record(record, JSON.parse(text) as Record<string, unknown>);
  }
  for (const [name, events] of Object.entries(expect.events ?? {})) {
    const entries = await redis.xrange(keys.prefix + m.text(name), "-", "+");
    assert.equal(entries.length, events.length, `${name}: ${JSON.stringify(entries)}`);
    entries.forEach(([, flat], i) => m.fields(events[i] as Record<string, string>, pairs(flat)));
  }
  for (const [name, count] of Object.entries(expect.entries ?? {})) assert.equal(await redis.xlen(keys.prefix + m.text(name)), count, name);
  if (expect.where !== undefined) {
    const where = await redis.hget(keys.where, m.bound.get("task-id") as string);
    if (expect.where === null) assert.equal(where, null);
    else assert.ok(where !== null && m.matches(expect.where, where), `where ${where}`);
  }
  await checkCommon(redis, keys, expect, m);
}

async function rejectsTimeout(run: Promise<unknown>): Promise<void> {
  await assert.rejects(run, (error: unknown) => error instanceof TaskTimeoutError);
}

describe("conformance vectors (schemas/vectors/cancel.json)", () => {
  let redis: Redis;
  before(() => {
    redis = connect();
  });
  after(async () => {
    await redis.quit();
  });

  for (const vector of CANCELS.vectors) {
    it(vector.name, async () => {
      const keys = new PoolKeys("vectors", poolName());
      const client = await Client.create(redis, keys, { spec: CANCELS.spec });
      const startMs = Date.now();
      const taskId = vector.task_id ?? ((await client.submitMany([request(vector.submit ?? {})]))[0] as string);
      if (vector.record !== undefined) await redis.set(keys.result(taskId), JSON.stringify(vector.record));
      const tier = (vector.submit ?? vector.xadd)?.["tier"] as string | undefined;
      const stream = tier === undefined ? undefined : keys.tier(tier);
      if (vector.xadd !== undefined) await redis.xadd(keys.tier(tier as string), "*", ...Object.entries(vector.xadd.fields).flat());
      if (vector.zadd !== undefined) await redis.zadd(keys.prefix + vector.zadd.key, Date.now() + vector.zadd.in_ms, vector.zadd.member);
      if (vector.hset !== undefined) await redis.hset(keys.prefix + vector.hset.key, vector.hset.fields);
      if (vector.take !== undefined && stream !== undefined) {
        await redis.xgroup("CREATE", stream, keys.group, "0");
        assert.ok(await redis.xreadgroup("GROUP", keys.group, vector.take, "COUNT", 1, "STREAMS", stream, ">"));
      }
      if (vector.followed) await rejectsTimeout(client.waitResult(taskId, 0.1));
      const entries = stream === undefined ? [] : await redis.xrange(stream, "-", "+");
      const report = await client.cancel(taskId);
      const m = new Matcher(startMs, Date.now(), taskId);
      if (entries.length > 0) m.bound.set("entry-id", (entries[0] as [string, string[]])[0]);
      assert.deepEqual(reportJson(report), vector.expect.report);
      await checkKeys(redis, keys, vector.expect, m);
    });
  }
});

describe("conformance vectors (schemas/vectors/results.json)", () => {
  let redis: Redis;
  before(() => {
    redis = connect();
  });
  after(async () => {
    await redis.quit();
  });

  for (const vector of RESULTS.vectors) {
    it(vector.name, async () => {
      const keys = new PoolKeys("vectors", poolName());
      const client = await Client.create(redis, keys, { spec: RESULTS.spec });
      const { task_id: taskId, expect } = vector;
      if (vector.record !== undefined) await redis.set(keys.result(taskId), JSON.stringify(vector.record), "PX", 3_600_000);
      for (const fields of vector.events) await redis.xadd(keys.events(taskId), "*", ...Object.entries(fields).flat());
      const startMs = Date.now();
      assert.deepEqual(resultJson(await client.result(taskId)), expect.result);
      const timeout = vector.timeout_s ?? 5;
      const followed: Array<TaskEvent | TaskResult> = [];
      const follow = async (): Promise<void> => {
        for await (const item of client.follow(taskId, timeout)) followed.push(item);
      };
      if (expect.result === null) {
        await rejectsTimeout(client.waitResult(taskId, timeout));
        await rejectsTimeout(follow());
      } else {
        assert.deepEqual(resultJson(await client.waitResult(taskId, timeout)), expect.result);
        await follow();
        const last = followed.pop();
        assert.ok(last?.kind === "result", `follow ended with ${JSON.stringify(last)}`);
        assert.deepEqual(resultJson(last), expect.result);
      }
      assert.ok(followed.every((item) => item.kind === "event"));
      assert.deepEqual(followed.map((item) => eventJson(item as TaskEvent)), expect.follow);
      const m = new Matcher(startMs, Date.now(), taskId);
      await checkKeys(redis, keys, { events: { "events:<task-id>": expect.events ?? vector.events } }, m);
      await checkCommon(redis, keys, { ttl: expect.ttl ?? {} }, m);
    });
  }
});
