/** Sending commands and script calls on an ioredis connection (a `Redis` or a `Cluster`). */

import type { Cluster, Redis } from "ioredis";

import { SCRIPTS, type ScriptName } from "./scripts.js";

/** An application's ioredis connection: one server, Sentinel (a `Redis`) or a `Cluster`, with either reply
 * mapping (the replies are read in each shape: see follow.readEntries, cancel.asMap). */
export type Connection = Redis | Redis<"resp3"> | Cluster | Cluster<"resp3">;

/** The commands every kind of connection has alike (they differ in reply types only, which this client reads as
 * unknown and checks). */
export function api(connection: Connection): Redis {
  return connection as unknown as Redis;
}
export type Arg = string | number;
export type Command = readonly [string, ...Arg[]];
export type Reply = [Error | null, unknown];

/** The commands as one pipeline; one [error, reply] per command, errors as values. */
export async function pipeline(connection: Connection, commands: readonly Command[]): Promise<Reply[]> {
  if (commands.length === 0) return [];
  const pipe = api(connection).pipeline();
  for (const [name, ...args] of commands) pipe.call(name, ...args);
  return ((await pipe.exec()) ?? []) as Reply[];
}

/** The reply, or its error thrown. */
export function value([error, reply]: Reply): unknown {
  if (error) throw error;
  return reply;
}

export interface Call {
  readonly name: ScriptName;
  readonly keys: readonly string[];
  readonly args: readonly Arg[];
}

function isNoScript(error: Error | null): boolean {
  return error !== null && error.message.startsWith("NOSCRIPT");
}

/** The WAIT after a batch of writes (`spec.redis.waitReplicas`), off for `PAUSE_MS` after one fell short
 * (tierpool.store.replication.WaitGate). */
export class WaitGate {
  static readonly PAUSE_MS = 5000;
  private offUntil = 0;

  constructor(
    readonly replicas: number,
    readonly timeoutMs: number,
    private readonly clock: () => number = () => performance.now(),
  ) {}

  current(): Command | undefined {
    if (this.replicas <= 0 || this.clock() < this.offUntil) return undefined;
    return ["WAIT", this.replicas, this.timeoutMs];
  }

  /** The writes' replies without the WAIT's (a short WAIT turns WAIT off a while; the writes stay). */
  split(replies: Reply[], wait: Command | undefined): Reply[] {
    if (wait === undefined) return replies;
    const last = replies[replies.length - 1];
    const acked = last !== undefined && last[0] === null && typeof last[1] === "number" ? last[1] : -1;
    if (acked < this.replicas) this.offUntil = this.clock() + WaitGate.PAUSE_MS;
    return replies.slice(0, -1);
  }
}

/** Every call by EVALSHA in one pipeline (with the gate's WAIT last); the calls a server refuses with NOSCRIPT
 * (a fresh server, or a cluster shard) did nothing, and go once more with their whole source (EVAL, which also
 * caches the script). Any other error is thrown. One reply per call. */
export async function runScripts(connection: Connection, calls: readonly Call[], gate?: WaitGate): Promise<unknown[]> {
  const byHash = (call: Call): Command => {
    const script = SCRIPTS[call.name];
    return ["EVALSHA", script.sha, call.keys.length, ...call.keys, ...call.args];
  };
  const bySource = (call: Call): Command => {
    const script = SCRIPTS[call.name];
    return ["EVAL", script.source, call.keys.length, ...call.keys, ...call.args];
  };
  const send = async (commands: Command[]): Promise<Reply[]> => {
    const wait = gate?.current();
    const replies = await pipeline(connection, wait ? [...commands, wait] : commands);
    return gate ? gate.split(replies, wait) : replies;
  };
  const replies = await send(calls.map(byHash));
  const missing = replies.flatMap((reply, i) => (isNoScript(reply[0]) ? [i] : []));
  if (missing.length > 0) {
    const again = await send(missing.map((i) => bySource(calls[i] as Call)));
    missing.forEach((i, n) => (replies[i] = again[n] as Reply));
  }
  return replies.map(value);
}
