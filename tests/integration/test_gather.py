"""Spawn and gather against a real Valkey, on in-process workers: a parent gives its slot up while it gathers and
resumes once, its children run at its priority, a child's failure reaches gather, a cancel reaches the children,
and the parent's record lists them (tests/integration/fanout_app.py is the App)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool import AsyncClient
from tierpool.model.keys import PoolKeys
from tierpool.protocol.envelope import Task
from tierpool.protocol.gather import child_id
from tierpool.runtime.gathering import Gatherer
from tierpool.store.observe import observe
from tierpool.store.streams import PoolStreams

from .fanout_app import Fan, Num, Tree, app, grandparent, parent, square
from .support import FAST_RECOVERY, make_pool, running_worker

pytestmark = pytest.mark.redis


@pytest.fixture(autouse=True)
def _counts(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATHER_TEST_URL", redis_url)


def _pool(name: str, **recovery: Any) -> Any:
    return make_pool(name, recovery={**FAST_RECOVERY, **recovery})


async def _count(client: aioredis.Redis, task_id: str, what: str) -> int:
    return int(await client.get(f"gathertest:{task_id}:{what}") or 0)


async def test_a_one_slot_worker_finishes_a_parent_with_five_children(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = _pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    async with running_worker(pool, redis_url, app, concurrency=1), AsyncClient.from_url(redis_url, pool) as producer:
        handle = await producer.submit(parent, Fan(n=5))
        assert await handle.result(timeout=20) == [0, 1, 4, 9, 16]
        record = await handle.record(1)
    children = [child_id(handle.id, n) for n in range(5)]
    assert record.children == children
    assert [await _count(client, handle.id, what) for what in ("started", "finished")] == [2, 1]  # parked once
    assert [await _count(client, child, "ran") for child in children] == [1] * 5
    assert (await client.exists(keys.parked(handle.id)), await client.zcard(keys.gathering)) == (0, 0)
    assert await client.hget(keys.where, handle.id) is None


async def test_the_sweep_resumes_a_parent_whose_last_childs_worker_never_called_gathered(
    redis_url: str, pool_name: str, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As after a crash between a child's outcome and its worker's GATHERED call: only the sweep resumes."""
    monkeypatch.setattr(Gatherer, "landed", lambda self, key, status, task: self.parks.discard(key))
    pool = _pool(pool_name)
    async with running_worker(pool, redis_url, app, concurrency=1), AsyncClient.from_url(redis_url, pool) as producer:
        handle = await producer.submit(parent, Fan(n=3))
        assert await handle.result(timeout=20) == [0, 1, 4]
    assert await _count(client, handle.id, "started") == 2


async def test_no_sweep_no_resume_without_the_childrens_outcomes(
    redis_url: str, pool_name: str, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other side: with neither the call nor the sweep, the parked parent stays parked (the test above is not
    passing by some other path)."""
    monkeypatch.setattr(Gatherer, "landed", lambda self, key, status, task: self.parks.discard(key))
    monkeypatch.setattr(Gatherer, "sweep", _no_sweep)
    pool = _pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    async with running_worker(pool, redis_url, app, concurrency=1), AsyncClient.from_url(redis_url, pool) as producer:
        handle = await producer.submit(parent, Fan(n=2))
        await _until(lambda: client.exists(producer.keys.result(child_id(handle.id, 1))))
        await asyncio.sleep(1.0)  # five sweep intervals
        assert await producer.result(handle.id) is None
        assert await client.exists(keys.parked(handle.id)) == 1
        assert await _gatherer(producer).resume(handle.id) == 1  # GATHERED itself does
        assert await handle.result(timeout=20) == [0, 1]


async def _no_sweep(self: Gatherer) -> int:
    return 0


def _gatherer(producer: AsyncClient) -> Gatherer:
    streams = PoolStreams(producer.redis, producer.keys, producer.spec.tier_names)
    return Gatherer(streams, producer.spec, None, "test", lambda task: None, time.time)


async def plain(task: Task) -> Any:
    """A plain handler: a parent spawns into a tier by name (``"p2"``: raised to its own ``p0``)."""
    if "x" in task.payload:
        return {"x": task.payload["x"] * 2, "tier": task.tier}
    children = [await task.spawn("p2", {"x": x}) for x in range(3)]
    return await task.gather(*children)


async def test_a_plain_handler_spawns_into_a_tier_by_name(redis_url: str, pool_name: str) -> None:
    pool = _pool(pool_name)
    async with running_worker(pool, redis_url, plain, concurrency=1), AsyncClient.from_url(redis_url, pool) as producer:
        task_id = await producer.submit("p0", {})
        record = await producer.wait_result(task_id, 20)
    assert record.result == [{"x": 0, "tier": "p0"}, {"x": 2, "tier": "p0"}, {"x": 4, "tier": "p0"}]
    assert record.children == [child_id(task_id, n) for n in range(3)]


async def test_children_run_at_their_parents_tier_ahead_of_its_backlog(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = _pool(pool_name)
    async with AsyncClient.from_url(redis_url, pool) as producer:
        backlog = await producer.submit_many(square, [Num(x=i, hold=0.05) for i in range(30)])
        handle = await producer.submit(parent, Fan(n=5, tier="p2"))  # asks for p2 explicitly: raised to p0
        async with running_worker(pool, redis_url, app, concurrency=1):
            assert await handle.result(timeout=30) == [0, 1, 4, 9, 16]
            done = sum([await producer.result(h.id) is not None for h in backlog])
        records = [await producer.result(child_id(handle.id, n)) for n in range(5)]
    assert [r.tier for r in records if r is not None] == ["p0"] * 5
    assert done < 15  # without inheritance the children queue behind all 30


async def test_a_childs_failure_raises_in_gather(redis_url: str, pool_name: str) -> None:
    pool = _pool(pool_name, maxDeliveries=2)
    async with running_worker(pool, redis_url, app, concurrency=2), AsyncClient.from_url(redis_url, pool) as producer:
        handle = await producer.submit(parent, Fan(n=3, fail=1))
        record = await handle.record(20)
    assert record.status == "dead_lettered"
    assert f"ChildFailed: task {handle.id}.1 dead_lettered" in (record.error or "")


async def test_return_exceptions_returns_a_childs_failure_in_its_place(redis_url: str, pool_name: str) -> None:
    pool = _pool(pool_name)
    async with running_worker(pool, redis_url, app, concurrency=1), AsyncClient.from_url(redis_url, pool) as producer:
        handle = await producer.submit(parent, Fan(n=3, fail=1, return_exceptions=True))
        assert await handle.result(timeout=20) == [0, f"{handle.id}.1:dead_lettered", 4]


async def test_cancelling_a_parked_parent_cancels_its_children_and_it(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = _pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    async with running_worker(pool, redis_url, app, concurrency=1), AsyncClient.from_url(redis_url, pool) as producer:
        handle = await producer.submit(parent, Fan(n=4, hold=30))
        await _until(lambda: client.exists(keys.parked(handle.id)))
        await handle.cancel()
        record = await handle.record(20)
        children = [await producer.wait_result(child_id(handle.id, n), 5) for n in range(4)]
    assert (record.status, await _count(client, handle.id, "finished")) == ("cancelled", 0)
    assert [c.status for c in children] == ["cancelled"] * 4
    assert sum([await _count(client, c.task_id, "ran") for c in children]) <= 1  # the one running, stopped
    assert (await client.exists(keys.parked(handle.id)), await client.zcard(keys.gathering)) == (0, 0)


async def test_cancelling_a_task_cancels_its_grandchildren_too(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """Two children, each parked in a gather of three grandchildren of 30 s; a cancel of the grandparent stops the
    running grandchildren and cancels the waiting ones (their parents' markers are not set: the children are
    parked, not cancelled yet), then the children and the grandparent as they resume."""
    pool = _pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    async with running_worker(pool, redis_url, app, concurrency=2), AsyncClient.from_url(redis_url, pool) as producer:
        handle = await producer.submit(grandparent, Tree(n=2, fan=Fan(n=3, hold=30)))
        children = [child_id(handle.id, n) for n in range(2)]
        await _until(lambda: _all_parked(client, keys, children))
        grandchildren_ids = [child_id(c, n) for c in children for n in range(3)]
        await _until(lambda: _ran(client, grandchildren_ids, 2))
        await handle.cancel()
        record = await handle.record(20)
        parents = [await producer.wait_result(child, 5) for child in children]
        grandchildren = [await producer.wait_result(g, 5) for g in grandchildren_ids]
    assert record.status == "cancelled"
    assert [p.status for p in parents] == ["cancelled"] * 2
    assert [g.status for g in grandchildren] == ["cancelled"] * 6
    assert sum([await _count(client, g.task_id, "ran") for g in grandchildren]) <= 2  # the running ones, stopped


async def _ran(client: aioredis.Redis, task_ids: list[str], at_least: int) -> bool:
    return sum([await _count(client, t, "ran") for t in task_ids]) >= at_least


async def _all_parked(client: aioredis.Redis, keys: PoolKeys, task_ids: list[str]) -> bool:
    return await client.exists(*[keys.parked(t) for t in task_ids]) == len(task_ids)


async def test_a_parent_whose_deadline_passes_while_it_gathers_says_so(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """One slot, a 3 s deadline, three children of 2 s: the third child (which inherits the deadline) never
    starts, and the parent, taken again after its deadline, is dead-lettered as one that waited, not as one that
    never started. Each start has about a second of slack."""
    pool = _pool(pool_name)
    async with running_worker(pool, redis_url, app, concurrency=1), AsyncClient.from_url(redis_url, pool) as producer:
        handle = await producer.submit(parent, Fan(n=3, hold=2.0), deadline=timedelta(seconds=3))
        record = await handle.record(20)
        last = await producer.wait_result(child_id(handle.id, 2), 5)
    assert (last.status, last.reason) == ("dead_lettered", "deadline passed before the task started")
    assert (record.status, record.reason) == (
        "dead_lettered",
        "deadline passed while the task waited for its children (gather); not resumed",
    )
    assert await _count(client, handle.id, "started") == 1


async def test_the_scaler_counts_no_slot_for_a_parked_parent_and_its_children_as_backlog(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = _pool(pool_name)
    keys = PoolKeys.parse(pool.ref)
    tiers = pool.spec.tier_names
    async with running_worker(pool, redis_url, app, concurrency=1), AsyncClient.from_url(redis_url, pool) as producer:
        handle = await producer.submit(parent, Fan(n=5, hold=30))
        await _until(lambda: client.exists(keys.parked(handle.id)))
        await _until(lambda: _pending(client, keys, tiers))
        seen = (await observe(client, keys, tiers, active_idle=5.0)).tiers[0]
        await handle.cancel()
        await handle.record(20)
    assert (seen.name, seen.pending, seen.active, seen.backlog) == ("p0", 1, 1, 4)  # child .0 runs, 4 wait


async def _pending(client: aioredis.Redis, keys: PoolKeys, tiers: list[str]) -> bool:
    return (await observe(client, keys, tiers)).tiers[0].pending == 1


async def _until(check: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def test_a_finished_childs_record_outlives_a_long_wait_for_its_siblings(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """resultTTL 2 s, five children of 0.8 s each on one slot: the first child's record would expire before the
    last child ends, and the parent would wait for it for ever. Each resume attempt while children still run keeps
    the finished ones' records, so the parent resumes with every result."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, tasks={"resultTTL": "2s"})
    async with running_worker(pool, redis_url, app, concurrency=1), AsyncClient.from_url(redis_url, pool) as producer:
        handle = await producer.submit(parent, Fan(n=5, hold=0.8))
        assert await handle.result(timeout=20) == [0, 1, 4, 9, 16]
