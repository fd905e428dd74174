"""A pool that adopts existing streams (``tiers[].stream``, ``consumerGroup``) on a real server: its group carries
on where it was, a task without an id keeps the one the worker derives for it when a script moves it (escalation,
a long retry, a dead letter), and a per-task ``priority_ttl_s`` escalates that task."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.model.resource import AgentPool, parse_pool
from tierpool.protocol.envelope import Task
from tierpool.protocol.task_state import CancelState
from tierpool.store.dlq import list_dead
from tierpool.store.observe import observe
from tierpool.store.streams import PoolStreams
from tierpool_operator import tiers as operator_tiers

from .support import FAST_RECOVERY, Recorder, async_wait_until, running_worker

P0, P1 = "adopt:tasks:p0", "adopt:tasks:p1"


@pytest.fixture
async def streams_gone(client: aioredis.Redis) -> AsyncIterator[None]:
    await client.delete(P0, P1)
    yield
    await client.delete(P0, P1)


def pool(name: str, **spec: Any) -> AgentPool:
    tiers = [{"name": "p0", "weight": 3, "stream": P0}, {"name": "p1", "weight": 1, "stream": P1}]
    document = {"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": {"name": name}}
    return parse_pool({**document, "spec": {"consumerGroup": "legacy", "tiers": tiers, **spec}})


async def adopted(client: aioredis.Redis, pool: AgentPool) -> PoolStreams:
    streams = PoolStreams(client, pool.keys, pool.spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()
    return streams


@pytest.mark.usefixtures("streams_gone")
async def test_an_existing_group_is_never_reset(client: aioredis.Redis, redis_url: str) -> None:
    done = [await client.xadd(P1, {"payload": json.dumps({"n": n})}) for n in range(3)]
    await client.xgroup_create(P1, "legacy", id="0")
    await client.xreadgroup("legacy", "theirs", {P1: ">"}, count=3)
    await client.xack(P1, "legacy", *done)  # their workers finished these
    waiting = [await client.xadd(P1, {"payload": json.dumps({"n": n})}) for n in range(3, 5)]
    spec = pool("keepgroup", recovery=FAST_RECOVERY)
    recorder = Recorder()
    async with running_worker(spec, redis_url, recorder):
        await adopted(client, spec)  # ensure_groups again, as every worker start does: BUSYGROUP, left alone
        assert await async_wait_until(lambda: _ran(recorder, 2), 10)
        await asyncio.sleep(1.2)
    assert sorted(task.id for task in recorder.calls) == sorted(f"{P1}/{entry_id}" for entry_id in waiting)
    [group] = await client.xinfo_groups(P1)
    assert (group["name"], group["pending"], group["last-delivered-id"]) == ("legacy", 0, waiting[-1])
    assert not await client.exists(spec.keys.own_tier("p1"))  # the pool's own stream was never made


async def _ran(recorder: Recorder, count: int) -> bool:
    return len(recorder.calls) >= count


@pytest.mark.usefixtures("streams_gone")
async def test_a_task_escalates_by_its_own_priority_ttl(client: aioredis.Redis) -> None:
    spec = pool("ownttl")
    streams = await adopted(client, spec)
    soon = await client.xadd(P1, {"payload": "{}", "priority_ttl_s": "0.5"})
    later = await client.xadd(P1, {"payload": "{}", "priority_ttl_s": "3600"})
    behind = await client.xadd(P1, {"payload": "{}", "priority_ttl_s": "0"})
    now_ms = int(soon.split("-")[0]) + 400
    assert await streams.escalate(1, now_ms + 100, None, 10) == 0  # a tier of the pool's own: no TTLs of theirs
    assert await streams.escalate(1, now_ms, None, 10, own_ttls=True) == 0  # not yet: 400 ms of its 500
    assert await streams.escalate(1, now_ms + 100, None, 10, own_ttls=True) == 1  # p1 has no escalateAfter
    [(_, copy)] = await client.xrange(P0)
    assert copy["task_id"] == f"{P1}/{soon}"  # the id the worker would have given it, kept across the move
    assert copy["created_at"] == soon.split("-")[0]  # and its time in the stream it came from
    assert (copy["tier"], copy["escalated_from"], copy["priority_ttl_s"]) == ("p0", "p1", "0.5")
    # the walk stops at the first entry not due: one behind it waits for it (documented)
    assert await streams.escalate(1, now_ms + 10_000, None, 10, own_ttls=True) == 0
    [group] = await client.xinfo_groups(P1)
    assert group["last-delivered-id"] == soon  # (its entry stays until the sweep: see delete_acked)
    assert [entry_id for entry_id, _ in await client.xrange(P1, f"({soon}")] == [later, behind]
    # the tier's escalateAfter is the default of entries without one of their own, and does not shorten theirs
    plain = await client.xadd(P1, {"payload": "{}"})
    assert await streams.escalate(1, int(plain.split("-")[0]) + 10**6, 60_000, 10, own_ttls=True) == 0


@pytest.mark.usefixtures("streams_gone")
async def test_the_tiers_escalate_after_still_moves_entries_without_their_own(client: aioredis.Redis) -> None:
    spec = pool("tierttl")
    streams = await adopted(client, spec)
    entries = [await client.xadd(P1, {"payload": json.dumps({"n": n})}) for n in range(3)]
    oldest, newest = (int(entry.split("-")[0]) for entry in (entries[0], entries[-1]))
    assert await streams.escalate(1, oldest + 59_999, 60_000, 10) == 0
    assert await streams.escalate(1, newest + 60_000, 60_000, 2) == 2  # the limit holds
    assert await streams.escalate(1, newest + 60_000, 60_000, 10) == 1
    assert [fields["task_id"] for _, fields in await client.xrange(P0)] == [f"{P1}/{e}" for e in entries]


failures: dict[str, int] = {}


async def failing(task: Task) -> Any:
    failures[task.id] = failures.get(task.id, 0) + 1
    raise RuntimeError(f"attempt {task.attempt} fails")


@pytest.mark.usefixtures("streams_gone")
async def test_an_id_less_task_keeps_its_id_through_a_long_retry_and_its_dead_letter(
    client: aioredis.Redis, redis_url: str
) -> None:
    # a backoff over claimIdle goes through the due-time index (a copy of the entry): the copy carries the id
    recovery = {**FAST_RECOVERY, "retryBackoff": "1500ms", "maxDeliveries": 2}
    spec = pool("longretry", recovery=recovery)
    entry_id = await client.xadd(P1, {"payload": json.dumps({"job": 1}), "created_at": f"{time.time():.6f}"})
    task_id = f"{P1}/{entry_id}"
    failures.clear()
    async with running_worker(spec, redis_url, failing):
        assert await async_wait_until(lambda: client.exists(spec.keys.result(task_id)), 15)
    assert failures == {task_id: 2}  # both attempts under the one id, and no more
    record = json.loads(await client.get(spec.keys.result(task_id)))
    assert (record["status"], record["attempts"]) == ("dead_lettered", 2)
    [dead] = await list_dead(client, spec.keys, 10)
    assert dead.task_id == task_id  # written into the dead letter: it can be replayed under its id


async def test_an_id_less_task_can_be_cancelled_and_keeps_its_checkpoint(
    client: aioredis.Redis, redis_url: str
) -> None:
    # the cancel scan and the worker's screen (cancel markers, checkpoints) both read the id the worker gives it
    await client.delete(P0, P1)
    spec = pool("cancelid", recovery=FAST_RECOVERY)
    await adopted(client, spec)
    cancelled = await client.xadd(P1, {"payload": json.dumps({"job": "cancel me"})})
    resumed = await client.xadd(P1, {"payload": json.dumps({"job": "resume me"})})
    producer = AsyncClient(client, spec, spec.spec)
    [report] = await producer.cancel_many([f"{P1}/{cancelled}"])
    assert report.state is CancelState.WAITING
    await client.set(spec.keys.checkpoint(f"{P1}/{resumed}"), json.dumps({"done": 3}))
    recorder = Recorder()
    async with running_worker(spec, redis_url, recorder):
        assert await async_wait_until(lambda: _ran(recorder, 1), 10)
        assert await async_wait_until(lambda: client.exists(spec.keys.result(f"{P1}/{cancelled}")), 10)
    assert [(task.id, task.checkpoint_state) for task in recorder.calls] == [(f"{P1}/{resumed}", {"done": 3})]
    record = json.loads(await client.get(spec.keys.result(f"{P1}/{cancelled}")))
    assert record["status"] == "cancelled"
    await client.delete(P0, P1)


@pytest.mark.usefixtures("streams_gone")
async def test_a_stream_with_other_groups_gets_no_default_group(
    client: aioredis.Redis, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # seed 004's stream, read by swarm_workers, and a pool file without consumerGroup: a `workers` group at 0
    # would run again everything swarm_workers acked. The worker refuses, says why, and keeps retrying.
    done = await client.xadd(P1, {"payload": json.dumps({"task_id": "acked-1"})})
    await client.xgroup_create(P1, "swarm_workers", id="0")
    await client.xreadgroup("swarm_workers", "theirs", {P1: ">"})
    await client.xack(P1, "swarm_workers", done)
    tiers = [{"name": "p0", "weight": 3, "stream": P0}, {"name": "p1", "weight": 1, "stream": P1}]
    document = {"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": {"name": "nogroup"}}
    spec = parse_pool({**document, "spec": {"tiers": tiers, "recovery": FAST_RECOVERY}})
    recorder = Recorder()
    with caplog.at_level(logging.ERROR, logger="tierpool"):
        async with running_worker(spec, redis_url, recorder) as worker:
            assert await async_wait_until(lambda: _refused(caplog, 2), 10)  # logged again after its backoff
            assert not worker.ready
    assert recorder.calls == []
    assert [group["name"] for group in await client.xinfo_groups(P1)] == ["swarm_workers"]
    assert not await client.exists(P0)  # checked before any group is made
    line = next(r.getMessage() for r in caplog.records if "consumerGroup" in r.getMessage())
    assert all(part in line for part in (P1, "'swarm_workers'", "spec.consumerGroup", "'workers'", "Retrying in"))
    # the operator observes the streams and says the same in a condition
    obs = await observe(client, spec.keys, spec.spec.tier_names)
    assert [t.other_groups for t in obs.tiers] == [(), ("swarm_workers",)]
    held = operator_tiers.groups_condition(spec, obs, 0.0, 1)
    assert (held["type"], held["status"], held["reason"]) == ("StreamsAdopted", "False", "ConsumerGroupMissing")
    assert P1 in held["message"] and "spec.consumerGroup" in held["message"]
    fine = pool("fine", consumerGroup="swarm_workers")  # the group its workers read with: carried on
    assert (
        operator_tiers.groups_condition(fine, await observe(client, fine.keys, ["p0", "p1"]), 0, 1)["status"] == "True"
    )


async def _refused(caplog: pytest.LogCaptureFixture, times: int) -> bool:
    return sum("spec.consumerGroup" in r.getMessage() for r in caplog.records) >= times


@pytest.mark.usefixtures("streams_gone")
async def test_a_stream_with_no_group_is_read_from_its_start(client: aioredis.Redis) -> None:
    # nothing has read it through a group: the pool's group starts at its first entry (history runs, as documented)
    first = await client.xadd(P1, {"payload": "{}"})
    spec = pool("fromstart")
    await adopted(client, spec)
    [group] = await client.xinfo_groups(P1)
    assert (group["name"], group["last-delivered-id"], group["lag"]) == ("legacy", "0-0", 1)
    assert [entry_id for entry_id, _ in await client.xrange(P1)] == [first]
