"""The seed articles' producer code (tests/integration/seed_producers/), unchanged, against a real tierpool worker
that adopts their streams: every task completes once, none that their own group had acked runs again, none is
dead-lettered ("task_id: Field required" was the failure this replaces)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient
from tierpool.model.resource import AgentPool, load_pool_file, parse_pool
from tierpool.store.observe import observe

from .seed_producers import seed_000, seed_004
from .support import FAST_RECOVERY, ROOT, Recorder, async_wait_until, running_worker

SEED_KEYS = ("tasks:p0", "tasks:p1", "tasks:p2", seed_004.STREAM_KEY)


@pytest.fixture
def seed_redis(redis_url: str) -> Iterator[redis.Redis]:
    """A client as the articles make theirs (no decode_responses: bytes keys and values), on streams that start
    empty (the server is shared by the session)."""
    client = redis.Redis.from_url(redis_url)
    client.delete(*SEED_KEYS)
    yield client
    client.delete(*SEED_KEYS)
    client.close()


def adopting_pool(example: str) -> AgentPool:
    """A pool file of examples/ (the ones docs/how-to/adopt-streams.md shows), with recovery fast enough for a
    test (a crashed seed worker's entry is reclaimed after claimIdle)."""
    document = load_pool_file(ROOT / "examples" / example).model_dump(mode="json", by_alias=True, exclude_unset=True)
    document["spec"]["recovery"] = FAST_RECOVERY
    return parse_pool(document)


def swarm_task(number: int) -> seed_004.SwarmTaskPayload:
    return seed_004.SwarmTaskPayload(
        task_id=f"task-swarm-{number}", target_role="CodeRefactorWorker", action="refactor_ast", payload={"n": number}
    )


def seed_worker_takes(swarm: seed_004.RedisStreamsSwarmWorker, count: int, process: bool) -> list[str]:
    """What the article's worker loop does for ``count`` reads: XREADGROUP one entry, then process (and XACK) it;
    with ``process`` False it dies holding the entry (pending on its consumer)."""
    ids = []
    for _ in range(count):
        [(_, [(message_id, data)])] = swarm.r.xreadgroup(
            groupname=seed_004.GROUP_NAME,
            consumername=seed_004.CONSUMER_NAME,
            streams={seed_004.STREAM_KEY: ">"},
            count=1,
        )
        if process:
            swarm._process_message(message_id, data)
        ids.append(json.loads(data[b"payload"])["task_id"])
    return ids


async def finished(client: aioredis.Redis, pool: AgentPool, task_ids: list[str]) -> dict[str, dict[str, object]]:
    raws = await client.mget([pool.keys.result(task_id) for task_id in task_ids])
    return {task_id: json.loads(raw) for task_id, raw in zip(task_ids, raws, strict=True) if raw}


async def test_seed_004_swarm_carries_on_under_tierpool(
    seed_redis: redis.Redis, client: aioredis.Redis, redis_url: str
) -> None:
    for number in range(1, 7):
        seed_004.dispatch(seed_redis, swarm_task(number))
    swarm = seed_004.RedisStreamsSwarmWorker(seed_redis)  # its group, at the stream's start
    acked = seed_worker_takes(swarm, 2, process=True)
    orphaned = seed_worker_takes(swarm, 1, process=False)  # its worker crashed: pending, never acked
    pool = adopting_pool("adopt-swarm.yaml")
    # what the scaler and `tierpool status` see: the swarm's group on the swarm's stream
    [tier] = (await observe(client, pool.keys, pool.spec.tier_names)).tiers
    assert (tier.name, tier.backlog, tier.pending) == ("tasks", 3, 1)
    recorder = Recorder()
    expected = orphaned + [f"task-swarm-{n}" for n in range(4, 7)]
    async with running_worker(pool, redis_url, recorder):
        # a tierpool producer that knows only the pool's name reads its published spec and shares the stream
        native = await (await AsyncClient.create(client, pool.ref)).submit("tasks", {"task_id": "not this"})
        expected.append(native)
        assert await async_wait_until(lambda: _all_done(client, pool, expected), 15)
        await asyncio.sleep(1.5)  # a reclaim period more: nothing else may run
    runs = Counter(task.id for task in recorder.calls)
    assert runs == Counter(expected)  # each un-acked task once, the acked ones never
    assert not set(acked) & set(runs)
    seeds = [task for task in recorder.calls if task.id != native]
    assert {task.payload["task_id"] for task in seeds} == set(expected) - {native}  # the handler gets the model's JSON
    records = await finished(client, pool, expected)
    assert {record["status"] for record in records.values()} == {"succeeded"}
    assert await client.xlen(pool.keys.dlq) == 0
    group = next(g for g in await client.xinfo_groups(seed_004.STREAM_KEY) if g["name"] == seed_004.GROUP_NAME)
    assert group["pending"] == 0


async def _all_done(client: aioredis.Redis, pool: AgentPool, task_ids: list[str]) -> bool:
    return len(await finished(client, pool, task_ids)) == len(task_ids)


async def test_seed_000_entries_run_once_with_ids_of_their_own(
    seed_redis: redis.Redis, client: aioredis.Redis, redis_url: str
) -> None:
    written = {
        tier: [seed_000.orchestrate(seed_redis, tier, "reconcile", json.dumps({"n": n})).decode() for n in range(3)]
        for tier in ("p0", "p1", "p2")
    }
    # the seed's own sweeper, still running before the switch, moves a stale p2 task up (to p1, then in the same
    # pass to p0): its XADD of the entry's fields is the one write the article prints; tierpool takes the copy
    stale = seed_000.orchestrate(seed_redis, "p2", "reconcile", json.dumps({"n": "stale"}), priority_ttl_s=-1)
    seed_000.escalate_stale_tasks(seed_redis)
    assert not seed_redis.xrange("tasks:p2", stale, stale)
    [(moved_id, moved)] = [entry for entry in seed_redis.xrange("tasks:p0") if entry[0].decode() not in written["p0"]]
    assert moved[b"data"] == json.dumps({"n": "stale"}).encode()
    assert [len(seed_redis.xrange(f"tasks:{tier}")) for tier in ("p0", "p1", "p2")] == [4, 3, 3]  # no other moved
    expected = [f"tasks:{tier}/{entry_id}" for tier, ids in written.items() for entry_id in ids]
    expected.append(f"tasks:p0/{moved_id.decode()}")
    pool = adopting_pool("adopt-priority-streams.yaml")
    recorder = Recorder()
    async with running_worker(pool, redis_url, recorder):
        assert await async_wait_until(lambda: _all_done(client, pool, expected), 15)
        await asyncio.sleep(1.5)
    assert Counter(task.id for task in recorder.calls) == Counter(expected)
    first = next(task for task in recorder.calls if task.id == expected[0])
    assert first.payload == {"task_type": "reconcile", "data": json.dumps({"n": 0})}
    assert abs(first.created_at_ms - int(written["p0"][0].split("-")[0])) < 1000  # seconds, read as such
    assert await client.xlen(pool.keys.dlq) == 0
