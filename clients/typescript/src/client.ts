/** The producer client for one pool: submit tasks, submit batches, follow them, wait for their results, cancel
 * them and read their status, with the same keys, scripts, limits and envelope as the Python client
 * (worker/tierpool/client/producer.py). */

import { Redis } from "ioredis";

import { cancelMany as runCancels } from "./cancel.js";
import { follow as followTask } from "./follow.js";
import { PoolKeys } from "./keys.js";
import { parseResult, type CancelReport, type TaskEvent, type TaskResult } from "./records.js";
import { api, runScripts, WaitGate, type Connection } from "./redis.js";
import { checkProtocol, msFloor, parseSpec, UnknownPool, type PoolSpec } from "./spec.js";
import { taskStatus, type TaskStatus } from "./status.js";
import { prepare, submitCall, type SubmitOptions, type TaskRequest } from "./submission.js";

/** Writes go in pipelined chunks of this many submits. */
export const BATCH_CHUNK = 1000;

/** A pool's spec as given: the published JSON text, the spec object (the AgentPool's `spec`), or parsed. */
export type SpecSource = string | Record<string, unknown> | PoolSpec;

function isParsed(spec: SpecSource): spec is PoolSpec {
  return typeof spec === "object" && "resultTtlS" in spec;
}

/** The spec a worker or the operator published for the pool; UnknownPool when none has yet. */
export async function loadSpec(connection: Connection, keys: PoolKeys): Promise<PoolSpec> {
  const raw = await api(connection).get(keys.spec);
  if (!raw) throw new UnknownPool(keys.ref);
  return parseSpec(raw);
}

/** An ioredis `keyPrefix` would prefix the pool's KEYS but not the key names the scripts take in ARGV (the
 * tenant counts) or store (the task-id index's places), so the pool's keys would split in two: refused. */
function refusePrefix(connection: Connection): void {
  const options = connection.options as { keyPrefix?: string; redisOptions?: { keyPrefix?: string } };
  if (options.keyPrefix || options.redisOptions?.keyPrefix) {
    throw new Error("the connection has an ioredis keyPrefix: tierpool's keys are fixed, so give it one without");
  }
}

export interface ClientOptions {
  /** The pool's spec; default: the one published in Redis for the pool. */
  spec?: SpecSource;
}

export class Client {
  readonly keys: PoolKeys;
  private readonly gate: WaitGate;

  private constructor(
    readonly redis: Connection,
    pool: string | PoolKeys,
    readonly spec: PoolSpec,
  ) {
    // its consumer group and adopted streams (spec.consumerGroup, tiers[].stream)
    this.keys = (typeof pool === "string" ? PoolKeys.parse(pool) : pool).withSpec(spec);
    checkProtocol(this.keys.ref, spec);
    this.gate = new WaitGate(spec.waitReplicas, Math.max(1, Math.round(spec.waitTimeoutS * 1000)));
  }

  /** A client on your ioredis connection (`Redis` or `Cluster`) for the pool `"NAMESPACE/NAME"`. Reads the
   * spec the pool's workers or operator published (UnknownPool when there is none) unless `options.spec` is
   * given; ProtocolError when it comes from a newer protocol than this client's. `close()` closes the
   * connection. */
  static async create(connection: Connection, pool: string | PoolKeys, options: ClientOptions = {}): Promise<Client> {
    refusePrefix(connection);
    const keys = typeof pool === "string" ? PoolKeys.parse(pool) : pool;
    const spec = options.spec === undefined ? await loadSpec(connection, keys) : isParsed(options.spec) ? options.spec : parseSpec(options.spec);
    return new Client(connection, keys, spec);
  }

  /** A client on a new connection to the one server at `url` (`redis://` or `rediss://`, a password in it
   * honoured), closed by `close()`. For a Cluster or Sentinel, make the ioredis connection and use `create`. */
  static async fromUrl(url: string, pool: string | PoolKeys, options: ClientOptions = {}): Promise<Client> {
    const connection = new Redis(url);
    try {
      return await Client.create(connection, pool, options);
    } catch (error) {
      connection.disconnect();
      throw error;
    }
  }

  /** Close the connection (one passed to `create` too). */
  async close(): Promise<void> {
    await api(this.redis).quit();
  }

  /** Enqueue one task and return its task_id. A task_id already seen within the dedupe window is not re-added.
   * Durations are seconds, as in the Python client. */
  async submit(tier: string, payload: unknown, options: SubmitOptions = {}): Promise<string> {
    const [taskId] = await this.submitMany([{ ...options, tier, payload }]);
    return taskId as string;
  }

  /** Validate all (SubmitError before anything is written), then enqueue in pipelined chunks. The task_ids in
   * order. */
  async submitMany(requests: Iterable<TaskRequest>): Promise<string[]> {
    const now = Date.now();
    const prepared = [...requests].map((request) => prepare(this.spec, this.keys, request, now));
    const ttl = msFloor(this.spec.dedupeWindowS);
    const calls = prepared.map((item) => submitCall(this.keys, ttl, item));
    for (let start = 0; start < calls.length; start += BATCH_CHUNK) {
      await runScripts(this.redis, calls.slice(start, start + BATCH_CHUNK), this.gate);
    }
    return prepared.map((item) => item.taskId);
  }

  /** The task's result record, undefined while it has none. */
  async result(taskId: string): Promise<TaskResult | undefined> {
    const raw = await api(this.redis).get(this.keys.result(taskId));
    return raw ? parseResult(raw) : undefined;
  }

  /** Where the task is now: finished (with its result), running, waiting, scheduled, held or unknown. */
  async status(taskId: string): Promise<TaskStatus> {
    return taskStatus(this.redis, this.keys, this.spec.tiers.map((tier) => tier.name), taskId);
  }

  /** The task's progress events as they come, then its final event and its result record (last); a
   * TimeoutError (TaskTimeoutError) after `timeoutS` seconds without a result. */
  follow(taskId: string, timeoutS: number): AsyncGenerator<TaskEvent | TaskResult, TaskResult> {
    return followTask(this.redis, this.keys, taskId, timeoutS, msFloor(this.spec.resultTtlS));
  }

  /** Wait until the task's result record exists (on its event stream, not by polling); TaskTimeoutError after
   * `timeoutS` seconds. */
  async waitResult(taskId: string, timeoutS: number): Promise<TaskResult> {
    const items = this.follow(taskId, timeoutS);
    for (;;) {
      const next = await items.next();
      if (next.done) return next.value;
    }
  }

  /** Cancel a task: a waiting one never runs, a running one is stopped within about one heartbeat, and its
   * result record says `cancelled`. The report says what was found. */
  async cancel(taskId: string): Promise<CancelReport> {
    return (await this.cancelMany([taskId]))[0] as CancelReport;
  }

  /** Cancel many tasks: every CANCEL in one pipelined round trip, then a few shared lookups for tasks the
   * task-id index does not know; one report per task_id, in order. */
  async cancelMany(taskIds: readonly string[]): Promise<CancelReport[]> {
    return runCancels(this.redis, this.keys, this.spec, taskIds);
  }

  /** Take a cancel back: delete the task's cancel marker; true when there was one. */
  async uncancel(taskId: string): Promise<boolean> {
    return (await api(this.redis).del(this.keys.cancel(taskId))) > 0;
  }
}
