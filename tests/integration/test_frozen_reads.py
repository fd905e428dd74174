"""A worker that stalled with a read in flight never starts an entry another worker took over or finished meanwhile
(tierpool.runtime.late_reads): a real SIGSTOP of a worker process blocked in XREADGROUP, then a late TAKE and a
late reclaim simulated in-process with an injected monotonic clock; and prompt reads pay no extra round trip."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.dispatch import TakePlan
from tierpool.store.streams import Entry, PoolStreams, ReclaimResult

from .support import (
    FAST_RECOVERY,
    Recorder,
    async_wait_until,
    killed_on_exit,
    make_pool,
    results,
    running_worker,
    spawn_worker,
    sync_redis,
    wait_until,
)

pytestmark = pytest.mark.redis

SLOW_RECLAIM = {"claimIdle": "10s", "heartbeat": "1s", "retryBackoff": "50ms", "sweepInterval": "200ms"}
"""Nobody reclaims the entry a test's fake worker ``b`` took over within the test (confirmed after 4.5 s)."""


class Clock:
    """A monotonic clock the test moves forward: the time a stalled process sees pass when it wakes."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def _when(check: Callable[[], bool]) -> Callable[[], Awaitable[bool]]:
    async def check_async() -> bool:
        return check()

    return check_async


def runs_of(log: Path, task_id: str) -> list[int]:
    """The pids that started ``task_id`` (support_handlers:logged writes one line per start)."""
    if not log.exists():
        return []
    return [int(pid) for line in log.read_text().splitlines() for tid, pid in [line.split()] if tid == task_id]


def pending_on(client: redis.Redis, stream: str, consumer: str) -> list[str]:
    return [str(p["message_id"]) for p in client.xpending_range(stream, GROUP, "-", "+", 10, consumername=consumer)]


def freeze_with_a_delivery(
    worker: subprocess.Popen[bytes], client: redis.Redis, producer: Client, stream: str, log: Path
) -> str:
    """SIGSTOP the idle worker ``a`` and submit a task: when ``a`` was blocked in XREADGROUP (almost always: its
    blocks last up to 500 ms, its passes between them a few ms), the server delivers the entry to the stopped
    process, pending on ``a``. Otherwise ``a`` is woken to run it normally, and the next try starts."""
    for _ in range(10):
        worker.send_signal(signal.SIGSTOP)
        task_id = producer.submit("p1", {})
        if wait_until(lambda: len(pending_on(client, stream, "a")) == 1, 1.0):
            return task_id
        worker.send_signal(signal.SIGCONT)
        assert wait_until(lambda: runs_of(log, task_id) == [worker.pid], 10)
        time.sleep(0.05)
    raise AssertionError("never froze worker a with a delivery in flight")


@pytest.mark.slow
def test_a_worker_frozen_with_a_blocking_read_in_flight_never_runs_what_another_finished(
    redis_url: str, pool_name: str, tmp_path: Path
) -> None:
    recovery = {"claimIdle": "3s", "heartbeat": "500ms", "retryBackoff": "4s", "sweepInterval": "500ms"}
    pool = make_pool(pool_name, worker={"concurrency": 2, "handler": "support_handlers:logged"}, recovery=recovery)
    runs = tmp_path / "runs.log"
    env = {"TEST_RUN_LOG": str(runs)}
    client, stream = sync_redis(redis_url), PoolKeys.parse(pool.ref).tier("p1")
    producer = Client(client, pool)
    frozen = spawn_worker(pool, redis_url, "--consumer", "a", log=tmp_path / "a.log", env=env)
    with killed_on_exit(frozen):
        assert wait_until(lambda: any(c["name"] == "a" for c in _consumers(client, stream)), 30), "a never read"
        task_id = freeze_with_a_delivery(frozen, client, producer, stream, runs)
        other = spawn_worker(pool, redis_url, "--consumer", "b", log=tmp_path / "b.log", env=env)
        with killed_on_exit(other):
            # b reclaims the entry once it has been idle for claimIdle, runs it and writes its final record
            assert wait_until(lambda: bool(results(client, pool, [task_id])), 30), (tmp_path / "b.log").read_text()
            frozen.send_signal(signal.SIGCONT)  # a wakes with the delivered entry in its socket buffer
            a_log = tmp_path / "a.log"
            woke = wait_until(lambda: "not started" in a_log.read_text() or frozen.pid in runs_of(runs, task_id), 10)
            assert woke, a_log.read_text()
            time.sleep(1.0)  # a start would have happened by now
            for worker in (frozen, other):
                worker.send_signal(signal.SIGTERM)
                assert worker.wait(20) == 0
    assert runs_of(runs, task_id) == [other.pid], {"a": frozen.pid, "b": other.pid}  # never after the final record
    assert results(client, pool, [task_id])[task_id]["worker"] == "b"
    assert f"outcome of task {task_id}" not in a_log.read_text()  # a had no outcome to write, refused or not
    assert pending_on(client, stream, "a") == [] and pending_on(client, stream, "b") == []


def _consumers(client: redis.Redis, stream: str) -> list[dict[str, Any]]:
    try:
        return list(client.xinfo_consumers(stream, GROUP))
    except redis.ResponseError:  # no group yet
        return []


async def test_a_take_that_returned_late_leaves_the_entry_to_the_worker_that_took_it_over(
    redis_url: str, pool_name: str, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = make_pool(pool_name, recovery=SLOW_RECLAIM)
    keys = PoolKeys.parse(pool.ref)
    task_id = await AsyncClient(client, pool, pool.spec).submit("p0", {})  # waiting for the first read, a TAKE
    clock, handler = Clock(), Recorder()
    take = PoolStreams.take

    async def late_take(streams: PoolStreams, plan: TakePlan, consumer: str) -> list[Entry]:
        entries = await take(streams, plan, consumer)
        for entry in entries:  # the process stalled with the reply on its way, and worker b took the entry over
            await client.xclaim(streams.streams[entry.tier_index], GROUP, "b", 0, [entry.id], justid=True)
        clock.offset += 20.0 if entries else 0.0
        return entries

    monkeypatch.setattr(PoolStreams, "take", late_take)
    async with running_worker(pool, redis_url, handler, consumer="a", monotonic=clock) as worker:
        started = _when(lambda: worker.series[0].stale_skipped.value == 1 or handler.count(task_id) > 0)
        assert await async_wait_until(started, 10)
        await asyncio.sleep(0.3)  # a start would have happened by now
        assert handler.count(task_id) == 0
        assert worker.series[0].stale_skipped.value == 1 and worker.late_reads.checks == 1
    [entry] = await client.xpending_range(keys.tier("p0"), GROUP, "-", "+", 10)
    assert entry["consumer"] == "b"  # the check is read-only for b's entry: not taken back
    assert await client.get(keys.result(task_id)) is None


async def test_a_reclaim_that_returned_late_never_starts_an_entry_finished_meanwhile(
    redis_url: str, pool_name: str, client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    stream = PoolKeys.parse(pool.ref).tier("p1")
    task_id = await AsyncClient(client, pool, pool.spec).submit("p1", {})
    await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    [[_, [(entry_id, _)]]] = await client.xreadgroup(GROUP, "dead", {stream: ">"}, count=1)
    await client.xclaim(stream, GROUP, "dead", 0, [entry_id], idle=60_000, justid=True)  # its worker died
    clock, handler = Clock(), Recorder()
    reclaim = PoolStreams.reclaim

    async def late_reclaim(streams: PoolStreams, *args: Any, **kw: Any) -> ReclaimResult:
        result = await reclaim(streams, *args, **kw)
        for entry in result.claimed:  # the process stalled with the reply on its way; b claimed it and finished
            await client.xclaim(stream, GROUP, "b", 0, [entry.id], justid=True)
            await client.xack(stream, GROUP, entry.id)
        clock.offset += 5.0 if result.claimed else 0.0
        return result

    monkeypatch.setattr(PoolStreams, "reclaim", late_reclaim)
    async with running_worker(pool, redis_url, handler, consumer="a", monotonic=clock) as worker:
        started = _when(lambda: worker.series[1].stale_skipped.value == 1 or handler.count(task_id) > 0)
        assert await async_wait_until(started, 10)
        await asyncio.sleep(0.3)
        assert handler.count(task_id) == 0
        assert worker.series[1].stale_skipped.value == 1 and worker.series[1].reclaimed.value == 1
    assert await client.xpending_range(stream, GROUP, "-", "+", 10) == []


async def test_prompt_reads_pay_no_ownership_check(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = make_pool(pool_name)  # the default recovery settings: confirmed after 25 s
    producer = AsyncClient(client, pool, pool.spec)
    handler = Recorder()
    async with running_worker(pool, redis_url, handler, consumer="a", concurrency=4) as worker:
        ids = [await producer.submit(("p0", "p1", "p2")[i % 3], {}) for i in range(30)]
        await asyncio.sleep(0.6)  # some reads now block, and return when a task arrives
        ids += [await producer.submit("p1", {}) for _ in range(5)]
        assert await async_wait_until(_when(lambda: all(handler.count(t) == 1 for t in ids)), 20)
        assert worker.late_reads.checks == 0
