"""Preemption (``tiers[].preemptible``) on a real Valkey: with every slot held by a preemptible low-tier run, a
higher-tier task takes that run's slot at once; the run is given back without counting a delivery and resumes
from its checkpoint, never running twice at once."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.protocol.envelope import Task
from tierpool.store.observe import active_idle_seconds, observe

from .support import FAST_RECOVERY, async_wait_until, make_pool, running_worker

pytestmark = pytest.mark.redis


def preempt_pool(name: str, **p1: Any) -> AgentPool:
    tiers = [
        {"name": "p0", "weight": 1},
        {"name": "p1", "weight": 1, "preemptible": True, "preemptAfter": "100ms", **p1},
    ]
    return make_pool(name, tiers=tiers, recovery=FAST_RECOVERY)


class Agent:
    """p1 tasks work in steps of 0.1 s, checkpointing after each; p0 tasks take 0.1 s. Records every run."""

    def __init__(self, steps: int = 10) -> None:
        self.steps = steps
        self.runs: list[dict[str, Any]] = []
        self.running: dict[str, int] = {}
        self.overlap = 0
        self.at_once = 0
        self.most_at_once = 0

    async def __call__(self, task: Task) -> Any:
        run = {
            "id": task.id,
            "tier": task.tier,
            "attempt": task.attempt,
            "from": task.checkpoint_state,
            "start": time.monotonic(),
        }
        self.runs.append(run)
        self.running[task.id] = self.running.get(task.id, 0) + 1
        self.overlap = max(self.overlap, self.running[task.id])
        self.at_once += 1
        self.most_at_once = max(self.most_at_once, self.at_once)
        try:
            if task.tier == "p0":
                await asyncio.sleep(0.1)
                return {"done": True}
            step = (task.checkpoint_state or {}).get("step", 0)
            while step < self.steps:
                await asyncio.sleep(0.1)
                step += 1
                await task.checkpoint({"step": step})
            return {"steps": step}
        finally:
            self.at_once -= 1
            self.running[task.id] -= 1
            run["end"] = time.monotonic()


async def test_a_p0_task_takes_the_slot_of_a_preemptible_run_which_resumes_from_its_checkpoint(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = preempt_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    agent = Agent()
    async with running_worker(pool, redis_url, agent, concurrency=1) as worker:
        low = await producer.submit("p1", {})
        assert await async_wait_until(lambda: _checkpointed(agent, low, 3), 10)
        submitted = time.monotonic()
        high = await producer.submit("p0", {})
        assert await async_wait_until(lambda: _started(agent, high), 5)
        started = next(run["start"] for run in agent.runs if run["id"] == high)
        assert started - submitted < 0.5  # not after the p1 task's remaining 0.7 s
        recovery = pool.spec.recovery
        active_idle = active_idle_seconds(recovery.heartbeat, recovery.claim_idle)
        keys = PoolKeys.parse(pool.ref)
        seen = await observe(client, keys, pool.spec.tier_names, active_idle, recovery.claim_idle)
        p1 = seen.tiers[1]
        assert p1.backlog + p1.reclaimable == 1  # the preempted run is backlog to the scaler, not lost
        done = {task_id: await producer.wait_result(task_id, 20) for task_id in (low, high)}
        assert worker.series[1].preempted.value == 1
        assert worker.series[1].preempted_work.total < 0.2  # it had checkpointed within the last step
    assert done[low].ok and done[high].ok
    low_runs = [run for run in agent.runs if run["id"] == low]
    assert len(low_runs) == 2 and low_runs[1]["from"]["step"] >= 3  # resumed from its checkpoint
    assert [run["attempt"] for run in low_runs] == [1, 1]  # the preemption counted no delivery
    assert low_runs[0]["end"] <= low_runs[1]["start"] and agent.overlap == 1  # never twice at once
    assert done[low].result == {"steps": 10}


async def _checkpointed(agent: Agent, task_id: str, steps: int) -> bool:
    """The task's first run has been going long enough to have saved ``steps`` checkpoints."""
    started = [run["start"] for run in agent.runs if run["id"] == task_id]
    return len(started) == 1 and time.monotonic() - started[0] > 0.1 * steps + 0.05


async def _started(agent: Agent, task_id: str) -> bool:
    return any(run["id"] == task_id for run in agent.runs)


async def test_a_task_preempted_max_preemptions_times_runs_to_its_end(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """With ``maxPreemptions: 1`` the p1 task gives way to the first p0 task only; the second p0 task waits for it
    (the count lives in Redis, so it holds on whichever worker the task resumes)."""
    pool = preempt_pool(pool_name, maxPreemptions=1)
    producer = AsyncClient(client, pool, pool.spec)
    agent = Agent(steps=8)
    async with running_worker(pool, redis_url, agent, concurrency=1) as worker:
        low = await producer.submit("p1", {})
        assert await async_wait_until(lambda: _checkpointed(agent, low, 2), 10)
        first = await producer.submit("p0", {})
        assert (await producer.wait_result(first, 5)).ok
        assert await async_wait_until(lambda: _runs_of(agent, low, 2), 10)  # resumed
        await asyncio.sleep(0.3)  # past preemptAfter again
        second = await producer.submit("p0", {})
        assert (await producer.wait_result(low, 20)).ok
        assert (await producer.wait_result(second, 5)).ok
        assert worker.series[1].preempted.value == 1
    low_runs = [run for run in agent.runs if run["id"] == low]
    second_start = next(run["start"] for run in agent.runs if run["id"] == second)
    assert len(low_runs) == 2 and second_start >= low_runs[1]["end"]  # not preempted a second time
    assert await client.get(PoolKeys.parse(pool.ref).preemptions(low)) == "1"


async def test_a_sync_handler_is_never_preempted(client: aioredis.Redis, redis_url: str, pool_name: str) -> None:
    """A thread cannot be stopped: a preemptible tier's sync runs keep their slots."""
    pool = preempt_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    ran: list[tuple[str, float, float]] = []

    def handler(task: Task) -> Any:
        start = time.monotonic()
        time.sleep(0.8 if task.tier == "p1" else 0.05)
        ran.append((task.tier, start, time.monotonic()))
        return None

    async with running_worker(pool, redis_url, handler, concurrency=1) as worker:
        low = await producer.submit("p1", {})
        await asyncio.sleep(0.3)
        high = await producer.submit("p0", {})
        assert (await producer.wait_result(high, 10)).ok and (await producer.wait_result(low, 10)).ok
        assert worker.series[1].preempted.value == 0
    (low_run,) = [r for r in ran if r[0] == "p1"]
    (high_run,) = [r for r in ran if r[0] == "p0"]
    assert high_run[1] >= low_run[2]


async def _runs_of(agent: Agent, task_id: str, count: int) -> bool:
    return len([run for run in agent.runs if run["id"] == task_id]) >= count


async def test_three_tiers_one_preemption_takes_one_task_and_never_exceeds_concurrency(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """With backlog in p0 and p1 while p2 holds the only slot, the blocking read returns one entry of each (COUNT
    is per stream): one preemption starts the p0 task, the p1 entry goes back, and one handler runs at a time."""
    tiers = [
        {"name": "p0", "weight": 1},
        {"name": "p1", "weight": 1},
        {"name": "p2", "weight": 1, "preemptible": True, "preemptAfter": "100ms"},
    ]
    pool = make_pool(pool_name, tiers=tiers, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    agent = Agent(steps=6)
    async with running_worker(pool, redis_url, agent, concurrency=1):
        low = await producer.submit("p2", {})
        assert await async_wait_until(lambda: _started(agent, low), 5)
        keys = PoolKeys.parse(pool.ref)
        envelope = {"payload": "{}", "created_at": str(int(time.time() * 1000))}
        pipe = client.pipeline(transaction=True)  # both arrive in one step, before the worker's read
        pipe.xadd(keys.tier("p1"), {"task_id": "mid", "tier": "p1", **envelope})
        pipe.xadd(keys.tier("p0"), {"task_id": "top", "tier": "p0", **envelope})
        await pipe.execute()
        for task_id in ("top", "mid", low):
            assert (await producer.wait_result(task_id, 20)).ok
    assert agent.most_at_once == 1
    assert [run["id"] for run in agent.runs][:2] == [low, "top"]


async def test_a_run_that_will_not_stop_keeps_its_slot_and_the_task_read_goes_back(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """A handler that swallows the cancellation keeps its slot: the p0 task read for it is handed back and runs
    once the slot frees, and the p1 task ends with its own result."""
    pool = preempt_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    order: list[str] = []

    async def stubborn(task: Task) -> Any:
        if task.tier == "p1":
            end = time.monotonic() + 1.5
            while time.monotonic() < end:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(end - time.monotonic())
        order.append(task.tier)
        return {"tier": task.tier}

    async with running_worker(pool, redis_url, stubborn, concurrency=1) as worker:
        worker.preemptor.stop_wait = 0.2
        low = await producer.submit("p1", {})
        await asyncio.sleep(0.3)
        high = await producer.submit("p0", {})
        assert (await producer.wait_result(low, 10)).result == {"tier": "p1"}
        assert (await producer.wait_result(high, 10)).ok
        assert worker.series[1].preempted.value == 0
        assert worker.reads.handed_back >= 1  # the p0 task read for the stubborn run went back
    assert order == ["p1", "p0"]


async def test_a_task_that_will_not_run_stops_no_run(client: aioredis.Redis, redis_url: str, pool_name: str) -> None:
    """An entry the worker dead-letters on reading it (here: no task_id, written by a plain XADD) costs no
    preemptible run its work: the checks run before any run is stopped."""
    pool = preempt_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    agent = Agent(steps=8)
    async with running_worker(pool, redis_url, agent, concurrency=1) as worker:
        low = await producer.submit("p1", {})
        assert await async_wait_until(lambda: _checkpointed(agent, low, 3), 10)
        keys = PoolKeys.parse(pool.ref)
        await client.xadd(keys.tier("p0"), {"tier": "p0", "payload": "{}", "created_at": "1"})
        assert await async_wait_until(lambda: _dead_letters(client, keys), 5)
        assert (await producer.wait_result(low, 10)).ok
        assert worker.series[1].preempted.value == 0
    assert len([run for run in agent.runs if run["id"] == low]) == 1


async def _dead_letters(client: aioredis.Redis, keys: PoolKeys) -> bool:
    return int(await client.xlen(keys.dlq)) == 1


async def test_a_rate_limited_task_stops_no_run(client: aioredis.Redis, redis_url: str, pool_name: str) -> None:
    """A task with a rate limit may not start when it gets a slot (its bucket decides), so it preempts nothing."""
    tiers = [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "preemptible": True, "preemptAfter": "100ms"}]
    limits = [{"name": "api", "perMinute": 600}]
    pool = make_pool(pool_name, tiers=tiers, recovery=FAST_RECOVERY, rateLimits=limits)
    producer = AsyncClient(client, pool, pool.spec)
    agent = Agent(steps=8)
    async with running_worker(pool, redis_url, agent, concurrency=1) as worker:
        low = await producer.submit("p1", {})
        assert await async_wait_until(lambda: _checkpointed(agent, low, 3), 10)
        high = await producer.submit("p0", {}, rate_limit="api")
        assert (await producer.wait_result(low, 10)).ok and (await producer.wait_result(high, 10)).ok
        assert worker.series[1].preempted.value == 0
    assert [run["id"] for run in agent.runs] == [low, high]


async def test_a_draining_worker_preempts_nothing_and_leaves_the_p0_task_to_another(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """Once a worker drains (SIGTERM), a p0 task that arrives does not stop its preemptible run: the run ends with
    its own result, and the p0 task waits in the stream for a worker that takes work."""
    pool = preempt_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    agent = Agent(steps=8)
    async with running_worker(pool, redis_url, agent, concurrency=1, consumer="draining") as worker:
        low = await producer.submit("p1", {})
        assert await async_wait_until(lambda: _checkpointed(agent, low, 2), 10)
        worker.request_stop()
        high = await producer.submit("p0", {})
        assert (await producer.wait_result(low, 10)).ok
        await asyncio.sleep(0.3)
        assert worker.series[1].preempted.value == 0
        assert not await _started(agent, high)
    async with running_worker(pool, redis_url, agent, concurrency=1, consumer="next"):
        assert (await producer.wait_result(high, 10)).ok
    assert [run["id"] for run in agent.runs] == [low, high]


async def test_a_stop_while_a_victim_stops_loses_neither_task(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """The drain begins while a preempted run is still stopping (its handler takes 0.3 s to give way): the p0 task
    read for it either starts on the freed slot or goes back, and both tasks end, each run once at a time."""
    pool = preempt_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    agent = Agent(steps=8)
    stopping = asyncio.Event()

    async def slow_to_yield(task: Task) -> Any:
        try:
            return await agent(task)
        except asyncio.CancelledError:
            stopping.set()
            await asyncio.shield(asyncio.sleep(0.3))
            raise

    async with running_worker(pool, redis_url, slow_to_yield, concurrency=1, consumer="first") as worker:
        low = await producer.submit("p1", {})
        assert await async_wait_until(lambda: _checkpointed(agent, low, 2), 10)
        high = await producer.submit("p0", {})
        await asyncio.wait_for(stopping.wait(), 5)
        worker.request_stop()
    async with running_worker(pool, redis_url, slow_to_yield, concurrency=1, consumer="second"):
        done = {task_id: await producer.wait_result(task_id, 20) for task_id in (low, high)}
    assert done[low].ok and done[high].ok
    assert agent.overlap == 1 and agent.most_at_once == 1
    low_runs = [run for run in agent.runs if run["id"] == low]
    assert all(a["end"] <= b["start"] for a, b in itertools.pairwise(low_runs))
    assert low_runs[-1]["from"]["step"] >= 2  # it resumed from its checkpoint, wherever it resumed


async def test_two_workers_each_preempt_for_the_p0_task_they_read(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """Two workers of one slot each run a preemptible p1 task; two p0 tasks arrive together. Each worker preempts
    its own run for the p0 task its read returned: both start at once, no run is stopped twice, and every task
    ends once, never running twice at once."""
    pool = preempt_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    agent = Agent(steps=10)
    async with (
        running_worker(pool, redis_url, agent, concurrency=1, consumer="w1") as one,
        running_worker(pool, redis_url, agent, concurrency=1, consumer="w2") as two,
    ):
        lows = [await producer.submit("p1", {}) for _ in range(2)]
        assert await async_wait_until(lambda: _all_checkpointed(agent, lows, 3), 10)
        submitted = time.monotonic()
        highs = [await producer.submit("p0", {}) for _ in range(2)]
        assert await async_wait_until(lambda: _all_started(agent, highs), 5)
        starts = [run["start"] for run in agent.runs if run["id"] in highs]
        assert max(starts) - submitted < 0.5  # neither waited for a p1 task's remaining 0.7 s
        done = {task_id: await producer.wait_result(task_id, 20) for task_id in (*lows, *highs)}
        assert one.series[1].preempted.value == 1 and two.series[1].preempted.value == 1
    assert all(result.ok for result in done.values())
    assert agent.overlap == 1 and agent.most_at_once <= 2
    for low in lows:
        runs = [run for run in agent.runs if run["id"] == low]
        assert len(runs) == 2 and runs[1]["from"]["step"] >= 3 and runs[0]["end"] <= runs[1]["start"]


async def _all_checkpointed(agent: Agent, task_ids: list[str], steps: int) -> bool:
    return all([await _checkpointed(agent, task_id, steps) for task_id in task_ids])


async def _all_started(agent: Agent, task_ids: list[str]) -> bool:
    return all(any(run["id"] == task_id for run in agent.runs) for task_id in task_ids)
