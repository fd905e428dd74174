/** The client on a real three-master Valkey Cluster (`TIERPOOL_TEST_CLUSTER_URL`): every key of a pool shares one
 * hash tag, so each pipeline and script call goes to the one shard serving the pool, and a shard that has never
 * seen a script is sent its source. */

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Cluster } from "ioredis";

import { Client, PoolKeys } from "../src/index.js";
import { poolName } from "./support.js";

function clusterUrl(): URL {
  const url = process.env["TIERPOOL_TEST_CLUSTER_URL"];
  if (!url) throw new Error("set TIERPOOL_TEST_CLUSTER_URL to a node of a real Redis Cluster (make test-ts starts one)");
  return new URL(url);
}

describe("the client on a Valkey Cluster", () => {
  let cluster: Cluster;
  before(async () => {
    const seed = clusterUrl();
    cluster = new Cluster([{ host: seed.hostname, port: Number(seed.port) }]);
    await cluster.call("PING");
  });
  after(async () => {
    await cluster.quit();
  });

  it("submits, reports, follows and cancels on the pool's shard", async () => {
    const spec = { tiers: [{ name: "p0" }, { name: "p1", tenantConcurrency: 1 }] };
    // one pool on each shard, so every shard sees its first script calls
    const ranges = (await cluster.call("CLUSTER", "SLOTS")) as Array<[number, number, [string, number]]>;
    const shardOf = async (keys: PoolKeys): Promise<number> => {
      const slot = Number(await cluster.call("CLUSTER", "KEYSLOT", keys.dlq));
      return (ranges.find(([start, end]) => start <= slot && slot <= end) as [number, number, [string, number]])[2][1];
    };
    const byShard = new Map<number, string>();
    while (byShard.size < ranges.length) {
      const name = poolName();
      byShard.set(await shardOf(new PoolKeys("test", name)), name);
    }
    assert.equal(byShard.size, 3);
    for (const name of byShard.values()) {
      const client = await Client.create(cluster, new PoolKeys("test", name), { spec });
      const ids = await client.submitMany([
        { tier: "p0", payload: { n: 1 }, taskId: `${name}-a` },
        { tier: "p1", payload: {}, tenant: "acme" },
        { tier: "p1", payload: {}, delay: 60 },
      ]);
      assert.deepEqual((await client.submitMany([{ tier: "p0", payload: {}, taskId: `${name}-a` }])), [`${name}-a`]);
      assert.equal(await cluster.xlen(client.keys.tier("p0")), 1, "a chosen id is written once");
      assert.deepEqual(await Promise.all(ids.map(async (id) => (await client.status(id)).state)), ["waiting", "waiting", "scheduled"]);
      const reports = await client.cancelMany(ids);
      assert.deepEqual(reports.map((report) => report.state), ["waiting", "waiting", "waiting"]);
      const cancelled = await client.waitResult(ids[2] as string, 5);
      assert.equal(cancelled.status, "cancelled");
    }
  });
});
