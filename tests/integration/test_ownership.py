"""One owner per entry: a worker stops runs another worker took over, never claims back its own entries, and
keeps its background loops alive (supervised, restarted, reported by liveness)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.envelope import Task

from .support import FAST_RECOVERY, Recorder, async_wait_until, make_pool, running_worker

pytestmark = pytest.mark.redis

FAST = FAST_RECOVERY


class Blocking:
    """An async handler that runs until released, and records starts and cancellations."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.release = asyncio.Event()

    async def __call__(self, task: Task) -> Any:
        self.started.append(task.id)
        try:
            await asyncio.wait_for(self.release.wait(), 60)
        except asyncio.CancelledError:
            self.cancelled.append(task.id)
            raise
        return {"done": task.id}


async def pending_detail(client: aioredis.Redis, stream: str) -> list[dict[str, Any]]:
    return list(await client.xpending_range(stream, GROUP, "-", "+", 100))


async def test_a_run_taken_over_by_another_worker_is_stopped_and_counted(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST)
    stream = PoolKeys.parse(pool.ref).tier("p0")
    producer = AsyncClient(client, pool, pool.spec)
    handler = Blocking()
    async with running_worker(pool, redis_url, handler, consumer="a") as worker:
        task_id = await producer.submit("p0", {})
        assert await async_wait_until(_true_when(lambda: handler.started == [task_id]), 10)
        [entry] = await pending_detail(client, stream)
        await client.xclaim(stream, GROUP, "b", 0, [entry["message_id"]])  # worker B reclaimed it
        assert await async_wait_until(_true_when(lambda: handler.cancelled == [task_id]), 10)
        assert worker.series[0].lost_ownership.value == 1
        assert len(worker.ledger) == 0 and worker.ledger.running_total == 0
    assert await client.get(PoolKeys.parse(pool.ref).result(task_id)) is None
    [still] = await pending_detail(client, stream)
    assert still["consumer"] == "b"  # B's to finish: A wrote no outcome for it


async def test_a_worker_never_claims_back_and_reruns_its_own_running_entry(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """After an outage longer than claimIdle a worker's own running entries look idle; reclaim must skip them
    (the run must not start twice, and the second run must not replace the first in the bookkeeping)."""
    pool = make_pool(pool_name, recovery={**FAST, "claimIdle": "30s", "heartbeat": "10s"})
    stream = PoolKeys.parse(pool.ref).tier("p1")
    producer = AsyncClient(client, pool, pool.spec)
    handler = Blocking()
    async with running_worker(pool, redis_url, handler, consumer="a") as worker:
        task_id = await producer.submit("p1", {})
        assert await async_wait_until(_true_when(lambda: handler.started == [task_id]), 10)
        [entry] = await pending_detail(client, stream)
        await client.xclaim(stream, GROUP, "a", 0, [entry["message_id"]], idle=120_000, justid=True)
        assert await worker.reclaim_once() == 0
        assert handler.started == [task_id]
        assert list(worker.inflight) == [(1, entry["message_id"])] and worker.ledger.running == [0, 1, 0]
        [still] = await pending_detail(client, stream)
        assert (still["consumer"], still["times_delivered"]) == ("a", 1)
        handler.release.set()
        outcome = await producer.wait_result(task_id, 10)
    assert outcome.ok and outcome.attempts == 1


async def test_heartbeat_loop_survives_a_lost_consumer_group(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """Redis lost its data (the streams and groups are gone) while a task ran: the heartbeat fails with an error
    that is not a connection error. It must be restarted (with the group recreated), so that a long task started
    afterwards is still heartbeated and not stolen."""
    pool = make_pool(pool_name, recovery={**FAST, "claimIdle": "3s", "heartbeat": "300ms"})
    keys = PoolKeys.parse(pool.ref)
    producer = AsyncClient(client, pool, pool.spec)
    handler = Blocking()
    # one slot: while the first task runs, the read loop waits for room and cannot recreate the group itself
    async with running_worker(pool, redis_url, handler, consumer="a", concurrency=1) as worker:
        first = await producer.submit("p0", {})
        assert await async_wait_until(_true_when(lambda: handler.started == [first]), 10)
        await client.delete(*[keys.tier(t) for t in ("p0", "p1", "p2")])
        assert await async_wait_until(_true_when(lambda: worker.loops.loops["heartbeat"].failures > 0), 10)
        assert await async_wait_until(lambda: _group_exists(client, keys.tier("p2")), 10)
        handler.release.set()
        assert await async_wait_until(_true_when(lambda: worker.ledger.running_total == 0), 10)
        handler.release.clear()
        second = await producer.submit("p2", {})
        assert await async_wait_until(_true_when(lambda: second in handler.started), 10)
        idle_seen = []
        for _ in range(20):  # 4 s, longer than claimIdle
            idle_seen += [d["time_since_delivered"] for d in await pending_detail(client, keys.tier("p2"))]
            await asyncio.sleep(0.2)
        assert worker.live(), worker.loops.problems()
        handler.release.set()
    assert max(idle_seen) < 3_000, max(idle_seen)


async def test_liveness_fails_while_a_loop_is_stalled_or_dead(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST)
    producer = AsyncClient(client, pool, pool.spec)
    seen: list[bool] = []

    async def blocks_the_loop(task: Task) -> None:
        time.sleep(2.5)  # an async handler that never awaits: every loop of the worker stalls

    async with running_worker(pool, redis_url, blocks_the_loop, stall_seconds=0.5) as worker:
        assert await async_wait_until(_true_when(worker.live), 10), worker.loops.problems()
        done = threading.Event()

        def probe() -> None:  # /healthz is answered from another thread, like this
            while not done.is_set():
                seen.append(worker.live())
                time.sleep(0.05)

        prober = threading.Thread(target=probe)
        prober.start()
        try:
            task_id = await producer.submit("p0", {})
            await producer.wait_result(task_id, 20)
            assert await async_wait_until(_true_when(worker.live), 10), worker.loops.problems()
        finally:
            done.set()
            prober.join()
        assert False in seen
        worker.loops.loops["heartbeat"].task.cancel()  # type: ignore[union-attr]
        assert await async_wait_until(_true_when(lambda: "heartbeat loop is dead" in worker.loops.problems()), 5)
        assert not worker.live()


def _true_when(check: Any) -> Any:
    async def probe() -> bool:
        return bool(check())

    return probe


async def _group_exists(client: aioredis.Redis, stream: str) -> bool:
    try:
        return any(g["name"] == GROUP for g in await client.xinfo_groups(stream))
    except Exception:  # noqa: BLE001 - no stream yet
        return False


async def test_an_entry_read_for_this_worker_whose_reply_was_lost_is_adopted(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """Redis delivered an entry to this worker's consumer, then died before the reply arrived (the read is in
    its AOF). The worker does not hold it, and no other worker will take it while this consumer owns it: the
    worker itself must adopt and run it once it is idle, or a one-worker pool never finishes it."""
    pool = make_pool(pool_name, recovery=FAST)
    stream = PoolKeys.parse(pool.ref).tier("p0")
    producer = AsyncClient(client, pool, pool.spec)
    recorder = Recorder()
    task_id = await producer.submit("p0", {}, task_id="lost-reply")
    await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    await client.xreadgroup(GROUP, "a", {stream: ">"}, count=1)  # delivered to "a"; the reply never arrived
    async with running_worker(pool, redis_url, recorder, consumer="a"):
        outcome = await producer.wait_result(task_id, 15)
    assert outcome.ok and outcome.attempts == 2 and recorder.count(task_id) == 1
