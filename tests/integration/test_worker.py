"""Worker behaviour against a real Valkey: retries, poison tasks, heartbeats, malformed input, deadlines."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.envelope import Task
from tierpool.protocol.submission import TaskRequest

from .support import FAST_RECOVERY, Recorder, async_wait_until, make_pool, running_worker

pytestmark = pytest.mark.redis

FAST = FAST_RECOVERY


async def pending(client: aioredis.Redis, pool_ref: str, tier: str) -> int:
    return int((await client.xpending(PoolKeys.parse(pool_ref).tier(tier), GROUP))["pending"])


async def test_tasks_complete_with_result_records(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder):
        ids = await producer.submit_many([TaskRequest(t, {"n": i}) for i, t in enumerate(["p0", "p1", "p2"] * 20)])
        results = [await producer.wait_result(task_id, 10) for task_id in ids]
    assert all(r.ok and r.attempts == 1 and r.result == {"seen": r.task_id} for r in results)
    assert {r.tier for r in results} == {"p0", "p1", "p2"}
    assert len(recorder.calls) == 60
    for tier in ("p0", "p1", "p2"):
        assert await pending(client, pool.ref, tier) == 0


async def test_poison_task_dead_lettered_after_exactly_max_deliveries(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery={**FAST, "maxDeliveries": 3})
    producer = AsyncClient(client, pool, pool.spec)
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder):
        poison = await producer.submit("p0", {"fail": True})
        good = await producer.submit_many([TaskRequest("p0", {"i": i}) for i in range(30)])
        outcome = await producer.wait_result(poison, 15)
        good_results = [await producer.wait_result(task_id, 10) for task_id in good]
    assert outcome.status == "dead_lettered" and outcome.attempts == 3
    assert "boom on attempt 3" in (outcome.error or "")
    assert recorder.count(poison) == 3
    assert [c.attempt for c in recorder.calls if c.id == poison] == [1, 2, 3]
    assert all(r.ok for r in good_results)
    [(_, dead)] = await client.xrange(PoolKeys.parse(pool.ref).dlq)
    assert dead["task_id"] == poison and dead["deliveries"] == "3" and "boom" in dead["error"]
    assert await pending(client, pool.ref, "p0") == 0


async def test_transient_failure_retries_then_succeeds(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = make_pool(pool_name, recovery=FAST)
    producer = AsyncClient(client, pool, pool.spec)

    async def flaky(task: object) -> str:
        attempt = task.attempt  # type: ignore[attr-defined]
        if attempt < 3:
            raise ConnectionError("model API timed out")
        return "ok"

    async with running_worker(pool, redis_url, flaky):
        task_id = await producer.submit("p1", {})
        outcome = await producer.wait_result(task_id, 15)
    assert outcome.ok and outcome.attempts == 3
    assert await client.hlen(PoolKeys.parse(pool.ref).errors) == 0


async def test_long_task_runs_once_thanks_to_heartbeat(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = make_pool(pool_name, recovery=FAST)  # claimIdle 1s, task takes 3s
    producer = AsyncClient(client, pool, pool.spec)
    first, second = Recorder(), Recorder()
    async with (
        running_worker(pool, redis_url, first, consumer="a"),
        running_worker(pool, redis_url, second, consumer="b"),
    ):
        task_id = await producer.submit("p0", {"work_s": 3.0})
        outcome = await producer.wait_result(task_id, 15)
    assert outcome.ok and outcome.attempts == 1
    assert first.count(task_id) + second.count(task_id) == 1


async def test_malformed_entries_dead_lettered_and_loop_goes_on(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, Recorder()):
        await client.xadd(keys.tier("p0"), {"garbage": "yes"})
        await client.xadd(keys.tier("p1"), {"task_id": "bad-json", "tier": "p1", "payload": "{oops", "created_at": "1"})
        good = await producer.submit("p0", {"fine": True})
        assert (await producer.wait_result(good, 10)).ok
        assert await async_wait_until(lambda: _dlq_len(client, keys), 5)
        bad = await producer.wait_result("bad-json", 5)
    reasons = sorted(fields["reason"] for _, fields in await client.xrange(keys.dlq))
    assert reasons[0].startswith("bad envelope: payload is not JSON")
    assert reasons[1].startswith("bad envelope: task_id")
    assert bad.status == "dead_lettered"
    assert await pending(client, pool.ref, "p0") == 0 and await pending(client, pool.ref, "p1") == 0


async def _dlq_len(client: aioredis.Redis, keys: PoolKeys) -> bool:
    return int(await client.xlen(keys.dlq)) >= 2


async def test_expired_deadline_dead_lettered_without_running(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    task_id = await producer.submit("p2", {}, deadline=timedelta(milliseconds=1))
    await asyncio.sleep(0.05)
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder):
        outcome = await producer.wait_result(task_id, 10)
    assert outcome.status == "dead_lettered" and "deadline" in (outcome.error or "")
    assert recorder.calls == []


async def test_sync_handler_runs_in_threads(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    import time

    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)

    def blocking(task: object) -> dict[str, bool]:
        time.sleep(0.3)
        return {"sync": True}

    async with running_worker(pool, redis_url, blocking, concurrency=8):
        started = time.monotonic()
        ids = await producer.submit_many([TaskRequest("p0", {}) for _ in range(8)])
        outcomes = [await producer.wait_result(task_id, 10) for task_id in ids]
        elapsed = time.monotonic() - started
    assert all(o.result == {"sync": True} for o in outcomes)
    assert elapsed < 1.5  # eight 0.3 s sleeps overlapped in the thread pool


@pytest.mark.parametrize(
    ("result", "error"),
    [({1, 2}, "not JSON serializable"), ({"score": float("nan")}, "Out of range float values are not JSON compliant")],
    ids=["set", "nan"],
)
async def test_unserialisable_result_is_a_failure(
    redis_url: str, pool_name: str, client: aioredis.Redis, result: object, error: str
) -> None:
    pool = make_pool(pool_name, recovery={**FAST, "maxDeliveries": 1})
    producer = AsyncClient(client, pool, pool.spec)

    async def returns_it(task: object) -> object:
        return result

    async with running_worker(pool, redis_url, returns_it):
        outcome = await producer.wait_result(await producer.submit("p0", {}), 10)
    assert outcome.status == "dead_lettered" and error in (outcome.error or "")


async def test_each_handler_runs_in_its_own_task_and_timeouts_bind_to_it(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """On Python 3.12+ tasks start eagerly; a handler must still run inside its own asyncio Task, so an
    ``asyncio.timeout`` in it cancels the handler, never the worker's read loop."""
    pool = make_pool(pool_name, recovery={**FAST, "maxDeliveries": 1})
    producer = AsyncClient(client, pool, pool.spec)
    seen: list[asyncio.Task[object] | None] = []

    async def handler(task: Task) -> str:
        seen.append(asyncio.current_task())
        if task.payload.get("hang"):
            async with asyncio.timeout(0.05):
                await asyncio.sleep(30)
        return task.id

    async with running_worker(pool, redis_url, handler, concurrency=4) as worker:
        hung = await producer.submit("p0", {"hang": True})
        assert (await producer.wait_result(hung, 10)).status == "dead_lettered"
        ids = await producer.submit_many([TaskRequest("p1", {}) for _ in range(50)])
        assert [(await producer.wait_result(task_id, 10)).result for task_id in ids] == ids
        # still serving after the timeout: it cancelled the handler, not the read loop
        assert worker.inflight == {} and not any(worker.running)
    assert "TimeoutError" in ((await producer.wait_result(hung, 1)).error or "")
    assert len(seen) == 51 and None not in seen and asyncio.current_task() not in seen
    assert len({id(task) for task in seen}) == len(seen)  # one Task per handler call; all are kept alive in seen


def finish_inline(loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
    """What an eager start does to a handler that never waits, on any Python: the task is over, bookkeeping and
    all, before the starter returns."""
    with pytest.raises(StopIteration):
        coroutine.send(None)
    done: asyncio.Future[None] = loop.create_future()
    done.set_result(None)
    return done


async def test_tasks_that_finish_while_starting_free_their_slots(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)

    async def instant(task: Task) -> str:
        return task.id

    async with running_worker(pool, redis_url, instant, concurrency=4, start=finish_inline) as worker:
        ids = await producer.submit_many([TaskRequest(tier, {}) for tier in ["p0", "p1", "p2"] * 40])
        assert [(await producer.wait_result(task_id, 10)).result for task_id in ids] == ids
        assert worker.inflight == {} and not any(worker.running)


async def test_duplicate_task_id_is_enqueued_once(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    for _ in range(3):
        assert await producer.submit("p0", {"x": 1}, task_id="order-42") == "order-42"
    assert await client.xlen(PoolKeys.parse(pool.ref).tier("p0")) == 1


async def test_per_tier_concurrency_cap(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    tiers = [{"name": "p0", "weight": 1, "maxConcurrency": 2}, {"name": "p1", "weight": 1}]
    pool = make_pool(pool_name, tiers=tiers)
    producer = AsyncClient(client, pool, pool.spec)
    running: dict[str, int] = {"p0": 0, "p1": 0}
    peak: dict[str, int] = {"p0": 0, "p1": 0}

    async def track(task: object) -> None:
        tier = task.tier  # type: ignore[attr-defined]
        running[tier] += 1
        peak[tier] = max(peak[tier], running[tier])
        await asyncio.sleep(0.05)
        running[tier] -= 1

    async with running_worker(pool, redis_url, track, concurrency=8):
        ids = await producer.submit_many([TaskRequest(t, {}) for t in ["p0", "p1"] * 20])
        for task_id in ids:
            await producer.wait_result(task_id, 10)
    assert peak["p0"] == 2
    assert peak["p1"] >= 4


async def test_result_record_fields(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, Recorder(), consumer="worker-7"):
        task_id = await producer.submit("p1", {})
        await producer.wait_result(task_id, 10)
    record = json.loads(await client.get(PoolKeys.parse(pool.ref).result(task_id)))
    assert set(record) >= {
        "task_id",
        "status",
        "result",
        "attempts",
        "tier",
        "worker",
        "queue_wait_ms",
        "run_ms",
        "created_at",
        "finished_at",
    }
    assert record["worker"] == "worker-7"
    ttl = await client.pttl(PoolKeys.parse(pool.ref).result(task_id))
    assert 0 < ttl <= 3_600_000


async def test_the_published_spec_carries_no_password(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    """A password written in spec.redis.url must not be copied into the spec key anyone with the pool's keys reads."""
    pool = make_pool(pool_name, redis={"url": "redis://app:hunter2@redis.internal:6379/0?password=hunter2"})
    async with running_worker(pool, redis_url, Recorder()):
        published = await client.get(f"tierpool:{{{pool.ref}}}:spec")
    assert "hunter2" not in published
    assert json.loads(published)["redis"]["url"] == "redis://app:***@redis.internal:6379/0?password=***"
