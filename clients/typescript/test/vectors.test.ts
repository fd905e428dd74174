/** The conformance vectors of schemas/vectors/ against the real TypeScript client and a real Valkey; the Python
 * client runs the same files (tests/integration/test_vectors.py). Format: schemas/vectors/README.md. */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import type { Redis } from "ioredis";

import { Client, PoolKeys, SubmitError, type TaskRequest } from "../src/index.js";
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

const BODY = JSON.parse(readFileSync(join(ROOT, "schemas", "vectors", "submit.json"), "utf8")) as {
  spec: Record<string, unknown>;
  vectors: Vector[];
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
