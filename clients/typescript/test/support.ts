/** What the tests share: the real Valkey of `TIERPOOL_TEST_REDIS_URL` (required: these tests never skip), fresh
 * pool names, and the repository's files. */

import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";

import { Redis, type RedisOptions } from "ioredis";

/** The repository root (dist/test/support.js is four levels down). */
export const ROOT = fileURLToPath(new URL("../../../../", import.meta.url));

export function redisUrl(): string {
  const url = process.env["TIERPOOL_TEST_REDIS_URL"];
  if (!url) throw new Error("set TIERPOOL_TEST_REDIS_URL to a real Redis/Valkey (make test-ts starts one)");
  return url;
}

export function connect(options: RedisOptions = {}): Redis {
  return new Redis(redisUrl(), { maxRetriesPerRequest: 1, ...options } as RedisOptions & { replyMapping: "legacy" });
}

/** The reply shapes an application's ioredis connection may have: RESP2, RESP3 with ioredis 6's default
 * "legacy" mapping (maps as flat arrays), and RESP3 with maps as objects. */
export const CONNECTIONS: ReadonlyArray<[string, RedisOptions]> = [
  ["RESP3 (ioredis' default)", {}],
  ["RESP2", { protocol: 2 }],
  ["RESP3 with maps as objects", { replyMapping: "resp3" }],
];

export function poolName(): string {
  return `ts${randomBytes(5).toString("hex")}`;
}

export async function waitUntil(check: () => Promise<boolean>, timeoutMs: number, everyMs = 50): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((done) => setTimeout(done, everyMs));
  }
  return check();
}
