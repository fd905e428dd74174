"""A task of an adopted stream (``tiers[].stream``) in the seed articles' formats, moved by a script: every copy is
the completed envelope a worker gives the entry (helpers/adopted.lua's adopted_entry), so the task keeps its id,
payload and created_at, and its dead letter can be replayed."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.model.resource import AgentPool, parse_pool
from tierpool.protocol.envelope import Task
from tierpool.store.dlq import list_dead, replay
from tierpool.store.streams import PoolStreams

from .support import FAST_RECOVERY, Recorder, async_wait_until, running_worker

P0, P1 = "moves:tasks:p0", "moves:tasks:p1"


@pytest.fixture(autouse=True)
async def streams_gone(client: aioredis.Redis) -> Any:
    await client.delete(P0, P1)
    yield
    await client.delete(P0, P1)


def pool(name: str, tiers: list[dict[str, Any]], **spec: Any) -> AgentPool:
    document = {"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": {"name": name}}
    return parse_pool({**document, "spec": {"consumerGroup": "legacy", "tiers": tiers, **spec}})


def seed_000() -> dict[str, str]:
    """Seed 000's orchestrator: its data in the fields, no payload, created_at as time.time()."""
    return {"kind": "summarize", "doc": "a/b", "created_at": f"{time.time():.6f}", "priority_ttl_s": "3600"}


def seed_004() -> dict[str, str]:
    """Seed 004's SwarmTaskPayload: one payload field carrying its own task_id, no created_at."""
    return {"payload": json.dumps({"task_id": f"swarm-{time.time_ns()}", "kind": "research"})}


class FailsFirst:
    """Fails each task's first run, records the payload of every successful one."""

    def __init__(self) -> None:
        self.failed: set[str] = set()
        self.done: dict[str, Any] = {}

    async def __call__(self, task: Task) -> Any:
        if task.id not in self.failed:
            self.failed.add(task.id)
            raise RuntimeError("first run fails")
        self.done[task.id] = task.payload
        return {"ok": task.id}


async def test_a_seed_format_dead_letter_replays_and_succeeds(client: aioredis.Redis, redis_url: str) -> None:
    tiers = [{"name": "p0", "weight": 1, "stream": P0}]
    spec = pool("replayseed", tiers, recovery={**FAST_RECOVERY, "maxDeliveries": 1})
    first, second = seed_000(), seed_004()
    first_id = await client.xadd(P0, first)  # type: ignore[arg-type]
    await client.xadd(P0, second)  # type: ignore[arg-type]
    ids = [f"{P0}/{first_id}", json.loads(second["payload"])["task_id"]]
    handler = FailsFirst()
    async with running_worker(spec, redis_url, handler):
        assert await async_wait_until(lambda: _count(list_dead(client, spec.keys, 10), 2), 15)
        dead = await list_dead(client, spec.keys, 10)
        assert sorted(d.task_id for d in dead) == sorted(ids)
        [zero] = [d for d in dead if d.task_id == ids[0]]
        assert zero.fields["created_at"] == str(int(float(first["created_at"]) * 1000))  # seconds read as such
        replayed = await replay(client, spec.keys, [d.id for d in dead], None, spec.spec.tier_names)
        assert len(replayed) == 2
        assert await async_wait_until(lambda: _all_done(handler, ids), 15)
    assert handler.done[ids[0]] == {"kind": "summarize", "doc": "a/b"}
    for task_id in ids:
        record = json.loads(await client.get(spec.keys.result(task_id)))
        assert record["status"] == "succeeded"


async def test_a_seed_000_task_escalates_into_an_own_tier_and_succeeds(client: aioredis.Redis, redis_url: str) -> None:
    tiers = [{"name": "p0", "weight": 3}, {"name": "p1", "weight": 1, "stream": P1}]
    spec = pool("mixedpool", tiers, recovery=FAST_RECOVERY)
    fields = {**seed_000(), "priority_ttl_s": "0"}
    entry_id = await client.xadd(P1, fields)  # type: ignore[arg-type]
    task_id = f"{P1}/{entry_id}"
    streams = PoolStreams(client, spec.keys, spec.spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()
    assert await streams.escalate(1, int(time.time() * 1000) + 1000, None, 10, own_ttls=True) == 1
    [(_, copy)] = await client.xrange(spec.keys.tier("p0"))
    assert (copy["task_id"], copy["tier"], copy["escalated_from"]) == (task_id, "p0", "p1")
    assert copy["created_at"] == str(int(float(fields["created_at"]) * 1000))
    assert json.loads(copy["payload"]) == {"kind": "summarize", "doc": "a/b"}
    handler = FailsFirst()
    handler.failed.add(task_id)  # runs at once
    async with running_worker(spec, redis_url, handler):
        assert await async_wait_until(lambda: _all_done(handler, [task_id]), 15)
    record = json.loads(await client.get(spec.keys.result(task_id)))
    assert (record["status"], record["tier"]) == ("succeeded", "p0")
    assert await client.xlen(spec.keys.dlq) == 0


async def test_a_held_tenant_task_keeps_its_derived_id(client: aioredis.Redis, redis_url: str) -> None:
    # the gate holds an entry (acked, a copy in the held set) and lets it in later under a new entry id: the copy
    # is completed first, so its id and created_at are the first entry's
    tiers = [{"name": "p0", "weight": 1, "stream": P0, "tenantConcurrency": 1}]
    spec = pool("heldid", tiers, recovery=FAST_RECOVERY)
    busy = await client.xadd(P0, {"work_s": "1.5", "tenant": "acme"})
    to_cancel = await client.xadd(P0, {"job": "b", "tenant": "acme"})
    to_run = await client.xadd(P0, {"job": "c", "tenant": "acme"})
    cancel_id, run_id = f"{P0}/{to_cancel}", f"{P0}/{to_run}"
    recorder = Recorder()
    async with running_worker(spec, redis_url, recorder):
        assert await async_wait_until(lambda: _ran(recorder, 1), 10)
        assert recorder.calls[0].id == f"{P0}/{busy}"
        assert await async_wait_until(lambda: client.exists(spec.keys.held("p0")), 10)
        producer = AsyncClient(client, spec, spec.spec)
        await producer.cancel_many([cancel_id])
        assert await async_wait_until(lambda: client.exists(spec.keys.result(run_id)), 15)
        assert await async_wait_until(lambda: client.exists(spec.keys.result(cancel_id)), 15)
    assert [task.id for task in recorder.calls] == [f"{P0}/{busy}", run_id]
    assert json.loads(await client.get(spec.keys.result(cancel_id)))["status"] == "cancelled"
    assert json.loads(await client.get(spec.keys.result(run_id)))["status"] == "succeeded"
    assert recorder.calls[1].created_at_ms == int(to_run.split("-")[0])


async def _ran(recorder: Recorder, count: int) -> bool:
    return len(recorder.calls) >= count


async def _count(read: Any, n: int) -> bool:
    return len(await read) >= n


async def _all_done(handler: FailsFirst, ids: list[str]) -> bool:
    return all(task_id in handler.done for task_id in ids)


async def test_an_oversized_adopted_entry_is_dead_lettered_under_its_derived_id(
    client: aioredis.Redis, redis_url: str
) -> None:
    tiers = [{"name": "p0", "weight": 1, "stream": P0}]
    spec = pool("hugeseed", tiers, recovery=FAST_RECOVERY, tasks={"maxPayloadBytes": 1024})
    entry_id = await client.xadd(P0, {"payload": json.dumps({"blob": "x" * 5000})})
    task_id = f"{P0}/{entry_id}"
    recorder = Recorder()
    async with running_worker(spec, redis_url, recorder):
        assert await async_wait_until(lambda: client.exists(spec.keys.result(task_id)), 10)
    assert json.loads(await client.get(spec.keys.result(task_id)))["status"] == "dead_lettered"
    [dead] = await list_dead(client, spec.keys, 10)
    assert dead.task_id == task_id
    assert recorder.calls == []


async def test_its_own_priority_ttl_counts_once_from_created_at(client: aioredis.Redis) -> None:
    # the seed's sweeper: a task past created_at + priority_ttl_s moves up a tier on each pass, p2 to p0 in two
    p2 = "moves:tasks:p2"
    await client.delete(p2)
    tiers = [{"name": n, "weight": 1, "stream": s} for n, s in (("p0", P0), ("p1", P1), ("p2", p2))]
    spec = pool("ttlonce", tiers)
    streams = PoolStreams(client, spec.keys, spec.spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()
    now = time.time()
    created = f"{now - 10:.6f}"
    old = await client.xadd(p2, {"kind": "late", "created_at": created, "priority_ttl_s": "5"})
    fresh = await client.xadd(p2, {"kind": "new", "created_at": f"{now:.6f}", "priority_ttl_s": "5"})
    now_ms = int(now * 1000) + 100
    assert await streams.escalate(2, now_ms, None, 10, own_ttls=True) == 1  # the walk stops at the fresh one
    assert await streams.escalate(1, now_ms, None, 10, own_ttls=True) == 1  # its ttl had passed already
    [(_, copy)] = await client.xrange(P0)
    assert (copy["task_id"], copy["escalated_from"]) == (f"{p2}/{old}", "p2")
    assert copy["created_at"] == str(int(float(created) * 1000))
    assert [entry_id for entry_id, _ in await client.xrange(p2, f"({old}")] == [fresh]
    await client.delete(p2)
