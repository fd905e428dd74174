"""Reserved slots and paced refills (issue #14) on a real Valkey: a P0 task behind long P2 work, refill reads."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.dispatch import TakePlan
from tierpool.protocol.submission import TaskRequest
from tierpool.store.streams import Entry

from .support import FAST_RECOVERY, TIERS, Recorder, make_pool, running_worker

pytestmark = pytest.mark.redis


def tiers(p0_reserved: int) -> list[dict[str, Any]]:
    return [{**TIERS[0], "reservedSlots": p0_reserved}, *TIERS[1:]]


@pytest.mark.parametrize(("reserved", "p2_running"), [(1, 3), (0, 4)])
async def test_a_p0_task_behind_long_p2_work_starts_at_once_only_with_a_reserved_slot(
    redis_url: str, pool_name: str, client: aioredis.Redis, reserved: int, p2_running: int
) -> None:
    pool = make_pool(pool_name, tiers=tiers(reserved))
    producer = AsyncClient(client, pool, pool.spec)
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder, concurrency=4) as worker:
        await producer.submit_many([TaskRequest("p2", {"work_s": 3}) for _ in range(8)])
        assert await until(lambda: len(recorder.calls) >= p2_running, 5)
        await asyncio.sleep(0.3)  # every slot the P2 tasks may take is taken by now
        assert worker.running == [0, 0, p2_running]
        submitted = time.monotonic()
        await producer.submit("p0", {"work_s": 0})
        await until(lambda: any(c.tier == "p0" for c in recorder.calls), 1.0)
        waited = time.monotonic() - submitted
        if reserved:
            assert waited < 0.2, f"P0 waited {waited:.3f}s with a reserved slot"
        else:
            assert waited >= 1.0, f"P0 started after {waited:.3f}s although every slot ran a 3 s P2 task"
        worker.request_stop()


async def test_the_reserving_tier_may_use_every_slot(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = make_pool(pool_name, tiers=tiers(1))
    producer = AsyncClient(client, pool, pool.spec)
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder, concurrency=4) as worker:
        await producer.submit_many([TaskRequest("p0", {"work_s": 1}) for _ in range(4)])
        assert await until(lambda: len(recorder.calls) == 4, 3)
        assert worker.running == [4, 0, 0]


async def test_slots_freed_together_by_long_tasks_are_refilled_one_read_each(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """Four 0.2 s tasks started together end together; their slots are refilled by four reads of one (paced), so
    the next four do not start as one cohort again."""
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    recorder = Recorder()
    sizes: list[int] = []
    async with running_worker(pool, redis_url, recorder, concurrency=4) as worker:
        take = worker.streams.take

        async def recorded(plan: TakePlan, consumer: str) -> list[Entry]:
            entries = await take(plan, consumer)
            if entries:
                sizes.append(len(entries))
            return entries

        worker.streams.take = recorded  # type: ignore[method-assign]
        await producer.submit_many([TaskRequest("p2", {"work_s": 0.2}) for _ in range(8)])
        assert await until(lambda: len(recorder.calls) == 8, 5)
    assert sizes[-4:] == [1, 1, 1, 1], sizes  # the first cohort was read before any task had run


async def until(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.002)
    return True


async def test_short_lower_tier_tasks_keep_the_slots_open_to_them_busy(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """While the reserved slot waits for P0 work (a blocked read on P0 alone), P2 slots that free are refilled at
    once: the blocked read ends when a slot frees. P2 runs on 3 of 4 slots, never on the 4th."""
    pool = make_pool(pool_name, tiers=tiers(1))
    producer = AsyncClient(client, pool, pool.spec)
    recorder = Recorder()
    most = 0
    async with running_worker(pool, redis_url, recorder, concurrency=4) as worker:
        await producer.submit_many([TaskRequest("p2", {"work_s": 0.02}) for _ in range(90)])
        started = time.monotonic()

        def all_started() -> bool:
            nonlocal most
            most = max(most, worker.running[2])
            return len(recorder.calls) == 90

        assert await until(all_started, 10)
        took = time.monotonic() - started
    assert most == 3
    assert took < 1.2, f"90 tasks of 20 ms on 3 slots (ideal 0.58 s to the last start) took {took:.2f}s"


async def test_reclaimed_lower_tier_entries_leave_the_reserved_slot_free(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """A dead worker's idle P2 entries are claimed into the slots P2 may use, not into P0's reserved one."""
    pool = make_pool(pool_name, tiers=tiers(1), recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    stream = PoolKeys.parse(pool.ref).tier("p2")
    await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    await producer.submit_many([TaskRequest("p2", {"work_s": 3}) for _ in range(4)])
    assert len((await client.xreadgroup(GROUP, "dead-worker", {stream: ">"}))[0][1]) == 4
    await asyncio.sleep(1.2)  # idle past claimIdle
    recorder = Recorder()
    most = 0
    async with running_worker(pool, redis_url, recorder, concurrency=2) as worker:

        def watch() -> bool:
            nonlocal most
            most = max(most, worker.running[2])
            return False

        await until(watch, 3)
        worker.request_stop()
    assert recorder.calls, "nothing was reclaimed"
    assert most == 1


async def test_without_client_unblock_a_read_that_leaves_tiers_out_blocks_briefly(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """An ACL user without CLIENT commands: blocks that leave P2 out last at most 50 ms, so P2 still runs."""
    parts = urlsplit(redis_url)
    if parts.username or parts.password:
        pytest.skip("the test server's URL already carries credentials")
    user = f"no-client-{pool_name}"
    await client.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-client")
    limited = urlunsplit(parts._replace(netloc=f"{user}:pw@{parts.netloc}"))
    pool = make_pool(pool_name, tiers=tiers(1))
    producer = AsyncClient(client, pool, pool.spec)
    recorder = Recorder()
    try:
        async with running_worker(pool, limited, recorder, concurrency=4) as worker:
            await producer.submit_many([TaskRequest("p2", {"work_s": 0.02}) for _ in range(30)])
            assert await until(lambda: len(recorder.calls) == 30, 5)
            assert worker.reads.unblock is False
    finally:
        await client.execute_command("ACL", "DELUSER", user)


async def test_a_cohort_that_ends_together_is_refilled_before_its_outcomes_are_written(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """32 tasks of 20 ms start as one read and end together. The reader's refill (TAKE) goes out before the
    writer's batch of their outcomes, which would otherwise run first on the server and delay the refill."""
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    events: list[str] = []

    async def handler(task: Any) -> None:
        await asyncio.sleep(0.02)
        events.append("end")

    async with running_worker(pool, redis_url, handler, concurrency=32) as worker:
        take, run_batch = worker.streams.take, worker.streams.run_batch

        def taking(plan: TakePlan, consumer: str) -> Any:
            events.append("take")
            return take(plan, consumer)

        def writing(calls: Any, gate: Any = None) -> Any:
            events.append("write")
            return run_batch(calls, gate)

        worker.streams.take = taking  # type: ignore[method-assign]
        worker.streams.run_batch = writing  # type: ignore[method-assign]
        await producer.submit_many([TaskRequest("p2", {}) for _ in range(64)])
        assert await until(lambda: events.count("end") == 64, 10)
    after_first_end = events[events.index("end") :]
    assert "take" in after_first_end and "write" in after_first_end, events
    assert after_first_end.index("take") < after_first_end.index("write"), events


async def test_equal_tasks_that_start_together_spread_their_starts_over_their_run(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """Four 40 ms tasks start as one cohort. Paced reads alone refill such a cohort a round trip apart, so its
    slots free again within a ms or two of each other, cycle after cycle; spaced starts (2.5 ms apart here) spread
    them out, and a P0 task behind them then waits for the next of four slots that free about 10 ms apart."""
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    starts: list[float] = []

    async def handler(task: Any) -> None:
        starts.append(time.monotonic())
        await asyncio.sleep(0.04)

    async with running_worker(pool, redis_url, handler, concurrency=4):
        await producer.submit_many([TaskRequest("p2", {}) for _ in range(40)])
        assert await until(lambda: len(starts) == 40, 10)
    gaps = sorted(b - a for a, b in itertools.pairwise(starts[12:]))  # from the fourth cycle on
    assert gaps[len(gaps) // 4] >= 0.002, [round(gap * 1000, 2) for gap in gaps]  # not a bunch of near-equal starts
