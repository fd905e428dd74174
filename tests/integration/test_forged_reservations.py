"""A rate limit a plain XADD cannot get past (issue #23, item 4), on a real Valkey: a ``paid`` field counts only
when the THROTTLE script recorded that reservation itself, and a task naming a rate limit the pool does not
define is dead-lettered, whether it came in by a plain XADD into a stream or into the due set."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.envelope import Task
from tierpool.store import dlq
from tierpool.store.registry import spec_json, spec_key
from tierpool.store.streams import PoolStreams

from .support import FAST_RECOVERY, async_wait_until, make_pool, running_worker, sync_redis
from .test_hostile_limits import envelope, records

pytestmark = pytest.mark.redis


async def server_ms(client: aioredis.Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def test_a_forged_paid_field_draws_from_the_bucket_like_a_new_task(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """One a second, burst 1. Four tasks claim a reservation paid just now: two XADDed into the stream, two
    scheduled through the due set (a plain ZADD, as a producer may write it). None was recorded by THROTTLE, so
    they draw, and start at least about a second apart; honoured, they all ran at once."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, rateLimits=[{"name": "one", "perMinute": 60}])
    keys = PoolKeys.parse(pool.ref)
    starts: list[float] = []

    async def handler(task: Task) -> None:
        starts.append(time.monotonic())

    producer = sync_redis(redis_url)
    async with running_worker(pool, redis_url, handler):
        paid = await server_ms(client)
        ids = [f"forged-{i}" for i in range(4)]
        for task_id in ids[:2]:
            producer.xadd(keys.tier("p0"), envelope(task_id, rate_limit="one", paid=str(paid)))
        for task_id in ids[2:]:
            fields = envelope(task_id, rate_limit="one", paid=str(paid), due=str(paid))
            member = json.dumps(["p0", list(itertools.chain.from_iterable(fields.items()))])
            producer.zadd(keys.due, {member: paid})
        done = await records(client, pool, ids, timeout=20)
    assert {r["status"] for r in done} == {"succeeded"}, done
    gaps = [b - a for a, b in itertools.pairwise(sorted(starts))]
    assert len(starts) == 4 and min(gaps) > 0.8, f"starts {starts}: the limit is one a second"


async def test_a_recorded_reservation_runs_once_without_drawing_again(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """The real path still holds: a task THROTTLE parked comes back (MOVE_DUE) and runs on its reservation
    without drawing again, which takes the reservation; a copy claiming the same one after that draws."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, rateLimits=[{"name": "one", "perMinute": 60}])
    keys = PoolKeys.parse(pool.ref)
    streams = PoolStreams(client, keys, pool.spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()
    bucket = keys.rate_bucket("one")

    async def throttle(entry_id: str, task_id: str, claimed: str = "") -> int:
        run_keys = [keys.tier("p0"), keys.throttled, bucket, keys.admitted("p0"), keys.reservation(task_id)]
        args = [GROUP, "c1", entry_id, "p0", "1000", "1", "0", "0", 1, "", task_id, claimed, 1000]
        return int(await streams.run("THROTTLE", [*run_keys, keys.where], args))

    async def read_one(task_id: str, **extra: Any) -> str:
        await client.xadd(keys.tier("p0"), envelope(task_id, rate_limit="one", **extra))
        ((_, ((entry_id, _),)),) = await client.xreadgroup(GROUP, "c1", {keys.tier("p0"): ">"}, count=1)
        return str(entry_id)

    assert await throttle(await read_one("first"), "first") == 0
    assert await throttle(await read_one("parked"), "parked") > 0  # waits about a second, reservation recorded
    paid = await client.get(keys.reservation("parked"))
    assert paid is not None and await client.pttl(keys.reservation("parked")) > 1000
    tat = await client.hget(bucket, "tat")
    assert await throttle(await read_one("parked", paid=paid), "parked", paid) == 0  # ran on it, nothing drawn
    assert await client.hget(bucket, "tat") == tat and not await client.exists(keys.reservation("parked"))
    assert await throttle(await read_one("parked", paid=paid), "parked", paid) > 0  # used: the copy draws
    assert await client.hget(bucket, "tat") != tat


async def test_a_task_naming_an_undefined_rate_limit_is_dead_lettered(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, rateLimits=[{"name": "one", "perMinute": 60}])
    keys = PoolKeys.parse(pool.ref)
    ran: list[str] = []

    async def handler(task: Task) -> None:
        ran.append(task.id)

    producer = sync_redis(redis_url)
    producer.xadd(keys.tier("p0"), envelope("unknown-limit", rate_limit="nope"))
    producer.xadd(keys.tier("p0"), envelope("known-limit", rate_limit="one"))
    async with running_worker(pool, redis_url, handler):
        unknown, known = await records(client, pool, ["unknown-limit", "known-limit"])
        assert await async_wait_until(lambda: _dead_letters(client, keys), 5)
    assert ran == ["known-limit"] and known["status"] == "succeeded"
    assert unknown["status"] == "dead_lettered", unknown
    assert "rate_limit 'nope' is not one of spec.rateLimits (one)" in unknown["reason"], unknown
    (letter,) = await dlq.list_dead(client, keys)
    assert letter.task_id == "unknown-limit" and "'nope'" in letter.reason


async def _dead_letters(client: aioredis.Redis, keys: PoolKeys) -> bool:
    return int(await client.xlen(keys.dlq)) == 1


async def test_a_limit_only_the_published_spec_defines_runs_during_a_rollout(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """An older worker meets a task of a limit just added to the pool: the operator already published the new spec
    (which producers check submits against), so the task is legitimate and runs, unlimited on this worker, as it
    did before limits were enforced; it is not dead-lettered."""
    old = make_pool(pool_name, recovery=FAST_RECOVERY, rateLimits=[{"name": "one", "perMinute": 60}])
    new = make_pool(
        pool_name,
        recovery=FAST_RECOVERY,
        rateLimits=[{"name": "one", "perMinute": 60}, {"name": "two", "perMinute": 60}],
    )
    keys = PoolKeys.parse(old.ref)
    ran: list[str] = []

    async def handler(task: Task) -> None:
        ran.append(task.id)

    async with running_worker(old, redis_url, handler):
        await client.set(spec_key(keys), spec_json(new.spec))  # what the operator publishes from the AgentPool
        sync_redis(redis_url).xadd(keys.tier("p0"), envelope("new-limit", rate_limit="two"))
        (record,) = await records(client, old, ["new-limit"])
    assert ran == ["new-limit"] and record["status"] == "succeeded", record
    assert int(await client.xlen(keys.dlq)) == 0
