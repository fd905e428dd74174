"""Protocol 4 against a real Valkey: cancel (waiting, running, retry backoff, finished, unknown), progress events
and waiting on them, checkpoints (retry, size limit), and the owner-only rule for the new scripts."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import GROUP, RETRY_CONSUMER, PoolKeys
from tierpool.protocol.dispatch import UNLIMITED, TakePlan
from tierpool.protocol.envelope import Task
from tierpool.protocol.errors import NonRetryable, TaskLost
from tierpool.protocol.submission import TaskRequest, TaskResult
from tierpool.protocol.task_state import CancelState, CheckpointTooLarge, TaskEvent
from tierpool.store import dlq as dead_letters
from tierpool.store.streams import Completion, PoolStreams

from .support import FAST_RECOVERY, Recorder, async_wait_until, make_pool, running_worker

pytestmark = pytest.mark.redis


async def pending_count(client: aioredis.Redis, keys: PoolKeys) -> int:
    total = 0
    for tier in ("p0", "p1", "p2"):
        total += int((await client.xpending(keys.tier(tier), GROUP))["pending"])
    return total


async def test_a_waiting_task_never_runs(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    await producer.submit("p2", {"n": 1}, task_id="doomed")
    await producer.submit("p2", {"n": 2}, task_id="kept")
    report = await producer.cancel("doomed")
    assert report.state is CancelState.WAITING and report.cancelled and report.found
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder) as worker:
        doomed = await producer.wait_result("doomed", 10)
        kept = await producer.wait_result("kept", 10)
        assert await async_wait_until(lambda: _zero(pending_count(client, keys)), 5)
        assert [series.cancelled.value for series in worker.series] == [0, 0, 1]
    assert doomed.status == "cancelled" and doomed.reason == "cancelled before it started" and not doomed.ok
    assert kept.status == "succeeded"
    assert recorder.count("doomed") == 0 and recorder.count("kept") == 1
    again = await producer.cancel("doomed")  # its result record says it is over
    assert again.state is CancelState.FINISHED and again.result is not None and again.result.status == "cancelled"


async def _zero(count: Any) -> bool:
    return int(await count) == 0


class Blocking:
    """An async handler that records its start and whether it was cancelled, then waits ``work_s``."""

    def __init__(self, work_s: float = 30.0) -> None:
        self.started: list[str] = []
        self.cancelled: list[str] = []
        self.work_s = work_s

    async def __call__(self, task: Task) -> Any:
        self.started.append(task.id)
        try:
            await asyncio.sleep(self.work_s)
        except asyncio.CancelledError:
            self.cancelled.append(task.id)
            raise
        return {"finished": True}


async def test_a_running_task_is_stopped_within_about_a_heartbeat(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)  # heartbeat 200ms
    producer = AsyncClient(client, pool, pool.spec)
    handler = Blocking()
    async with running_worker(pool, redis_url, handler) as worker:
        await producer.submit("p0", {}, task_id="long")
        assert await async_wait_until(lambda: _true("long" in handler.started), 5)
        report = await producer.cancel("long")
        assert report.state is CancelState.RUNNING
        asked = time.monotonic()
        result = await producer.wait_result("long", 10)
        took = time.monotonic() - asked
        assert await async_wait_until(lambda: _zero(pending_count(client, producer.keys)), 5)
        await asyncio.sleep(1.5)  # past claimIdle (1s): nothing runs it again
        assert worker.ledger.running_total == 0 and len(worker.ledger) == 0
        assert worker.series[0].cancelled.value == 1
    assert result.status == "cancelled" and result.reason == "cancelled while running" and result.attempts == 1
    assert took < 1.5, took  # about one heartbeat (200ms), with room for a loaded machine
    assert handler.cancelled == ["long"] and handler.started == ["long"]


async def _true(value: bool) -> bool:
    return value


async def test_a_cancelled_sync_handler_thread_runs_on_with_its_result_discarded(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    release, done = threading.Event(), threading.Event()

    def slow(task: Task) -> Any:
        release.wait(20)
        if task.id == "sync-long":
            done.set()
        return {"finished": True}

    async with running_worker(pool, redis_url, slow, concurrency=2) as worker:
        await producer.submit("p0", {}, task_id="sync-long")
        assert await async_wait_until(lambda: _true(worker.user_code_running() == 1), 5)
        assert (await producer.cancel("sync-long")).state is CancelState.RUNNING
        result = await producer.wait_result("sync-long", 10)
        assert result.status == "cancelled"
        assert worker.user_code_running() == 1  # the thread cannot be stopped: it runs on
        # the busy thread still takes one of the two executor threads: one more task runs, not two
        await producer.submit_many([TaskRequest("p0", {}, "next-1"), TaskRequest("p0", {}, "next-2")])
        assert await async_wait_until(lambda: _true(worker.user_code_running() == 2), 5)
        await asyncio.sleep(0.3)
        assert worker.ledger.running_total == 1 and len(worker.ledger) == 1
        release.set()
        assert await async_wait_until(lambda: _true(done.is_set()), 5)
        for task_id in ("next-1", "next-2"):
            assert (await producer.wait_result(task_id, 10)).ok
        # the thread gives its slot back (free() itself may be 0 then: a blocking read reserves the free slots)
        assert worker.user_code_running() == 0 and len(worker.ledger) == 0 and worker.ledger.detached_threads == 0
    final = await producer.result("sync-long")
    assert final is not None and final.status == "cancelled"  # its result was discarded


async def test_a_task_waiting_out_a_retry_backoff_never_runs_again(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(
        pool_name, recovery={"claimIdle": "3s", "heartbeat": "200ms", "retryBackoff": "2s", "sweepInterval": "200ms"}
    )
    producer = AsyncClient(client, pool, pool.spec)
    recorder = Recorder()
    keys = producer.keys
    async with running_worker(pool, redis_url, recorder):
        await producer.submit("p1", {"fail": True}, task_id="retrying")

        async def parked() -> bool:
            found = await client.xpending_range(keys.tier("p1"), GROUP, "-", "+", 10)
            return bool(found) and found[0]["consumer"] == RETRY_CONSUMER

        assert await async_wait_until(parked, 5)
        report = await producer.cancel("retrying")
        assert report.state is CancelState.WAITING
        result = await producer.wait_result("retrying", 15)
    assert result.status == "cancelled" and result.attempts == 1
    assert recorder.count("retrying") == 1
    assert await client.hget(keys.errors, "retrying") is None


async def test_cancel_of_a_finished_or_unknown_task_changes_nothing(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, Recorder()):
        await producer.submit("p0", {}, task_id="done")
        assert (await producer.wait_result("done", 10)).ok
    finished = await producer.cancel("done")
    assert finished.state is CancelState.FINISHED and not finished.cancelled
    assert finished.result is not None and finished.result.status == "succeeded"
    assert await client.exists(producer.keys.cancel("done")) == 0
    unknown = await producer.cancel("never-submitted")
    assert unknown.state is CancelState.UNKNOWN and not unknown.found
    assert await client.exists(producer.keys.cancel("never-submitted")) == 0


# --- progress events and waiting on them ---------------------------------------------------------------------


async def reporting(task: Task) -> Any:
    for step in range(3):
        await task.progress({"step": step})
        await asyncio.sleep(0.05)
    return {"steps": 3}


async def test_a_follower_gets_every_event_then_the_result_when_the_task_has_finished(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """150 progress events (more than one read batch) and the final event, all of them, before the result: from
    the async and the sync client, following a task that finished before they started."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)

    async def chatty(task: Task) -> Any:
        for step in range(150):
            await task.progress({"step": step})
        return "done"

    await producer.submit("p0", {}, task_id="chatty")
    async with running_worker(pool, redis_url, chatty):
        assert (await producer.wait_result("chatty", 10)).ok  # its follow event created the stream first

    def check(seen: list[TaskEvent | TaskResult]) -> None:
        progress = [item.data["step"] for item in seen if isinstance(item, TaskEvent) and item.type == "progress"]
        assert progress == list(range(150))
        assert isinstance(seen[-2], TaskEvent) and seen[-2].final and seen[-2].status == "succeeded"
        assert isinstance(seen[-1], TaskResult) and seen[-1].ok

    check([item async for item in producer.follow("chatty", 5)])
    with redis.Redis.from_url(redis_url, decode_responses=True) as sync:
        check(list(Client(sync, pool, pool.spec).follow("chatty", 5)))


async def test_progress_events_then_the_result_reach_a_follower(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    await producer.submit("p0", {}, task_id="chatty")
    seen: list[TaskEvent | TaskResult] = []
    async with running_worker(pool, redis_url, reporting):
        async for item in producer.follow("chatty", 10):
            seen.append(item)
    events = [item for item in seen if isinstance(item, TaskEvent)]
    assert [e.data for e in events if e.type == "progress"] == [{"step": 0}, {"step": 1}, {"step": 2}]
    assert events[-1].final and events[-1].status == "succeeded"
    assert isinstance(seen[-1], TaskResult) and seen[-1].result == {"steps": 3}
    key = producer.keys.events("chatty")
    assert 0 < await client.pttl(key) <= int(pool.spec.tasks.result_ttl * 1000)


async def test_wait_result_is_woken_by_the_final_event(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    """The waiter blocks on the event stream; the outcome script's event wakes it within a fraction of the one
    second after which it would read the result record again anyway. A task nobody follows (its result polled
    here) and that reports no progress gets no event stream at all."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, Blocking(work_s=0.5)):
        await producer.submit("p0", {}, task_id="waited")
        await producer.submit("p0", {}, task_id="unwatched")
        result = await producer.wait_result("waited", 10)
        returned_at = time.time()
        assert result.ok and result.finished_at is not None
        assert returned_at - result.finished_at / 1000 < 0.3  # woken by the event, not by the 1 s re-read
        assert await async_wait_until(lambda: _has_result(producer, "unwatched"), 10)
    events = await client.xrange(producer.keys.events("waited"))
    assert [fields["type"] for _, fields in events] == ["follow", "outcome"]
    assert events[-1][1]["status"] == "succeeded"
    assert await client.exists(producer.keys.events("unwatched")) == 0


async def _has_result(producer: AsyncClient, task_id: str) -> bool:
    return await producer.result(task_id) is not None


async def test_wait_result_still_sees_outcomes_without_an_event(client: aioredis.Redis, pool_name: str) -> None:
    """An outcome written by a protocol-3 worker appends no event: the waiter reads the result record again
    at least every second."""
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    waiter = asyncio.create_task(producer.wait_result("old-worker", 10))
    await asyncio.sleep(0.2)
    await client.set(producer.keys.result("old-worker"), '{"task_id": "old-worker", "status": "succeeded"}')
    started = time.monotonic()
    assert (await waiter).ok
    assert time.monotonic() - started < 2.0
    with pytest.raises(TimeoutError):
        await producer.wait_result("nobody", 0.3)
    await client.set(producer.keys.result("preset"), '{"task_id": "preset", "status": "dead_lettered"}')
    assert (await producer.wait_result("preset", 1)).status == "dead_lettered"
    assert await client.exists(producer.keys.events("preset")) == 0  # a finished task needs no follow event


# --- checkpoints ---------------------------------------------------------------------------------------------


class Checkpointing:
    """Saves {"attempt": N} and fails on the first attempt; records the state each run started with."""

    def __init__(self) -> None:
        self.started_with: list[Any] = []

    async def __call__(self, task: Task) -> Any:
        self.started_with.append(task.checkpoint_state)
        await task.checkpoint({"attempt": task.attempt})
        assert task.checkpoint_state == {"attempt": task.attempt}
        if task.attempt == 1:
            raise RuntimeError("first attempt fails")
        return {"resumed_from": self.started_with[-1]}


async def test_a_retry_after_an_exception_sees_the_checkpoint(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    handler = Checkpointing()
    async with running_worker(pool, redis_url, handler):
        await producer.submit("p0", {}, task_id="resumable")
        result = await producer.wait_result("resumable", 10)
    assert handler.started_with == [None, {"attempt": 1}]
    assert result.ok and result.result == {"resumed_from": {"attempt": 1}}
    assert await client.exists(producer.keys.checkpoint("resumable")) == 0  # dropped with the final outcome


async def test_a_checkpoint_too_large_is_refused_with_a_clear_error(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)

    async def greedy(task: Task) -> Any:
        try:
            await task.checkpoint({"blob": "x" * 70_000})
        except CheckpointTooLarge as error:
            return {"refused": str(error)}
        return {"refused": None}

    async with running_worker(pool, redis_url, greedy):
        await producer.submit("p0", {}, task_id="greedy")
        result = await producer.wait_result("greedy", 10)
    assert "at most 65536 are allowed" in result.result["refused"]
    assert await client.exists(producer.keys.checkpoint("greedy")) == 0


# --- the owner-only rule for the new scripts -----------------------------------------------------------------


async def test_cancelled_and_checkpoint_writes_need_the_entry_owner(pool_name: str, client: aioredis.Redis) -> None:
    keys = PoolKeys.parse(f"test/{pool_name}")
    streams = PoolStreams(client, keys, ["p0", "p1", "p2"])
    await streams.load_scripts()
    await streams.ensure_groups()
    await client.xadd(keys.tier("p0"), {"task_id": "t", "tier": "p0", "payload": "{}", "created_at": "1"})
    [entry] = await streams.take(TakePlan((1, 0, 0), (UNLIMITED,) * 3), "a")
    await client.xclaim(keys.tier("p0"), GROUP, "b", 0, [entry.id])  # B reclaimed it
    assert await streams.save_checkpoint(0, "a", entry.id, "t", '{"by": "a"}', 60_000) == -1
    late = streams.cancelled_call(0, "a", entry.id, "t", b'{"status": "cancelled"}', 60_000)
    assert await streams.run_batch([late]) == [-1]
    assert await client.get(keys.result("t")) is None and await client.get(keys.checkpoint("t")) is None
    assert await streams.save_checkpoint(0, "b", entry.id, "t", '{"by": "b"}', 60_000) == 1
    assert await client.get(keys.checkpoint("t")) == '{"by": "b"}'
    await client.set(keys.cancel("t"), "1")  # cancelled while B ran it: B's success becomes the cancelled record
    await client.xadd(keys.events("t"), {"type": "follow"})
    done = [Completion(0, entry.id, "t", b'{"status": "succeeded"}', False)]
    assert await streams.run_batch([streams.complete_many_call(0, "b", 60_000, done)]) == [[1]]
    record = TaskResult.from_json(await client.get(keys.result("t")))
    assert record.status == "cancelled" and record.worker == "b"
    assert await client.get(keys.checkpoint("t")) is None
    [*_, (_, final)] = await client.xrange(keys.events("t"))
    assert final["type"] == "outcome" and final["status"] == "cancelled"


async def test_submit_many_then_cancel_several_in_a_deep_backlog(pool_name: str, client: aioredis.Redis) -> None:
    """cancel finds tasks among thousands of waiting ones, in every page of the scan (1,000 entries a page) and in
    the other tiers too; one cancel at a time (there is no cancel_many)."""
    pool = make_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    await producer.submit_many([TaskRequest("p1", {"i": i}, task_id=f"deep-{i}") for i in range(2500)])
    await producer.submit_many([TaskRequest("p0", {}, "top"), TaskRequest("p2", {}, "bottom")])
    doomed = ["deep-0", "deep-999", "deep-1000", "deep-2400", "deep-2499", "top", "bottom"]
    for task_id in doomed:
        assert (await producer.cancel(task_id)).state is CancelState.WAITING, task_id
    assert await client.exists(*[producer.keys.cancel(task_id) for task_id in doomed]) == len(doomed)
    assert await client.exists(producer.keys.cancel("deep-1")) == 0


async def test_a_sync_handler_reports_progress_and_checkpoints_from_its_thread(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    started_with: list[Any] = []

    def sync_handler(task: Task) -> Any:
        started_with.append(task.checkpoint_state)
        task.progress_sync({"attempt": task.attempt})
        task.checkpoint_sync({"attempt": task.attempt})
        if task.attempt == 1:
            raise RuntimeError("again")
        return "done"

    await producer.submit("p0", {}, task_id="threaded")
    seen: list[TaskEvent | TaskResult] = []
    async with running_worker(pool, redis_url, sync_handler):
        async for item in producer.follow("threaded", 10):
            seen.append(item)
    assert started_with == [None, {"attempt": 1}]
    progress = [item.data for item in seen if isinstance(item, TaskEvent) and item.type == "progress"]
    assert progress == [{"attempt": 1}, {"attempt": 2}]
    assert isinstance(seen[-1], TaskResult) and seen[-1].result == "done"


# --- run identity: a stale run never writes for a later one ----------------------------------------------------


async def test_a_timed_out_sync_run_cannot_overwrite_the_next_runs_checkpoint(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """Run 1 outlives its time limit (its thread runs on); the entry is retried and run 2 starts on the same worker
    and the same entry. Run 1's late checkpoint and progress are refused (TaskLost), and run 3 resumes from run 2's
    checkpoint, not from run 1's."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, tasks={"timeout": "500ms"})
    producer = AsyncClient(client, pool, pool.spec)
    run2_saved, run1_tried = threading.Event(), threading.Event()
    stale: list[str] = []

    def handler(task: Task) -> Any:
        if task.attempt == 1:
            assert run2_saved.wait(10)  # long past its time limit: run 2 holds the entry now
            for write in (task.checkpoint_sync, task.progress_sync):
                try:
                    write({"from_run": 1})
                    stale.append("written")
                except TaskLost:
                    stale.append("refused")
            run1_tried.set()
            return None
        if task.attempt == 2:
            task.checkpoint_sync({"from_run": 2})
            run2_saved.set()
            assert run1_tried.wait(10)
            raise RuntimeError("run 2 fails, so that run 3 reads the checkpoint")
        return task.checkpoint_state

    await producer.submit("p0", {}, task_id="t")
    async with running_worker(pool, redis_url, handler, concurrency=2):
        result = await producer.wait_result("t", 15)
    assert stale == ["refused", "refused"]
    assert result.ok and result.attempts == 3 and result.result == {"from_run": 2}
    events = [e async for e in producer.follow("t", 5) if isinstance(e, TaskEvent) and e.type == "progress"]
    assert events == []


async def test_a_busy_thread_of_a_cancelled_run_keeps_the_next_task_waiting_in_redis(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """Concurrency 1: a cancelled sync run's thread goes on for about a second. The next task is not taken until
    that thread ends (it would wait in the executor's queue, its 1 s time limit ticking, and time out); it runs
    once and succeeds."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, tasks={"timeout": "1s"})
    producer = AsyncClient(client, pool, pool.spec)
    started = threading.Event()
    log: list[tuple[str, str]] = []

    def handler(task: Task) -> Any:
        log.append((task.id, "start"))
        started.set()
        time.sleep(0.9 if task.id == "slow" else 0.6)
        log.append((task.id, "end"))
        return "x"

    await producer.submit("p0", {}, task_id="slow")
    async with running_worker(pool, redis_url, handler, concurrency=1):
        assert await async_wait_until(lambda: _true(started.is_set()), 5)
        assert (await producer.cancel("slow")).state is CancelState.RUNNING
        assert (await producer.wait_result("slow", 5)).status == "cancelled"
        await producer.submit("p0", {}, task_id="next")
        result = await producer.wait_result("next", 10)
    assert result.ok
    assert log == [("slow", "start"), ("slow", "end"), ("next", "start"), ("next", "end")]


async def test_a_busy_thread_of_a_timed_out_run_keeps_the_next_task_waiting_in_redis(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """As above with a time limit: run 1 of "slow" times out and its thread goes on; "fast", submitted meanwhile,
    waits in Redis until that thread ends, and neither it nor the retry of "slow" times out for lack of a thread."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, tasks={"timeout": "400ms"})
    producer = AsyncClient(client, pool, pool.spec)
    log: list[tuple[str, str, int]] = []

    def handler(task: Task) -> Any:
        log.append((task.id, "start", task.attempt))
        time.sleep(0.8 if task.id == "slow" and task.attempt == 1 else 0.25)
        log.append((task.id, "end", task.attempt))
        return "x"

    await producer.submit("p0", {}, task_id="slow")
    async with running_worker(pool, redis_url, handler, concurrency=1):
        assert await async_wait_until(lambda: _true(bool(log)), 5)
        await producer.submit("p0", {}, task_id="fast")
        fast = await producer.wait_result("fast", 10)
        slow = await producer.wait_result("slow", 10)
    assert fast.ok and fast.attempts == 1
    assert slow.ok and slow.attempts == 2
    starts = [entry for entry in log if entry[1] == "start"]
    assert len(starts) == 3 and log[:2] == [("slow", "start", 1), ("slow", "end", 1)]  # nothing overlapped it


# --- cancel and DLQ replay -----------------------------------------------------------------------------------


async def _dead_letter_once(producer: AsyncClient, redis_url: str, pool: Any, task_id: str) -> None:
    async def fails(task: Task) -> Any:
        raise NonRetryable("fails")

    await producer.submit("p1", {}, task_id=task_id)
    async with running_worker(pool, redis_url, fails):
        assert (await producer.wait_result(task_id, 10)).status == "dead_lettered"


async def test_a_replayed_task_is_waiting_again_for_cancel_and_wait_result(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """After a DLQ replay the old dead_lettered record is gone: a cancel finds the task waiting (and it never
    runs), and wait_result waits for the new outcome instead of returning the old one."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    await _dead_letter_once(producer, redis_url, pool, "doomed")
    await _dead_letter_once(producer, redis_url, pool, "revived")
    assert len(await dead_letters.replay(client, producer.keys, [], None, pool.spec.tier_names)) == 2
    assert await client.exists(producer.keys.result("doomed"), producer.keys.events("doomed")) == 0
    report = await producer.cancel("doomed")
    assert report.state is CancelState.WAITING and report.cancelled
    runs = Recorder()
    async with running_worker(pool, redis_url, runs):
        revived = await producer.wait_result("revived", 10)
        doomed = await producer.wait_result("doomed", 10)
    assert revived.status == "succeeded" and doomed.status == "cancelled"
    assert [task.id for task in runs.calls] == ["revived"]


async def test_a_replay_clears_the_cancel_marker_of_the_task(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """A task dead-lettered with a cancel marker set (a cancel that raced its last failure) and then replayed runs:
    a replay is an explicit decision to run it again."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    await _dead_letter_once(producer, redis_url, pool, "again")
    await client.set(producer.keys.cancel("again"), "1")
    await dead_letters.replay(client, producer.keys, [], None, pool.spec.tier_names)
    assert await client.exists(producer.keys.cancel("again")) == 0
    runs = Recorder()
    async with running_worker(pool, redis_url, runs):
        assert (await producer.wait_result("again", 10)).status == "succeeded"
    assert [task.id for task in runs.calls] == ["again"]


async def test_a_cancelled_task_reclaimed_past_max_deliveries_ends_cancelled(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """The task is pending on a crashed worker at the delivery cap and is cancelled; the reclaim that finds it past
    maxDeliveries writes its cancelled outcome, not a dead letter: a cancel wins."""
    pool = make_pool(pool_name, recovery={**FAST_RECOVERY, "maxDeliveries": 1})
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    streams = PoolStreams(client, keys, ["p0", "p1", "p2"])
    await streams.load_scripts()
    await streams.ensure_groups()
    await producer.submit("p1", {}, task_id="orphan")
    [entry] = await streams.take(TakePlan((0, 1, 0), (UNLIMITED,) * 3), "crashed")
    assert entry.deliveries == 1
    assert (await producer.cancel("orphan")).state is CancelState.RUNNING
    runs = Recorder()
    async with running_worker(pool, redis_url, runs):
        result = await producer.wait_result("orphan", 10)
    assert result.status == "cancelled" and result.attempts == 1
    assert runs.calls == [] and await client.xlen(keys.dlq) == 0 and await pending_count(client, keys) == 0


async def test_the_cancelled_metric_counts_only_outcomes_that_landed(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    """A cancelled run whose entry another worker took meanwhile: its CANCELLED write is refused (-1), so it is
    counted as lost ownership, not as cancelled."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    started = asyncio.Event()

    async def taken_while_stopping(task: Task) -> Any:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            await client.xclaim(producer.keys.tier("p0"), GROUP, "thief", 0, [task.stream_id])
            raise
        return None

    async with running_worker(pool, redis_url, taken_while_stopping) as worker:
        await producer.submit("p0", {}, task_id="contested")
        await asyncio.wait_for(started.wait(), 5)
        assert (await producer.cancel("contested")).state is CancelState.RUNNING
        assert await async_wait_until(lambda: _true(worker.series[0].lost_ownership.value >= 1), 5)
        assert await async_wait_until(lambda: _true(len(worker.ledger) == 0), 5)
        assert worker.series[0].cancelled.value == 0
    assert await producer.result("contested") is None  # the thief's to finish


async def test_uncancel_takes_a_cancel_back_before_a_worker_acts_on_it(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    await producer.submit("p0", {}, task_id="reprieved")
    assert (await producer.cancel("reprieved")).state is CancelState.WAITING
    assert await producer.uncancel("reprieved") and not await producer.uncancel("reprieved")
    runs = Recorder()
    async with running_worker(pool, redis_url, runs):
        assert (await producer.wait_result("reprieved", 10)).status == "succeeded"
    assert [task.id for task in runs.calls] == ["reprieved"]
