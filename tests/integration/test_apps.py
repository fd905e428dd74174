"""Apps as handlers against a real Valkey: typed submits, routing by task name, validation on both sides, output
models rebuilt, handles (result, cancel, follow), submit_many, per-task defaults, and plain handlers unchanged."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool import App, AsyncClient, Client, InvalidInput, Task, TaskFailed, TaskHandle
from tierpool.model.keys import PoolKeys
from tierpool.protocol import envelope
from tierpool.protocol.submission import TaskResult
from tierpool.store import dlq

from .support import FAST_RECOVERY, make_pool, running_worker
from .typed_app import Dispute, Verdict, Wait, app, linger, resolve

pytestmark = pytest.mark.redis


def _pool(name: str) -> Any:
    return make_pool(name, recovery=FAST_RECOVERY, worker={"handler": "tests.integration.typed_app:app"})


async def _xadd(client: aioredis.Redis, pool: Any, tier: str, payload: Any, task: str | None) -> str:
    fields = envelope.encode(f"raw-{task}-{tier}", tier, json.dumps(payload), 1, task=task)
    await client.xadd(PoolKeys.parse(pool.ref).tier(tier), fields)  # type: ignore[arg-type]
    return fields["task_id"]


async def test_a_typed_round_trip_rebuilds_the_output_model(redis_url: str, pool_name: str) -> None:
    pool = _pool(pool_name)
    async with running_worker(pool, redis_url, app):
        with Client.from_url(redis_url, pool) as client:
            handle = client.submit(resolve, Dispute(ticket=2))
            verdict = await asyncio.to_thread(handle.result, timeout=10)
            record = await asyncio.to_thread(handle.record, 1)
    assert isinstance(handle, TaskHandle) and isinstance(verdict, Verdict)
    assert verdict == Verdict(refund=True, ticket=2)
    assert (record.result, record.tier) == ({"refund": True, "ticket": 2}, "p0")  # the JSON, in the tier default


async def test_the_async_client_returns_awaitable_handles(redis_url: str, pool_name: str) -> None:
    pool = _pool(pool_name)
    async with running_worker(pool, redis_url, app), AsyncClient.from_url(redis_url, pool) as client:
        handle = await client.submit(resolve, {"ticket": 3})
        assert await handle.result(timeout=10) == Verdict(refund=False, ticket=3)


async def test_an_unknown_task_name_is_dead_lettered_at_once(redis_url: str, pool_name: str) -> None:
    pool = _pool(pool_name)
    async with running_worker(pool, redis_url, app), AsyncClient.from_url(redis_url, pool) as client:
        task_id = await client.submit("p1", {"ticket": 1}, task="refund")
        record = await client.wait_result(task_id, timeout=10)
        dead = await client.redis.xrange(client.keys.dlq)
    assert (record.status, record.attempts) == ("dead_lettered", 1)
    assert record.reason == "non-retryable: unknown task 'refund'; this app has linger, resolve"
    assert [fields["task_id"] for _, fields in dead] == [task_id]


async def test_an_entry_without_a_name_is_dead_lettered_on_an_app_of_several_tasks(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = _pool(pool_name)
    async with running_worker(pool, redis_url, app), AsyncClient.from_url(redis_url, pool) as producer:
        task_id = await _xadd(client, pool, "p0", {"ticket": 1}, None)
        record = await producer.wait_result(task_id, timeout=10)
    assert (record.status, record.attempts) == ("dead_lettered", 1)
    assert (
        record.reason == "non-retryable: the entry names no task (envelope field 'task'); this app has linger, resolve"
    )


async def test_an_app_of_one_task_runs_entries_that_name_none(redis_url: str, pool_name: str) -> None:
    solo = App()
    solo.tasks["resolve"] = resolve
    pool = _pool(pool_name)
    async with running_worker(pool, redis_url, solo), AsyncClient.from_url(redis_url, pool) as client:
        task_id = await client.submit("p1", {"ticket": 4})
        record = await client.wait_result(task_id, timeout=10)
    assert (record.status, record.result) == ("succeeded", {"refund": True, "ticket": 4})


async def test_invalid_input_is_refused_at_submit_and_dead_lettered_as_non_retryable(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = _pool(pool_name)
    async with AsyncClient.from_url(redis_url, pool) as producer:
        with pytest.raises(InvalidInput, match="task 'resolve': invalid input: ticket: Input should be a valid int"):
            await producer.submit(resolve, {"ticket": "seven"})
        with pytest.raises(InvalidInput, match="ticket"):
            await producer.submit_many(resolve, [{"ticket": 1}, {"ticket": []}])
        assert await client.exists(producer.keys.tier("p0")) == 0  # nothing written, the good one neither
        task_id = await _xadd(client, pool, "p0", {"ticket": "seven"}, "resolve")
        async with running_worker(pool, redis_url, app):
            record = await producer.wait_result(task_id, timeout=10)
    assert (record.status, record.attempts) == ("dead_lettered", 1)
    assert record.reason is not None
    assert record.reason.startswith("non-retryable: task 'resolve': invalid input: ticket: Input should be a valid")


async def test_follow_and_cancel_through_the_handle(redis_url: str, pool_name: str) -> None:
    pool = _pool(pool_name)
    async with running_worker(pool, redis_url, app), AsyncClient.from_url(redis_url, pool) as client:
        handle = await client.submit(linger, Wait(seconds=30, steps=2), timeout=60)
        events = []
        async for item in handle.follow(timeout=10):
            events.append(item)
            if len(events) == 2:
                report = await handle.cancel()
        with pytest.raises(TaskFailed, match="cancelled") as failed:
            await handle.result(timeout=10)
    assert report.cancelled
    assert [getattr(event, "data", None) for event in events[:2]] == [{"step": 0}, {"step": 1}]
    assert isinstance(events[-1], TaskResult) and events[-1].status == "cancelled"
    assert failed.value.record.status == "cancelled"


async def test_submit_many_fans_out_typed_tasks(redis_url: str, pool_name: str) -> None:
    pool = _pool(pool_name)
    async with running_worker(pool, redis_url, app), AsyncClient.from_url(redis_url, pool) as client:
        handles = await client.submit_many(resolve, [Dispute(ticket=n) for n in range(5)], tenant=None)
        verdicts = [await handle.result(timeout=10) for handle in handles]
    assert verdicts == [Verdict(refund=n % 2 == 0, ticket=n) for n in range(5)]
    assert len({handle.id for handle in handles}) == 5


async def test_a_tasks_default_timeout_applies_to_an_entry_without_one(
    redis_url: str, pool_name: str, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY | {"maxDeliveries": 1})
    async with running_worker(pool, redis_url, app), AsyncClient.from_url(redis_url, pool) as producer:
        task_id = await _xadd(client, pool, "p2", {"seconds": 5}, "linger")  # no timeout field: linger's 200ms
        record = await producer.wait_result(task_id, timeout=10)
        typed = await producer.submit(linger, Wait(seconds=0))
        *_, (_, fields) = await client.xrange(producer.keys.tier("p2"))  # the typed submit: the last
    assert record.status == "dead_lettered" and record.error == "timed out after 0.2s"
    assert fields["task"] == "linger" and fields["timeout"] == "200" and typed.id == fields["task_id"]


async def test_a_plain_function_pool_is_unchanged(redis_url: str, pool_name: str) -> None:
    seen: list[str | None] = []

    async def plain(task: Task) -> Any:
        seen.append(task.name)
        return {"echo": task.payload}

    pool = make_pool(pool_name)
    async with running_worker(pool, redis_url, plain), AsyncClient.from_url(redis_url, pool) as client:
        task_id = await client.submit("p0", {"a": 1})
        named = await client.submit("p0", {"b": 2}, task="whatever")
        record = await client.wait_result(task_id, timeout=10)
        other = await client.wait_result(named, timeout=10)
    assert isinstance(task_id, str) and record.result == {"echo": {"a": 1}}
    assert other.result == {"echo": {"b": 2}} and sorted(seen, key=str) == [None, "whatever"]


async def test_a_replayed_dead_letter_keeps_its_task_name(redis_url: str, pool_name: str) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY | {"maxDeliveries": 1})
    async with AsyncClient.from_url(redis_url, pool) as producer:
        handle = await producer.submit(linger, Wait(seconds=5))  # past its 200ms timeout, on its only delivery
        async with running_worker(pool, redis_url, app):
            assert (await handle.record(timeout=10)).status == "dead_lettered"
            [dead] = await dlq.list_dead(producer.redis, producer.keys)
            await dlq.replay(producer.redis, producer.keys, [dead.id], None, producer.spec.tier_names)
            with pytest.raises(TaskFailed, match=r"timed out after 0\.2s"):  # run again as linger, not refused
                await handle.result(timeout=10)
    assert (await handle.record(timeout=1)).attempts == 1


async def test_a_task_the_app_cannot_run_is_dead_lettered_before_it_waits_for_its_rate_limit(
    redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, rateLimits=[{"name": "llm", "perMinute": 1}])
    async with running_worker(pool, redis_url, app), AsyncClient.from_url(redis_url, pool) as client:
        first = await client.submit(resolve, Dispute(ticket=1), rate_limit="llm")  # takes the minute's one token
        assert (await first.record(timeout=10)).status == "succeeded"
        unknown = await client.submit("p0", {"ticket": 1}, rate_limit="llm", task="refund")
        record = await client.wait_result(unknown, timeout=5)  # not a minute later
    assert (record.status, record.attempts) == ("dead_lettered", 1)
    assert record.reason == "non-retryable: unknown task 'refund'; this app has linger, resolve"


async def test_a_task_rate_limit_the_pool_does_not_define_is_logged_at_start(
    redis_url: str, pool_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    limited = App()
    limited.task(name="ask", tier="p0", rate_limit="missing")(resolve.function)
    async with running_worker(make_pool(pool_name), redis_url, limited):
        pass
    assert "task 'ask' draws from rate limit 'missing', which spec.rateLimits does not define" in caplog.text
