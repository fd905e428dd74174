/** The client against a real Valkey: submit, status, cancel (indexed and by scan), waitResult and follow, the
 * published spec and its protocol check; and across languages, a real Python tierpool worker running what this
 * client submits. */

import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { after, before, describe, it } from "node:test";

import type { Redis } from "ioredis";

import { Client, PoolKeys, ProtocolError, TaskTimeoutError, UnknownPool, type TaskEvent, type TaskResult } from "../src/index.js";
import { CONNECTIONS, connect, poolName, redisUrl, ROOT, waitUntil } from "./support.js";

const SPEC = { tiers: [{ name: "p0" }, { name: "p1", tenantConcurrency: 1 }], tasks: { resultTTL: "10m" } };

for (const [label, options] of CONNECTIONS) describe(`the client on a real Valkey, ${label}`, () => {
  let redis: Redis;
  before(() => {
    redis = connect(options);
  });
  after(async () => {
    await redis.quit();
  });

  it("reads the published spec, and refuses an unknown pool or a newer protocol", async () => {
    const keys = new PoolKeys("test", poolName());
    await assert.rejects(Client.create(redis, keys), UnknownPool);
    await redis.set(keys.spec, JSON.stringify({ ...SPEC, protocol: 11 }));
    await assert.rejects(Client.create(redis, keys), (error: unknown) => error instanceof ProtocolError && /protocol 11, newer than this client's \(10\)/.test(error.message));
    await redis.set(keys.spec, JSON.stringify({ ...SPEC, protocol: 10 }));
    const client = await Client.create(redis, keys.ref);
    assert.deepEqual(client.spec.tiers.map((tier) => tier.name), ["p0", "p1"]);
  });

  it("refuses a connection with an ioredis keyPrefix", async () => {
    const prefixed = connect({ ...options, keyPrefix: "app:", lazyConnect: true });
    await assert.rejects(Client.create(prefixed, "test/x", { spec: SPEC }), /keyPrefix/);
    prefixed.disconnect();
  });

  it("submits on a fresh server by EVAL when EVALSHA finds no script, and reports status", async () => {
    await redis.call("SCRIPT", "FLUSH");
    const client = await Client.create(redis, new PoolKeys("test", poolName()), { spec: SPEC });
    const [first, second] = await client.submitMany([{ tier: "p0", payload: { a: 1 } }, { tier: "p1", payload: 2, tenant: "acme", delay: 30 }]);
    assert.equal((await client.status(first as string)).state, "waiting");
    const later = await client.status(second as string);
    assert.equal(later.state, "scheduled");
    assert.ok(later.dueAt !== undefined && Math.abs(later.dueAt - (Date.now() + 30_000)) < 2000);
    assert.equal((await client.status("nobody")).state, "unknown");
    assert.equal(await redis.xlen(client.keys.tier("p0")), 1);
  });

  it("cancels waiting tasks through the index, and a plain XADD's task by scanning", async () => {
    const client = await Client.create(redis, new PoolKeys("test", poolName()), { spec: SPEC });
    const waiting = await client.submit("p0", {});
    const scheduled = await client.submit("p1", {}, { delay: 60 });
    await redis.xadd(client.keys.tier("p0"), "*", "task_id", "foreign", "tier", "p0", "payload", "{}", "created_at", "1");
    const reports = await client.cancelMany([waiting, scheduled, "foreign", "ghost", waiting]);
    assert.deepEqual(reports.map((report) => [report.taskId, report.state, report.cancelled]), [
      [waiting, "waiting", true],
      [scheduled, "waiting", true],
      ["foreign", "waiting", true],
      ["ghost", "unknown", false],
      [waiting, "waiting", true],
    ]);
    assert.equal(await redis.exists(client.keys.cancel("ghost")), 0, "an unknown task's marker is taken back");
    assert.equal(await redis.exists(client.keys.cancel("foreign")), 1);
    const record = await client.result(scheduled);
    assert.equal(record?.status, "cancelled");
    assert.equal(record?.reason, "cancelled before it started");
    assert.equal((await client.status(scheduled)).state, "finished");
    const again = await client.cancel(scheduled);
    assert.equal(again.state, "finished");
    assert.equal(again.result?.status, "cancelled");
    assert.equal(await client.uncancel(waiting), true);
    assert.equal(await client.uncancel(waiting), false);
  });

  it("submits to, reports on and cancels in a stream a tier adopts, through the pool's consumer group", async () => {
    const name = poolName();
    const stream = `agent:{test/${name}}:tasks-${name}`;
    const spec = { consumerGroup: "swarm_workers", tiers: [{ name: "p0", stream }, { name: "p1" }] };
    const client = await Client.create(redis, new PoolKeys("test", name), { spec });
    assert.equal(client.keys.tier("p0"), stream);
    assert.equal(client.keys.group, "swarm_workers");
    const running = await client.submit("p0", { n: 1 });
    assert.equal(await redis.xlen(stream), 1);
    assert.equal(await redis.exists(client.keys.ownTier("p0")), 0);
    assert.deepEqual(await client.status(running), { taskId: running, state: "waiting", result: undefined, tier: "p0", dueAt: undefined });
    await redis.xgroup("CREATE", stream, "swarm_workers", "0");
    await redis.xgroup("CREATE", stream, "workers", "$"); // another group's view must not count
    await redis.call("XREADGROUP", "GROUP", "swarm_workers", "c1", "COUNT", 1, "STREAMS", stream, ">");
    assert.equal((await client.status(running)).state, "running");
    // entries of the stream's own producers: a task_id in the payload, or none at all
    await redis.xadd(stream, "*", "payload", JSON.stringify({ task_id: "swarm-7", goal: "x" }));
    const bare = (await redis.xadd(stream, "*", "goal", "y")) as string;
    const reports = await client.cancelMany([running, "swarm-7", `${stream}/${bare}`, "ghost"]);
    assert.deepEqual(reports.map((report) => report.state), ["running", "waiting", "waiting", "unknown"]);
    assert.equal(await redis.exists(client.keys.cancel("swarm-7")), 1);
  });

  it("waits for a result on the task's event stream, and times out without one", async () => {
    const client = await Client.create(redis, new PoolKeys("test", poolName()), { spec: SPEC });
    const taskId = await client.submit("p0", {});
    await assert.rejects(client.waitResult(taskId, 0.3), TaskTimeoutError);
    const events = client.keys.events(taskId);
    assert.equal(await redis.xlen(events), 1, "the follower's follow event created the stream");
    const waiting = client.waitResult(taskId, 10);
    const started = Date.now();
    setTimeout(() => {
      void redis
        .multi()
        .set(client.keys.result(taskId), JSON.stringify({ task_id: taskId, status: "succeeded", result: { n: 3 }, attempts: 1 }))
        .xadd(events, "*", "type", "outcome", "status", "succeeded", "at", String(Date.now()))
        .exec();
    }, 200);
    const result = await waiting;
    assert.equal(result.ok, true);
    assert.deepEqual(result.result, { n: 3 });
    assert.ok(Date.now() - started < 900, "woken by the outcome event, not by the once-a-second re-read");
  });

  it("follows events written before and after it started, then the result last", async () => {
    const client = await Client.create(redis, new PoolKeys("test", poolName()), { spec: SPEC });
    const taskId = await client.submit("p0", {});
    const events = client.keys.events(taskId);
    await redis.xadd(events, "*", "type", "progress", "data", JSON.stringify({ step: 1 }), "at", "5");
    const items = client.follow(taskId, 10);
    const first = await items.next();
    assert.ok(!first.done && first.value.kind === "event" && first.value.type === "progress");
    assert.deepEqual(first.value.data, { step: 1 });
    await redis.xadd(events, "*", "type", "progress", "data", "not json");
    await redis.set(client.keys.result(taskId), JSON.stringify({ task_id: taskId, status: "dead_lettered", reason: "r", attempts: 5 }));
    await redis.xadd(events, "*", "type", "outcome", "status", "dead_lettered");
    const rest: Array<TaskEvent | TaskResult> = [];
    for (;;) {
      const next = await items.next();
      if (next.done) break;
      rest.push(next.value);
    }
    assert.deepEqual(rest.map((item) => (item.kind === "event" ? [item.type, item.data ?? item.status] : ["result", item.status])), [
      ["progress", "not json"],
      ["outcome", "dead_lettered"],
      ["result", "dead_lettered"],
    ]);
    const result = rest[2] as TaskResult;
    assert.equal(result.ok, false);
    assert.equal(result.attempts, 5);
    assert.equal(result.reason, "r");
  });
});

describe("WAIT after writes (spec.redis.waitReplicas)", () => {
  it("waits for replicas after a batch, and stops waiting a while after one fell short", async () => {
    const redis = connect();
    try {
      const spec = { ...SPEC, redis: { waitReplicas: 1, waitTimeout: "300ms" } };
      const client = await Client.create(redis, new PoolKeys("test", poolName()), { spec });
      let started = performance.now();
      await client.submit("p0", {});
      assert.ok(performance.now() - started >= 280, "the first batch waited for a replica (this server has none)");
      started = performance.now();
      await client.submit("p0", {});
      assert.ok(performance.now() - started < 250, "WAIT is off for a while after one fell short");
      assert.equal(await redis.xlen(client.keys.tier("p0")), 2);
    } finally {
      await redis.quit();
    }
  });
});

function startWorker(pool: Record<string, unknown>): ChildProcess {
  const python = process.env["TIERPOOL_PYTHON"];
  if (!python) throw new Error("set TIERPOOL_PYTHON to the Python that has tierpool installed (make test-ts does)");
  return spawn(python, ["-m", "tierpool", "worker", "--metrics-port", "0"], {
    cwd: ROOT,
    env: { ...process.env, TIERPOOL_REDIS_URL: redisUrl(), TIERPOOL_POOL_SPEC: JSON.stringify(pool), PYTHONPATH: `${ROOT}tests` },
    stdio: ["ignore", "inherit", "inherit"],
  });
}

describe("across languages: a Python worker runs what the TypeScript client submits", () => {
  let redis: Redis;
  let worker: ChildProcess | undefined;
  const name = poolName();
  const keys = new PoolKeys("test", name);
  before(async () => {
    redis = connect();
    worker = startWorker({
      apiVersion: "tierpool.io/v1alpha1",
      kind: "AgentPool",
      metadata: { name, namespace: "test" },
      spec: {
        tiers: [{ name: "p0", weight: 3 }, { name: "p1", weight: 1, tenantConcurrency: 1 }],
        worker: { handler: "support_handlers:progressing", concurrency: 2 },
        recovery: { heartbeat: "200ms", sweepInterval: "200ms" },
      },
    });
    // the worker publishes the pool's spec at start: the client reads it, as a producer that knows only the name
    assert.ok(await waitUntil(async () => (await redis.exists(keys.spec)) === 1, 30_000), "the worker published no spec");
  });
  after(async () => {
    // a failed before() leaves no worker: the connection must still close, or node would never exit
    try {
      const running = worker;
      if (running !== undefined && running.exitCode === null) {
        const exited = new Promise((done) => running.once("exit", done));
        running.kill("SIGTERM");
        const hung = setTimeout(() => running.kill("SIGKILL"), 20_000);
        await exited;
        clearTimeout(hung);
      }
    } finally {
      redis.disconnect();
    }
  });

  it("runs a submitted task, following its progress to its result", async () => {
    const client = await Client.create(redis, keys.ref);
    const taskId = await client.submit("p0", { steps: ["fetch", { parsed: 2 }, "done"], work_ms: 50, text: "café" }, { taskId: "ts-1", timeout: 20 });
    const seen: Array<TaskEvent | TaskResult> = [];
    for await (const item of client.follow(taskId, 30)) seen.push(item);
    const progress = seen.filter((item): item is TaskEvent => item.kind === "event" && item.type === "progress");
    assert.deepEqual(progress.map((event) => event.data), ["fetch", { parsed: 2 }, "done"]);
    assert.ok(seen.some((item) => item.kind === "event" && item.final && item.status === "succeeded"));
    const result = seen[seen.length - 1] as TaskResult;
    assert.equal(result.kind, "result");
    assert.equal(result.status, "succeeded");
    assert.deepEqual(result.result, { steps: 3, tier: "p0", payload: { steps: ["fetch", { parsed: 2 }, "done"], work_ms: 50, text: "café" } });
    assert.equal((await client.status(taskId)).state, "finished");
  });

  it("reads the result of, and cancels, tasks the Python client submitted", async () => {
    const python = process.env["TIERPOOL_PYTHON"] as string;
    const script = [
      "import sys",
      "from tierpool.client.producer import Client",
      "with Client.from_url(sys.argv[1], sys.argv[2]) as client:",
      "    print(client.submit('p0', {'steps': ['py']}, task_id='from-python'))",
      "    print(client.submit('p1', {}, delay=60))",
    ].join("\n");
    const done = spawnSync(python, ["-c", script, redisUrl(), keys.ref], { encoding: "utf8" });
    assert.equal(done.status, 0, done.stderr);
    const [first, later] = done.stdout.trim().split("\n");
    assert.equal(first, "from-python");
    const client = await Client.create(redis, keys.ref);
    const result = await client.waitResult("from-python", 30);
    assert.equal(result.status, "succeeded");
    assert.deepEqual(result.result, { steps: 1, tier: "p0", payload: { steps: ["py"] } });
    assert.equal((await client.status(later as string)).state, "scheduled");
    assert.equal((await client.cancel(later as string)).state, "waiting");
    assert.equal((await client.result(later as string))?.reason, "cancelled before it started");
  });

  it("does its whole job as the producer user `tierpool acl producer` prints, nothing refused", async () => {
    const python = process.env["TIERPOOL_PYTHON"] as string;
    const user = `ts-producer-${name}`;
    const printed = spawnSync(python, ["-m", "tierpool", "acl", "producer", "--pool", keys.ref, "--user", user], {
      env: { ...process.env, TIERPOOL_ACL_PASSWORD: "ts-secret" },
      encoding: "utf8",
    });
    assert.equal(printed.status, 0, printed.stderr);
    await redis.call("ACL", ...printed.stdout.trim().split(/\s+/).slice(1));
    await redis.call("ACL", "LOG", "RESET");
    await redis.call("SCRIPT", "FLUSH"); // the producer's first calls meet NOSCRIPT, and send the scripts' sources
    const url = new URL(redisUrl());
    url.username = user;
    url.password = "ts-secret";
    const client = await Client.fromUrl(url.toString(), keys.ref);
    try {
      const ids = await client.submitMany([
        { tier: "p0", payload: { steps: ["x"] }, taskId: `acl-${name}` },
        { tier: "p1", payload: { steps: [] }, tenant: "acme" },
        { tier: "p0", payload: { steps: [] }, delay: 60 },
      ]);
      assert.equal((await client.waitResult(ids[0] as string, 30)).status, "succeeded");
      assert.equal((await client.waitResult(ids[1] as string, 30)).status, "succeeded");
      assert.equal((await client.status(ids[2] as string)).state, "scheduled");
      assert.deepEqual((await client.cancelMany([ids[2] as string, "ghost"])).map((report) => report.state), ["waiting", "unknown"]);
      assert.equal(await client.uncancel("ghost"), false);
    } finally {
      await client.close();
      const log = (await redis.call("ACL", "LOG")) as unknown[][];
      await redis.call("ACL", "DELUSER", user);
      const mine = log.filter((entry) => entry.includes(user));
      assert.deepEqual(mine, [], "the server refused the producer something");
    }
  });

  it("runs gated, delayed and batched tasks, and stops a running one it cancels", async () => {
    const client = await Client.create(redis, keys.ref);
    const ids = await client.submitMany([
      { tier: "p1", payload: { steps: [1] }, tenant: "acme" },
      { tier: "p1", payload: { steps: [2] }, tenant: "acme" },
      { tier: "p0", payload: { steps: [] }, delay: 0.5 },
    ]);
    const results = await Promise.all(ids.map((id) => client.waitResult(id, 30)));
    assert.deepEqual(results.map((result) => result.status), ["succeeded", "succeeded", "succeeded"]);
    const long = await client.submit("p0", { steps: Array.from({ length: 600 }, (_, i) => i), work_ms: 50 });
    assert.ok(await waitUntil(async () => (await client.status(long)).state === "running", 20_000), "never ran");
    const report = await client.cancel(long);
    assert.equal(report.state, "running");
    const cancelled = await client.waitResult(long, 20);
    assert.equal(cancelled.status, "cancelled");
  });
});
