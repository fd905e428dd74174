/** The pure parts: the script bundle against the .lua files, payload JSON as Python writes it, validation. */

import assert from "node:assert/strict";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

import { PoolKeys } from "../src/keys.js";
import { assemble, includes, SCRIPTS, sha1Hex, type ScriptName } from "../src/scripts.js";
import { parseDuration, parseSpec, checkProtocol, ProtocolError } from "../src/spec.js";
import { prepare, pythonJson, submitCall, SubmitError, type TaskRequest } from "../src/submission.js";
import { ROOT } from "./support.js";

const LUA = join(ROOT, "worker", "tierpool", "scripts");
const SPEC = parseSpec({ tiers: [{ name: "p0", tenantConcurrency: 1 }, { name: "p1" }], rateLimits: [{ name: "llm", perMinute: 6 }] });
const KEYS = new PoolKeys("ns", "pool");

function luaFiles(folder: string, prefix = ""): string[] {
  return readdirSync(folder)
    .sort()
    .flatMap((name) => {
      const path = prefix + name;
      if (statSync(join(folder, name)).isDirectory()) return path === "helpers" ? [] : luaFiles(join(folder, name), path + "/");
      return name.endsWith(".lua") ? [path] : [];
    });
}

describe("the script bundle", () => {
  it("is what the include convention assembles from the .lua files, SHA1 and all", () => {
    const read = (path: string): string => readFileSync(join(LUA, path), "utf8");
    const byName = new Map(luaFiles(LUA).map((path) => [path.split("/").pop()!.replace(/\.lua$/, "").toUpperCase(), path]));
    for (const [name, script] of Object.entries(SCRIPTS)) {
      assert.equal(byName.get(name), script.path, `${name} is ${script.path}`);
      const source = assemble(script.path, read);
      assert.equal(source, script.source, `scripts.json's ${name} differs from its .lua files: run make ts-scripts`);
      assert.deepEqual(includes(read(script.path)), script.includes);
      assert.equal(sha1Hex(source), script.sha);
    }
    assert.deepEqual(Object.keys(SCRIPTS).sort(), ["CANCEL", "SCHEDULE", "SUBMIT", "SUBMIT_GATED", "SUBMIT_ONCE"]);
  });

  it("refuses a helper that includes another", () => {
    const files: Record<string, string> = { "a.lua": "-- include: helpers/b.lua\nx()\n", "helpers/b.lua": "-- include: helpers/c.lua\n" };
    assert.throws(() => assemble("a.lua", (path) => files[path] as string), /a helper under helpers\/ includes nothing/);
  });
});

describe("payload JSON", () => {
  it("is compact ASCII JSON, as Python's json.dumps writes it", () => {
    assert.equal(pythonJson({ a: [1, "é", null], b: { c: true } }), '{"a":[1,"\\u00e9",null],"b":{"c":true}}');
    assert.equal(pythonJson("😀\u007f\u0001"), '"\\ud83d\\ude00\\u007f\\u0001"');
    assert.equal(pythonJson("\ud800"), '"\\ud800"');
  });

  it("refuses what JSON cannot hold", () => {
    for (const bad of [NaN, Infinity, undefined, { f: () => 1 }, [Symbol("s")], 10n, new Map([[1, 2]]), { s: new Set([1]) }]) {
      assert.throws(() => pythonJson(bad), SubmitError);
    }
  });
});

describe("prepare", () => {
  it("writes the envelope fields in the Python client's order, protocol last", () => {
    const item = prepare(SPEC, KEYS, { tier: "p1", payload: 1, taskId: "t1", timeout: 2.5, rateLimit: "llm", cost: 3, task: "summarise" }, 1000);
    assert.deepEqual(item.fields.map(([name]) => name), ["task_id", "tier", "payload", "created_at", "timeout", "rate_limit", "cost", "task", "protocol"]);
    assert.deepEqual(Object.fromEntries(item.fields), {
      task_id: "t1", tier: "p1", payload: "1", created_at: "1000", timeout: "2500", rate_limit: "llm", cost: "3", task: "summarise", protocol: "10",
    });
    assert.equal(item.dedupeKey, "tierpool:{ns/pool}:dedupe:t1");
  });

  it("sends each kind of submit through its script with the Python client's KEYS and ARGV", () => {
    const plain = submitCall(KEYS, 600, prepare(SPEC, KEYS, { tier: "p1", payload: {} }, 5));
    assert.equal(plain.name, "SUBMIT");
    assert.deepEqual(plain.keys, ["tierpool:{ns/pool}:tier:p1", "tierpool:{ns/pool}:where"]);
    const gated = submitCall(KEYS, 600, prepare(SPEC, KEYS, { tier: "p0", payload: {}, tenant: "acme" }, 5));
    assert.equal(gated.name, "SUBMIT_GATED");
    assert.deepEqual(gated.args.slice(0, 4), ["0", "1", "acme", "tierpool:{ns/pool}:tenants:p0"]);
    assert.equal(gated.keys.length, 6);
    const later = submitCall(KEYS, 600, prepare(SPEC, KEYS, { tier: "p0", payload: {}, tenant: "acme", taskId: "x", delay: 1.0001 }, 5));
    assert.equal(later.name, "SCHEDULE");
    assert.deepEqual(later.args.slice(0, 5), ["600", "1001", "0", "p0", "1"]);
    assert.deepEqual(later.keys, ["tierpool:{ns/pool}:due", "tierpool:{ns/pool}:tier:p0", "tierpool:{ns/pool}:dedupe:x", "tierpool:{ns/pool}:where"]);
  });

  it("validates task ids as Python does: code points, Unicode whitespace, no lone surrogate", () => {
    prepare(SPEC, KEYS, { tier: "p1", payload: 1, taskId: "😀".repeat(200) }, 0);
    for (const bad of ["😀".repeat(201), "a\u2003b", "a\x1fb", "a\u0085"]) {
      assert.throws(() => prepare(SPEC, KEYS, { tier: "p1", payload: 1, taskId: bad }, 0), /task_id must be 1-200 characters/);
    }
    assert.throws(() => prepare(SPEC, KEYS, { tier: "p1", payload: 1, taskId: "a\ud800" }, 0), /lone surrogate/);
    assert.throws(() => prepare(SPEC, KEYS, { tier: "p1", payload: 1, task: "two words" }, 0), /task must be 1-200/);
  });

  it("takes an option given as null (from JavaScript) as not given, like Python's None", () => {
    const loose = { tier: "p1", payload: null, taskId: null, tenant: null, delay: null, deadline: null } as unknown as TaskRequest;
    const item = prepare(SPEC, KEYS, loose, 7);
    assert.equal(item.dedupeKey, undefined, "a generated id is not deduplicated");
    assert.equal(item.delayMs, 0);
    assert.deepEqual(item.fields.map(([name]) => name), ["task_id", "tier", "payload", "created_at", "protocol"]);
    assert.equal(item.fields[2]?.[1], "null");
  });

  it("reads not-before times with their zone, rounded up to the ms", () => {
    const at = (notBefore: string): number => prepare(SPEC, KEYS, { tier: "p1", payload: 1, notBefore }, 0).notBeforeMs;
    assert.equal(at("2030-01-01T00:00:00Z"), Date.UTC(2030, 0, 1));
    assert.equal(at("2030-01-01T02:00:00.0001+02:00"), Date.UTC(2030, 0, 1) + 1);
    assert.equal(at("2030-01-01 00:00:00.250-01:30"), Date.UTC(2030, 0, 1, 1, 30) + 250);
    for (const bad of ["2030-02-30T00:00:00Z", "2030-01-01T23:60:00Z", "2030-01-01T24:00:00Z", "2030-01-01T00:00:61Z", "2030-01-01T00:00:00+24:00", "2030-01-01T00:00:00z"]) {
      assert.throws(() => at(bad), /not an ISO 8601 time/, bad);
    }
    assert.throws(() => at("2030-01-01T00:00:00"), /must carry a time zone/);
  });
});

describe("keys", () => {
  it("name the pool's keys under its hash tag, and a tier's adopted stream instead of its own", () => {
    const keys = PoolKeys.parse("ns/pool").withSpec(parseSpec({ consumerGroup: "g", tiers: [{ name: "p0", stream: "tasks:p0" }, { name: "p1" }] }));
    assert.equal(keys.tier("p0"), "tasks:p0");
    assert.equal(keys.tier("p1"), "tierpool:{ns/pool}:tier:p1");
    assert.equal(keys.group, "g");
    assert.equal(PoolKeys.parse("agents").ref, "default/agents");
    assert.equal(PoolKeys.parse("a/b/c").namespace, "a/b");
    assert.throws(() => PoolKeys.parse("ns/"), /NAMESPACE\/NAME/);
    const adopted = PoolKeys.parse("ns/pool").withSpec(parseSpec({ tiers: [{ name: "p0", stream: "agent:tasks:stream" }] }));
    assert.equal(adopted.tierOfPlace("stream", ["p0"]), "p0");
    assert.equal(adopted.tierOfPlace("p0", ["p0"]), "p0");
    assert.equal(adopted.tierOfPlace("other", ["p0"]), undefined);
  });
});

describe("spec", () => {
  it("reads durations and defaults as the Python model", () => {
    assert.equal(parseDuration("1h30m", "x"), 5400);
    assert.equal(parseDuration("250ms", "x"), 0.25);
    assert.throws(() => parseDuration("5 minutes", "x"));
    assert.equal(SPEC.resultTtlS, 3600);
    assert.equal(SPEC.maxPayloadBytes, 262144);
  });

  it("refuses a spec of a newer protocol, naming both numbers", () => {
    checkProtocol("ns/pool", parseSpec({ tiers: [{ name: "p0" }], protocol: 10 }));
    checkProtocol("ns/pool", parseSpec({ tiers: [{ name: "p0" }] }));
    assert.throws(() => checkProtocol("ns/pool", parseSpec({ tiers: [{ name: "p0" }], protocol: 11 })), (error: unknown) => {
      assert.ok(error instanceof ProtocolError);
      assert.match(error.message, /pool ns\/pool speaks protocol 11, newer than this client's \(10\)/);
      return true;
    });
  });
});

export type { ScriptName };
