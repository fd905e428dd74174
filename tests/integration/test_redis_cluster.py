"""Redis Cluster (``spec.redis.mode: cluster``) on a real three-master Valkey Cluster: pools on different shards run
side by side through worker processes (escalation, a DLQ, ``tierpool status``, ``tierpool dlq replay``), and a
pool's slot migrates to another shard while its workers run, with nothing lost and nothing run twice."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from tierpool.cli.exits import Exit
from tierpool.client.producer import Client
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.model.spec import RedisMode
from tierpool.protocol.submission import TaskRequest
from tierpool.runtime.handler_loading import load_handler
from tierpool.runtime.metrics import WorkerMetrics
from tierpool.runtime.settings import WorkerSettings
from tierpool.runtime.worker import Worker
from tierpool.store.connection import RedisSettings, async_client
from tierpool.store.observe import observe
from tierpool.store.streams import PoolStreams
from tierpool_operator.redis_access import SecretReader, resolve

from .cluster_support import ValkeyCluster, pool_slot
from .support import killed_on_exit, make_pool, pool_env, spawn_worker, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.slow]

NAMESPACE = "test"
RECOVERY = {"claimIdle": "5s", "heartbeat": "500ms", "retryBackoff": "50ms", "sweepInterval": "200ms"}


def pools_on_distinct_shards(cluster: ValkeyCluster, count: int, prefix: str) -> list[str]:
    """Pool names whose slots are served by ``count`` different masters."""
    chosen: dict[int, str] = {}
    for i in range(1000):
        name = f"{prefix}{i}"
        chosen.setdefault(cluster.shard_of(pool_slot(NAMESPACE, name)), name)
        if len(chosen) == count:
            return [chosen[shard] for shard in sorted(chosen)]
    raise AssertionError("no names on distinct shards")


def cluster_pool(cluster: ValkeyCluster, name: str, **spec: Any) -> AgentPool:
    tiers = [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "escalateAfter": "300ms"}]
    return make_pool(
        name,
        tiers=spec.pop("tiers", tiers),
        redis={"mode": "cluster", "url": cluster.seed_url},
        recovery={**RECOVERY, "maxDeliveries": 2},
        worker={"concurrency": 4, "dispatch": "strict", "handler": "support_handlers:logged_while_broken"},
        **spec,
    )


def runs(log: Path) -> Counter[str]:
    """How many times each task started (the handler's side effect: one line per run)."""
    if not log.exists():
        return Counter()
    return Counter(line.split()[0] for line in log.read_text().splitlines() if line.strip())


def results(client: RedisCluster, pool: AgentPool, ids: list[str]) -> dict[str, dict[str, Any]]:
    keys = PoolKeys.parse(pool.ref)
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        pipe = client.pipeline(transaction=False)
        for task_id in chunk:
            pipe.get(keys.result(task_id))
        for task_id, raw in zip(chunk, pipe.execute(), strict=True):
            if raw:
                found[task_id] = json.loads(raw)
    return found


def cli(cluster: ValkeyCluster, pool: AgentPool, *args: str, code: int = 0) -> Any:
    """``tierpool <args> --pool ns/name --redis-mode cluster`` (the pool's spec read from the cluster)."""
    where = ["--pool", pool.ref, "--redis-url", cluster.seed_url, "--redis-mode", "cluster"]
    done = subprocess.run(
        [sys.executable, "-m", "tierpool", *args, *where],
        capture_output=True,
        text=True,
        timeout=60,
        env=pool_env(pool, cluster.seed_url) | {"TIERPOOL_POOL_SPEC": ""},
    )
    assert done.returncode == code, done.stderr
    return json.loads(done.stdout) if done.stdout.strip().startswith(("{", "[")) else done.stdout


def start_workers(cluster: ValkeyCluster, pool: AgentPool, log: Path, count: int = 1) -> list[subprocess.Popen[bytes]]:
    env = {"TEST_RUN_LOG": str(log)}  # the mode comes from the pool document, as in a pod
    return [
        spawn_worker(
            pool, cluster.seed_url, "--consumer", f"{pool.metadata.name}-w{i}", log=log.with_suffix(f".w{i}"), env=env
        )
        for i in range(count)
    ]


def pending(client: RedisCluster, pool: AgentPool) -> int:
    keys = PoolKeys.parse(pool.ref)
    return sum(int(client.xpending(keys.tier(tier), GROUP)["pending"]) for tier in ("p0", "p1"))


def stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        worker.terminate()
    for worker in workers:
        assert worker.wait(30) == 0


def test_pools_on_three_shards_run_side_by_side(redis_cluster: ValkeyCluster, tmp_path: Path) -> None:
    cluster = redis_cluster
    names = pools_on_distinct_shards(cluster, 3, "side")
    assert len({cluster.shard_of(pool_slot(NAMESPACE, name)) for name in names}) == 3
    broken = tmp_path / "broken"
    broken.write_text("until replay")
    client = RedisCluster.from_url(cluster.seed_url, decode_responses=True)
    # the first pool reserves a slot for p0: its idle workers block on p0 alone, in short blocks (no CLIENT UNBLOCK)
    reserved = [{"name": "p0", "weight": 1, "reservedSlots": 1}, {"name": "p1", "weight": 1, "escalateAfter": "300ms"}]
    # the second pool's p1 gates tenants: the producer's gate reads the counts by a name in ARGV (one slot)
    gated = [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "escalateAfter": "300ms", "tenantConcurrency": 2}]
    pools = [cluster_pool(cluster, names[0], tiers=reserved), cluster_pool(cluster, names[1], tiers=gated)]
    pools += [cluster_pool(cluster, name) for name in names[2:]]
    submitted: dict[str, tuple[list[str], list[str], list[str]]] = {}
    for pool in pools:  # p1 waits behind p0 (strict dispatch) past escalateAfter: some of it escalates
        producer = Client(client, pool)
        p0 = producer.submit_many([TaskRequest("p0", {"work_ms": 25}) for _ in range(120)])
        p1 = producer.submit_many([TaskRequest("p1", {"work_ms": 5}) for _ in range(40)])
        p1 += producer.submit_many([TaskRequest("p1", {"work_ms": 5}, tenant="acme") for _ in range(6)])
        p1 += producer.submit_many([TaskRequest("p1", {}, delay=0.5) for _ in range(3)])  # the due-time index
        dead = producer.submit_many([TaskRequest("p1", {"broken": str(broken)}) for _ in range(2)])
        submitted[pool.ref] = (p0, p1, dead)
    logs = {pool.ref: tmp_path / f"{pool.metadata.name}.runs" for pool in pools}
    workers = [worker for pool in pools for worker in start_workers(cluster, pool, logs[pool.ref])]
    with killed_on_exit(*workers):
        for pool in pools:
            p0, p1, dead = submitted[pool.ref]
            assert wait_until(lambda pool=pool, ids=p0 + p1: len(results(client, pool, ids)) == len(ids), 90)
            assert wait_until(lambda pool=pool: client.xlen(PoolKeys.parse(pool.ref).dlq) == 2, 30)
            escalated = [r for r in results(client, pool, p1).values() if r["result"]["tier"] == "p0"]
            assert escalated, "no p1 task escalated to p0"
            status = cli(cluster, pool, "status", "--json")
            assert status["dlq"] == 2 and {t["name"] for t in status["tiers"]} == {"p0", "p1"}
            letters = cli(cluster, pool, "dlq", "list", "--json")
            assert sorted(letter["task_id"] for letter in letters) == sorted(dead)
        broken.unlink()
        for pool in pools:
            cli(cluster, pool, "dlq", "replay")
            dead = submitted[pool.ref][2]
            assert wait_until(lambda pool=pool, ids=dead: len(results(client, pool, ids)) == 2, 30)
            assert client.xlen(PoolKeys.parse(pool.ref).dlq) == 0
        for pool in pools:  # the CLI's producer path: a chosen task id (the dedupe script), twice, and its result
            for _ in range(2):
                cli(cluster, pool, "submit", "--tier", "p1", "--task-id", f"once-{pool.metadata.name}", "--wait", "30")
            assert (
                cli(cluster, pool, "cancel", f"once-{pool.metadata.name}", "--json", code=Exit.FINISHED)["state"]
                == "finished"
            )
        assert wait_until(lambda: all(pending(client, pool) == 0 for pool in pools), 20)
        stop(workers)
    for pool in pools:
        assert runs(logs[pool.ref])[f"once-{pool.metadata.name}"] == 1
        p0, p1, dead = submitted[pool.ref]
        counted = runs(logs[pool.ref])
        assert {task: counted[task] for task in p0 + p1} == dict.fromkeys(p0 + p1, 1)  # each once, none lost
        assert all(counted[task] == 3 for task in dead)  # two failed deliveries, then the replayed run
        assert set(counted) == {*p0, *p1, *dead, f"once-{pool.metadata.name}"}


def test_a_pools_slot_migrates_to_another_shard_while_its_workers_run(
    redis_cluster: ValkeyCluster, tmp_path: Path
) -> None:
    cluster = redis_cluster
    moving, staying = pools_on_distinct_shards(cluster, 2, "mig")
    slot = pool_slot(NAMESPACE, moving)
    source, target = cluster.shard_of(slot), cluster.shard_of(pool_slot(NAMESPACE, staying))
    client = RedisCluster.from_url(cluster.seed_url, decode_responses=True)
    pools = [cluster_pool(cluster, moving), cluster_pool(cluster, staying)]
    logs = {pool.ref: tmp_path / f"{pool.metadata.name}.runs" for pool in pools}
    submitted: dict[str, list[str]] = {pool.ref: [] for pool in pools}
    producers = {pool.ref: Client(client, pool) for pool in pools}

    def submit(count: int) -> None:
        for pool in pools:
            tiers = ("p0", "p1")
            batch = [TaskRequest(tiers[i % 2], {"work_ms": 40}) for i in range(count)]
            submitted[pool.ref] += producers[pool.ref].submit_many(batch)

    submit(400)
    workers = [w for pool in pools for w in start_workers(cluster, pool, logs[pool.ref], count=2)]
    with killed_on_exit(*workers):
        assert wait_until(lambda: len(results(client, pools[0], submitted[pools[0].ref])) > 50, 30)
        before = cluster.redirects()
        producing = threading.Event()
        producer = threading.Thread(target=_produce_while, args=(producing, submit), daemon=True)
        producing.set()
        producer.start()
        started = time.monotonic()
        moved = cluster.migrate_slot(slot, target, batch=10, pause=0.05)
        took = time.monotonic() - started
        producing.clear()
        producer.join(30)
        assert cluster.shard_of(slot) == target != source
        submit(100)  # after the move: every client must find the pool on its new shard
        for pool in pools:
            ids = submitted[pool.ref]
            assert wait_until(lambda pool=pool, ids=ids: len(results(client, pool, ids)) == len(ids), 120), pool.ref
        assert wait_until(lambda: all(pending(client, pool) == 0 for pool in pools), 20)
        after = cluster.redirects()
        stop(workers)
    followed = {kind: after[kind] - before[kind] for kind in after}
    print(f"\nmigrated {moved} keys of slot {slot} in {took:.2f}s; redirects sent meanwhile: {followed}")
    assert moved > 50 and followed["MOVED"] + followed["ASK"] > 0
    for pool in pools:
        ids, counted = submitted[pool.ref], runs(logs[pool.ref])
        assert len(set(ids)) == len(ids)
        assert {task: counted[task] for task in ids} == dict.fromkeys(ids, 1), "a task was lost or ran twice"
        assert client.xlen(PoolKeys.parse(pool.ref).dlq) == 0


def _produce_while(producing: threading.Event, submit: Any) -> None:
    while producing.is_set():
        try:
            submit(10)
        except redis.RedisError:  # a producer sees TRYAGAIN too; the test counts only what was accepted
            time.sleep(0.01)
        time.sleep(0.02)


async def test_the_operator_observes_a_pool_on_the_cluster(redis_cluster: ValkeyCluster) -> None:
    """The operator's Redis access (tierpool_operator.redis_access) builds a cluster client from the spec and
    reads a pool on a shard other than the seed node's through it."""
    cluster = redis_cluster
    name = next(n for n in (f"obs{i}" for i in range(100)) if cluster.shard_of(pool_slot(NAMESPACE, n)) != 0)
    pool = cluster_pool(cluster, name)
    Client(RedisCluster.from_url(cluster.seed_url, decode_responses=True), pool).submit_many(
        [TaskRequest("p1", {}) for _ in range(7)]
    )
    resolved = resolve(pool.spec.redis, SecretReader(None, NAMESPACE))  # type: ignore[arg-type] # no Secret to read
    assert resolved.settings.mode is RedisMode.CLUSTER
    client = resolved.client()
    try:
        found = await observe(client, PoolKeys.parse(pool.ref), pool.spec.tier_names, 1.0, 5.0)
    finally:
        await client.aclose()
    assert isinstance(client, AsyncRedisCluster)
    assert {tier.name: tier.backlog for tier in found.tiers} == {"p0": 0, "p1": 7}
    assert found.tiers[1].oldest_age_seconds < 60


async def test_an_idle_worker_takes_new_work_at_once_on_the_cluster(
    redis_cluster: ValkeyCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """An idle worker waits in a blocking XREADGROUP on its slot's node and wakes for a new task. It raised a
    TypeError on every blocking read in cluster mode (redis-py's xreadgroup takes no target_nodes): the reader loop
    restarted with a growing backoff, and after a few idle seconds new tasks waited seconds to start."""
    cluster = redis_cluster
    pool = make_pool(
        "idle",
        tiers=[{"name": "p0", "weight": 1}],
        redis={"mode": "cluster", "url": cluster.seed_url},
        worker={"concurrency": 2, "handler": "tierpool.handlers:simulate"},
    )
    settings = RedisSettings(url=cluster.seed_url, mode=RedisMode.CLUSTER)
    connection = async_client(settings, max_connections=16)
    worker_settings = WorkerSettings(
        pool=pool,
        redis=settings,
        handler="tierpool.handlers:simulate",
        concurrency=2,
        consumer="idle-1",
        grace_seconds=5.0,
    )
    worker = Worker(
        worker_settings, load_handler(worker_settings.handler), connection, WorkerMetrics(CollectorRegistry())
    )
    running = asyncio.create_task(worker.run())
    producer = Client(RedisCluster.from_url(cluster.seed_url, decode_responses=True), pool)
    waits: list[float] = []
    try:
        await asyncio.wait_for(_until(lambda: worker.ready), 20)
        for _ in range(3):
            await asyncio.sleep(2.0)  # idle: the worker sits in its blocking read
            submitted = time.monotonic()
            task_id = producer.submit("p0", {})
            await asyncio.wait_for(_until(partial(_finished, producer, task_id)), 20)
            waits.append(time.monotonic() - submitted)
    finally:
        worker.request_stop()
        await running
        await connection.aclose()
    assert not [r for r in caplog.records if "reader loop failed" in r.getMessage()]
    assert max(waits) < 1.0, waits


async def _until(check: Callable[[], bool]) -> None:
    while not check():
        await asyncio.sleep(0.01)


def _finished(client: Client, task_id: str) -> bool:
    return client.result(task_id) is not None


def test_local_mode_refuses_a_cluster_pool(tmp_path: Path) -> None:
    document = {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {"name": "c", "namespace": NAMESPACE},
        "spec": {"tiers": [{"name": "p0", "weight": 1}], "redis": {"mode": "cluster", "url": "redis://seed:7000"}},
    }
    (tmp_path / "pool.yaml").write_text(json.dumps(document))  # JSON is YAML
    done = subprocess.run(
        [sys.executable, "-m", "tierpool", "local", str(tmp_path / "pool.yaml"), "--no-live", "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "spec.redis.mode cluster is not supported" in " ".join(done.stderr.split())


def test_a_worker_waits_for_an_unreachable_cluster_and_stops_on_sigterm(tmp_path: Path) -> None:
    """No seed node answers (redis-py's cluster client raises RedisClusterException, not a connection error):
    the worker retries with backoff like for one server, and SIGTERM ends the wait with exit 0."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    pool = make_pool("down", redis={"mode": "cluster", "url": f"redis://127.0.0.1:{port}/0"})
    log = tmp_path / "worker.log"
    worker = spawn_worker(pool, f"redis://127.0.0.1:{port}/0", log=log)
    with killed_on_exit(worker):
        assert wait_until(lambda: log.read_text().count("redis unreachable, retrying") >= 2, 30), log.read_text()
        assert worker.poll() is None
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0


async def test_a_pool_adopts_streams_in_its_slot_on_the_cluster(redis_cluster: ValkeyCluster) -> None:
    """Adopted streams with the pool's hash tag live in its slot, so every script (escalation over two of them with
    the pool's own keys among them) runs on the cluster; the existing group carries on, seed-format entries run
    once each under their derived ids, and an entry's own priority_ttl_s moves it up."""
    cluster = redis_cluster
    name = next(n for n in (f"adopt{i}" for i in range(100)) if cluster.shard_of(pool_slot(NAMESPACE, n)) != 0)
    p0, p1 = f"{{{NAMESPACE}/{name}}}:legacy:p0", f"{{{NAMESPACE}/{name}}}:legacy:p1"
    pool = make_pool(
        name,
        consumerGroup="legacy",
        tiers=[{"name": "p0", "weight": 1, "stream": p0}, {"name": "p1", "weight": 1, "stream": p1}],
        redis={"mode": "cluster", "url": cluster.seed_url},
        recovery=RECOVERY,
    )
    seed = RedisCluster.from_url(cluster.seed_url, decode_responses=True)
    acked = seed.xadd(p0, {"payload": "{}"})
    seed.xgroup_create(p0, "legacy", id="0", mkstream=True)
    seed.xreadgroup("legacy", "theirs", {p0: ">"}, count=1)
    seed.xack(p0, "legacy", acked)
    waiting = [seed.xadd(p0, {"payload": json.dumps({"n": n}), "created_at": f"{time.time():.3f}"}) for n in range(3)]
    escalating = seed.xadd(p1, {"payload": "{}", "priority_ttl_s": "0"})
    expected = {f"{p0}/{entry_id}" for entry_id in waiting} | {f"{p1}/{escalating}"}
    settings = RedisSettings(url=cluster.seed_url, mode=RedisMode.CLUSTER)
    connection = async_client(settings, max_connections=16)
    seen: list[Any] = []

    async def handler(task: Any) -> None:
        seen.append((task.id, task.tier))

    worker_settings = WorkerSettings(
        pool=pool, redis=settings, handler="test", concurrency=1, consumer="adopt-1", grace_seconds=5.0
    )
    streams = PoolStreams(connection, pool.keys, pool.spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()  # BUSYGROUP on p0: left where it was
    assert await streams.escalate(1, int(escalating.split("-")[0]), None, 10, own_ttls=True) == 1
    worker = Worker(worker_settings, handler, connection, WorkerMetrics(CollectorRegistry()))
    running = asyncio.create_task(worker.run())
    try:
        await asyncio.wait_for(_until(lambda: len(seen) >= len(expected)), 30)
        await asyncio.sleep(1.0)
    finally:
        worker.request_stop()
        await running
        await connection.aclose()
    assert Counter(task_id for task_id, _ in seen) == Counter(expected)
    assert (f"{p1}/{escalating}", "p0") in seen  # moved up, and kept its id
    assert seed.xlen(pool.keys.dlq) == 0
