"""Cancel against the worker's real scripts, stepped by hand: a task that moves (into the due-time index or the
throttled set, out through the retention trim, or to its cancelled record by the cancel's own marker) while the
cancel runs must still be reported as cancelled, and a cancel's round trips must not grow with the streams.

Each test runs the cancel plan one batch at a time on a real server, and moves the task with the worker's own
call builders right before the cancel's first stream scan (where the lookup used to be exposed), or right after
the cancel when it has no such scan."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.client.tracking import CancelReport
from tierpool.model.keys import PoolKeys
from tierpool.model.resource import AgentPool
from tierpool.protocol.delays import DueRoute
from tierpool.protocol.dispatch import TakePlan
from tierpool.protocol.envelope import Task, decode
from tierpool.protocol.submission import TaskRequest
from tierpool.protocol.task_state import CancelState
from tierpool.runtime.task_control import BEFORE_START
from tierpool.store.due import Throttle, reschedule_call
from tierpool.store.streams import PoolStreams

from .support import FAST_RECOVERY, Recorder, make_pool, running_worker

pytestmark = pytest.mark.redis
STREAM_READS = frozenset({"xinfo_groups", "xrange"})


class Stepping:
    """A client for the producer that runs ``meanwhile`` once, right before the first pipeline that reads a stream
    (the lookup's stream scan), and counts the pipelines and commands sent; everything else is the real client."""

    def __init__(self, client: aioredis.Redis, meanwhile: Callable[[], Awaitable[None]] | None = None) -> None:
        self.client, self.meanwhile = client, meanwhile
        self.batches = self.commands = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def pipeline(self, transaction: bool = True) -> SteppingPipeline:
        return SteppingPipeline(self, self.client.pipeline(transaction=transaction))

    async def before(self, names: list[str]) -> None:
        self.batches, self.commands = self.batches + 1, self.commands + len(names)
        if self.meanwhile is not None and STREAM_READS.intersection(names):
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()

    async def after(self) -> None:
        """The cancel is over: what was to happen during it happens now, if its moment never came."""
        if self.meanwhile is not None:
            meanwhile, self.meanwhile = self.meanwhile, None
            await meanwhile()


class SteppingPipeline:
    def __init__(self, owner: Stepping, pipe: Any) -> None:
        self.owner, self.pipe, self.names = owner, pipe, list[str]()

    def __getattr__(self, name: str) -> Any:
        def queue(*args: Any, **kwargs: Any) -> SteppingPipeline:
            self.names.append(name)
            getattr(self.pipe, name)(*args, **kwargs)
            return self

        return queue

    async def execute(self, raise_on_error: bool = True) -> Any:
        await self.owner.before(self.names)
        return await self.pipe.execute(raise_on_error=raise_on_error)


async def stepped_cancel(
    client: aioredis.Redis, pool: AgentPool, task_id: str, meanwhile: Callable[[], Awaitable[None]] | None = None
) -> tuple[CancelReport, Stepping]:
    """Cancel ``task_id`` as the producer does, running ``meanwhile`` during it (see :class:`Stepping`)."""
    stepping = Stepping(client, meanwhile)
    report = await AsyncClient(stepping, pool, pool.spec).cancel(task_id)  # type: ignore[arg-type]
    await stepping.after()
    return report, stepping


class Running:
    """A task taken by consumer ``w1`` as a worker's read takes it, so the worker's own scripts can move it."""

    def __init__(self, client: aioredis.Redis, pool: AgentPool) -> None:
        self.pool = pool
        self.streams = PoolStreams(client, PoolKeys.parse(pool.ref), pool.spec.tier_names, pool.spec.tenant_limits)
        self.task: Task | None = None

    async def take(self) -> Task:
        await self.streams.load_scripts()
        await self.streams.ensure_groups()
        [entry] = await self.streams.take(TakePlan((0, 1, 0), (-1, -1, -1)), "w1")
        self.task = decode(entry.id, entry.fields, entry.deliveries)
        if self.task.tenant is not None:  # as a worker's read does: through the tenant gate's worker side
            assert await self.streams.admit_entries("w1", {entry.tier_index: [entry.id]}) == {
                (entry.tier_index, entry.id): 1
            }
        return self.task

    async def reschedule(self, delay_ms: int) -> None:
        """The run fails with a RetryAfter longer than claimIdle: the RESCHEDULE script."""
        assert self.task is not None
        route = DueRoute("defer", delay_ms, delay_ms)
        call = reschedule_call(self.streams, 1, "w1", self.task, "503", route, 3, 600_000)
        assert await self.streams.run(*call) == 1

    async def throttle(self, client: aioredis.Redis) -> None:
        """The run draws from a rate limit booked a second ahead: the THROTTLE script parks it."""
        assert self.task is not None
        throttle = Throttle(self.streams, self.pool.spec, object(), "w1", asyncio.Event())
        bucket = throttle.buckets["ai"]
        seconds, micros = await client.time()
        await client.hset(self.streams.keys.rate_bucket("ai"), "tat", seconds * 1000 + micros // 1000 + 1000)
        assert int(await self.streams.run(*throttle._call(1, self.task, bucket))) > 0

    async def cancelled_by_worker(self) -> None:
        """The worker read the marker at take time and wrote the cancelled outcome: the CANCELLED script."""
        assert self.task is not None
        record = json.dumps({"task_id": self.task.id, "status": "cancelled", "reason": BEFORE_START}).encode()
        call = self.streams.cancelled_call(1, "w1", self.task.stream_id, self.task.id, record, 60_000)
        assert await self.streams.run(*call) == 1


async def ends_cancelled(producer: AsyncClient, pool: AgentPool, redis_url: str, task_id: str) -> None:
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder):
        assert (await producer.wait_result(task_id, 10)).status == "cancelled"
    assert recorder.count(task_id) == 0


@pytest.mark.parametrize("move", ["reschedule", "throttle"])
async def test_a_task_that_leaves_its_stream_during_the_cancel_is_reported_cancelled(
    client: aioredis.Redis, redis_url: str, pool_name: str, move: str
) -> None:
    """It used to be reported ``finished`` (an acked entry, no result) with ``cancelled: false``, yet it ended
    cancelled when it came back."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, rateLimits=[{"name": "ai", "perMinute": 60}])
    producer = AsyncClient(client, pool, pool.spec)
    task_id = await producer.submit("p1", {})
    running = Running(client, pool)
    await running.take()

    async def meanwhile() -> None:
        await (running.reschedule(1_000) if move == "reschedule" else running.throttle(client))

    report, _ = await stepped_cancel(client, pool, task_id, meanwhile)
    assert report.cancelled, report
    assert report.state is CancelState.RUNNING, report
    await ends_cancelled(producer, pool, redis_url, task_id)


async def test_a_task_trimmed_out_of_its_stream_during_the_cancel_is_not_reported_unknown(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """With the retention trim after the move, the lookup found the task nowhere: ``unknown``, its marker taken
    back, and the task ran and succeeded once it came due."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    task_id = await producer.submit("p1", {})
    running = Running(client, pool)
    await running.take()

    async def meanwhile() -> None:
        await running.reschedule(1_000)
        assert await running.streams.trim_acknowledged(1) == 1

    report, _ = await stepped_cancel(client, pool, task_id, meanwhile)
    assert report.state is not CancelState.UNKNOWN, report
    assert report.cancelled, report
    assert await client.exists(producer.keys.cancel(task_id)) == 1
    await ends_cancelled(producer, pool, redis_url, task_id)


async def test_a_cancel_whose_marker_the_worker_acts_on_at_once_is_reported_cancelled(
    client: aioredis.Redis, pool_name: str
) -> None:
    """The worker takes the task right after the marker is set and writes its cancelled record before the lookup
    reads it: the cancel reported ``finished``, ``cancelled: false``."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    task_id = await producer.submit("p1", {})
    running = Running(client, pool)

    async def meanwhile() -> None:
        await running.take()
        await running.cancelled_by_worker()

    report, _ = await stepped_cancel(client, pool, task_id, meanwhile)
    assert report.state is CancelState.WAITING, report
    assert report.cancelled, report


async def test_a_cancelled_delayed_task_gets_its_cancelled_record_at_once(
    client: aioredis.Redis, pool_name: str
) -> None:
    """A task delayed 60 s used to get its ``cancelled`` record only when it came due: ``wait_result`` blocked
    until then (and ``tierpool result`` said nothing)."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    task_id = await producer.submit("p1", {}, delay=60)
    report = await producer.cancel(task_id)
    assert report.state is CancelState.WAITING and report.cancelled, report
    result = await producer.wait_result(task_id, 1.0)
    assert result.status == "cancelled" and result.reason == "cancelled before it started"
    assert await client.zcard(producer.keys.due) == 0  # out of the index: nothing comes due later
    assert (await producer.cancel(task_id)).state is CancelState.FINISHED


async def test_a_cancelled_held_task_gets_its_cancelled_record_at_once(client: aioredis.Redis, pool_name: str) -> None:
    tiers = [{"name": "p0", "weight": 1, "tenantConcurrency": 1}, {"name": "p1", "weight": 1}]
    pool = make_pool(pool_name, tiers=tiers, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    await producer.submit("p0", {}, tenant="acme")  # admitted
    held = await producer.submit("p0", {}, tenant="acme")  # held for acme's turn
    assert await client.zcard(producer.keys.held("p0")) == 1
    report = await producer.cancel(held)
    assert report.state is CancelState.WAITING and report.cancelled, report
    assert (await producer.wait_result(held, 1.0)).status == "cancelled"
    assert await client.zcard(producer.keys.held("p0")) == 0


async def test_a_cancelled_throttled_task_gives_its_tenant_slot_to_the_next_held_task(
    client: aioredis.Redis, pool_name: str
) -> None:
    """A throttled task keeps its tenant's slot (pseudo entry ``t:<paid>:<task_id>``): after the cancel that takes
    it out of the throttled set (a producer's script, which may not write the counts), the lease holder's repair
    releases the slot and admits the tenant's next held task."""
    tiers = [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "tenantConcurrency": 1}]
    pool = make_pool(pool_name, tiers=tiers, recovery=FAST_RECOVERY, rateLimits=[{"name": "ai", "perMinute": 60}])
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    throttled = await producer.submit("p1", {}, tenant="acme")
    held = await producer.submit("p1", {}, tenant="acme")
    running = Running(client, pool)
    assert (await running.take()).id == throttled
    await running.throttle(client)
    report = await producer.cancel(throttled)
    assert report.state is CancelState.WAITING and report.cancelled, report
    assert (await producer.wait_result(throttled, 1.0)).status == "cancelled"
    assert await client.zcard(keys.throttled) == 0
    assert await client.zcard(keys.held("p1")) == 1 and await client.hgetall(keys.tenants("p1")) == {"acme": "1"}
    assert (await running.streams.repair_tenants())["p1"].released == 1
    assert await client.zcard(keys.held("p1")) == 0  # the next one was admitted into the stream
    assert await client.hgetall(keys.tenants("p1")) == {"acme": "1"}
    [(_, fields)] = await client.xrange(keys.tier("p1"), "(" + running.task.stream_id if running.task else "-")
    assert fields["task_id"] == held


async def fill_stream(producer: AsyncClient, count: int) -> None:
    for start in range(0, count, 500):
        await producer.submit_many([TaskRequest("p1", {"pad": "x" * 512}) for _ in range(min(500, count - start))])


async def xrange_calls(client: aioredis.Redis) -> int:
    return int((await client.info("commandstats")).get("cmdstat_xrange", {}).get("calls", 0))


@pytest.mark.parametrize("state", [CancelState.WAITING, CancelState.RUNNING])
async def test_a_cancel_costs_the_same_round_trips_however_long_the_streams(
    client: aioredis.Redis, pool_name: str, state: CancelState
) -> None:
    """Every cancel used to read every kept entry of every stream, a page of 1,000 a round trip (0.63 s for 20,000
    entries of 8 KB). Counted, not timed: the pipelines and commands a cancel sends, and the server's XRANGE
    calls, for a task behind 10 entries and one behind 2,500 (a running task: 2,500 behind it)."""
    costs = []
    for depth in (10, 2_500):
        pool = make_pool(f"{pool_name}-{depth}", recovery=FAST_RECOVERY)
        producer = AsyncClient(client, pool, pool.spec)
        first = await producer.submit("p1", {})
        await fill_stream(producer, depth)
        last = await producer.submit("p1", {})
        task_id = last
        if state is CancelState.RUNNING:
            await Running(client, pool).take()
            task_id = first
        before = await xrange_calls(client)
        report, stepping = await stepped_cancel(client, pool, task_id)
        assert report.state is state, report
        costs.append((stepping.batches, stepping.commands, await xrange_calls(client) - before))
    assert costs[0] == costs[1], costs
    assert costs[1][:2] == (1, 1), costs  # one pipeline of one command: the CANCEL script
    assert costs[1][2] <= 1, costs  # inside it, at most a one-entry XRANGE (does the entry exist)


async def test_a_task_a_plain_xadd_enqueued_is_still_found_by_the_scan(client: aioredis.Redis, pool_name: str) -> None:
    """A producer that is not tierpool's (or an older one) writes no index entry: the cancel falls back to scanning
    the streams, and finds the task waiting, then running."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    fields = {"task_id": "foreign-1", "tier": "p1", "payload": "{}", "created_at": "1"}
    await client.xadd(keys.tier("p1"), fields)  # type: ignore[arg-type]
    assert await client.exists(keys.prefix + "where") == 0
    report, stepping = await stepped_cancel(client, pool, "foreign-1")
    assert report.state is CancelState.WAITING, report
    assert stepping.batches > 1  # the scan
    await Running(client, pool).take()
    assert (await producer.cancel("foreign-1")).state is CancelState.RUNNING
    assert (await producer.cancel("never-submitted")).state is CancelState.UNKNOWN
