"""What the scaler reads from a real Valkey: head-of-line age on Redis' clock, running entries vs the rest."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
import redis.exceptions

from tierpool.model.keys import ESCALATOR_CONSUMER, GROUP, RETRY_CONSUMER, PoolKeys
from tierpool.protocol.envelope import encode
from tierpool.store.observe import active_idle_seconds, in_flight_by_consumer, observe

pytestmark = pytest.mark.redis
TIERS = ["p0", "p1"]


async def server_ms(client: aioredis.Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def test_head_of_line_age_ignores_a_skewed_producer_clock(client: aioredis.Redis, pool_name: str) -> None:
    """A producer whose clock runs 10 minutes slow stamps created_at 10 minutes early: the age must not jump."""
    keys = PoolKeys("test", pool_name)
    await client.xgroup_create(keys.tier("p0"), GROUP, id="0", mkstream=True)
    skewed = await server_ms(client) - 600_000
    await client.xadd(keys.tier("p0"), encode("late", "p0", "{}", skewed))
    await client.xadd(keys.tier("p1"), encode("early", "p1", "{}", skewed))  # no group yet: counted from the stream
    obs = await observe(client, keys, TIERS)
    p0, p1 = obs.tiers
    assert p0.backlog == 1 and p0.oldest_age_seconds < 30, p0
    assert p1.backlog == 1 and p1.oldest_age_seconds < 30, p1


async def test_only_entries_running_on_live_workers_are_busy(client: aioredis.Redis, pool_name: str) -> None:
    keys = PoolKeys("test", pool_name)
    stream = keys.tier("p0")
    await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    ids = [await client.xadd(stream, encode(f"t{i}", "p0", "{}", 1)) for i in range(5)]
    await client.xreadgroup(GROUP, "w1", {stream: ">"}, count=5)
    # as the worker's RETRY_LATER does (protocol 2): parked under tierpool-retry, backoff stamped as idle time
    await client.xclaim(stream, GROUP, RETRY_CONSUMER, 0, [ids[0]], idle=59_000, justid=True)
    # a dead consumer's task: its consumer is not touched again
    await client.xclaim(stream, GROUP, "w2", 0, [ids[1]], idle=0, justid=True)
    active_idle = active_idle_seconds(heartbeat=1, claim_idle=60)  # 2 s
    await asyncio.sleep(active_idle + 1)  # w2 falls silent for longer than that
    await client.xclaim(stream, GROUP, "w1", 0, ids[2:], idle=0, justid=True)  # w1's heartbeat: it is live
    p0, p1 = (await observe(client, keys, TIERS, active_idle)).tiers
    assert (p0.pending, p0.active, p0.busy) == (5, 3, 3)
    assert (p1.exists, p1.busy) == (False, 0)
    unmeasured, _ = (await observe(client, keys, TIERS)).tiers
    assert (unmeasured.active, unmeasured.busy) == (None, 5)  # without the idle threshold, as before


async def test_busy_workers_counts_each_live_worker_holding_a_task_once(client: aioredis.Redis, pool_name: str) -> None:
    """w1 holds tasks in two tiers, w3 one; w2 is dead, tierpool-retry parks one: two busy workers, whose tasks
    would pack into one replica's slots but cannot move there."""
    keys = PoolKeys("test", pool_name)
    ids = {}
    for tier in TIERS:
        await client.xgroup_create(keys.tier(tier), GROUP, id="0", mkstream=True)
        ids[tier] = [await client.xadd(keys.tier(tier), encode(f"{tier}-{i}", tier, "{}", 1)) for i in range(3)]
    await client.xreadgroup(GROUP, "w2", {keys.tier("p0"): ">", keys.tier("p1"): ">"}, count=3)  # w2 dies
    await client.xclaim(keys.tier("p0"), GROUP, RETRY_CONSUMER, 0, [ids["p0"][1]], idle=59_000, justid=True)
    active_idle = active_idle_seconds(heartbeat=1, claim_idle=60)
    await asyncio.sleep(active_idle + 1)
    await client.xclaim(keys.tier("p0"), GROUP, "w1", 0, [ids["p0"][2]], idle=0, justid=True)
    await client.xclaim(keys.tier("p1"), GROUP, "w1", 0, [ids["p1"][0]], idle=0, justid=True)
    await client.xclaim(keys.tier("p1"), GROUP, "w3", 0, [ids["p1"][1]], idle=0, justid=True)
    obs = await observe(client, keys, TIERS, active_idle)
    assert (obs.total_busy, obs.busy_workers) == (3, 2)
    assert (await observe(client, keys, TIERS)).busy_workers is None  # not measured without the threshold


async def test_a_large_backlog_in_backoff_is_never_busy(client: aioredis.Redis, pool_name: str) -> None:
    """1,400 entries parked under tierpool-retry (half with a backoff longer than claimIdle, so stamped with a
    small idle time), 100 running on a live worker: busy is exactly 100, whatever the entries' idle times."""
    keys = PoolKeys("test", pool_name)
    stream = keys.tier("p0")
    await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    pipe = client.pipeline(transaction=False)
    for i in range(1500):
        pipe.xadd(stream, encode(f"t{i}", "p0", "{}", 1))
    ids = await pipe.execute()
    await client.xreadgroup(GROUP, "w1", {stream: ">"}, count=1500)
    await client.xclaim(stream, GROUP, RETRY_CONSUMER, 0, ids[:700], idle=59_000, justid=True)
    await client.xclaim(stream, GROUP, RETRY_CONSUMER, 0, ids[700:1400], idle=1_000, justid=True)
    p0, _ = (await observe(client, keys, TIERS, active_idle_seconds(heartbeat=10, claim_idle=60))).tiers
    assert (p0.pending, p0.active, p0.busy) == (1500, 100, 100)


async def test_entries_due_again_are_reclaimable_not_busy(client: aioredis.Redis, pool_name: str) -> None:
    """Past their backoff (idle past claimIdle) retries wait for a slot like backlog; so do a dead consumer's
    entries. Entries still in backoff, running on a live worker, or mid-escalation are not reclaimable."""
    keys = PoolKeys("test", pool_name)
    stream = keys.tier("p0")
    await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    ids = [await client.xadd(stream, encode(f"t{i}", "p0", "{}", 1)) for i in range(6)]
    await client.xreadgroup(GROUP, "w1", {stream: ">"}, count=6)
    await client.xclaim(stream, GROUP, RETRY_CONSUMER, 0, ids[:2], idle=61_000, justid=True)  # backoff passed
    await client.xclaim(stream, GROUP, RETRY_CONSUMER, 0, [ids[2]], idle=1_000, justid=True)  # still backing off
    await client.xclaim(stream, GROUP, "dead", 0, [ids[3]], idle=90_000, justid=True)  # a dead consumer's
    await client.xclaim(stream, GROUP, ESCALATOR_CONSUMER, 0, [ids[4]], idle=90_000, justid=True)
    active_idle = active_idle_seconds(heartbeat=1, claim_idle=60)  # 2 s
    await asyncio.sleep(active_idle + 1)  # the dead consumer falls silent
    await client.xclaim(stream, GROUP, "w1", 0, [ids[5]], idle=0, justid=True)  # running on a live worker
    p0, _ = (await observe(client, keys, TIERS, active_idle, 60)).tiers
    assert (p0.pending, p0.busy, p0.reclaimable, p0.waiting) == (6, 1, 3, 3)
    assert p0.to_status()["reclaimable"] == 3
    unmeasured, _ = (await observe(client, keys, TIERS, active_idle_seconds(heartbeat=10, claim_idle=60))).tiers
    assert unmeasured.reclaimable == 0  # without claim_idle, as before


async def test_an_escalated_task_ages_from_its_arrival_in_its_new_tier(client: aioredis.Redis, pool_name: str) -> None:
    """The escalator copies a stale task into the tier above as a new entry (created_at kept for reporting): the
    scaler's head-of-line age there counts from that arrival, not again from the first enqueue."""
    from tierpool.runtime.maintenance import Maintainer
    from tierpool.store.streams import PoolStreams

    from .support import make_pool

    spec = make_pool(
        pool_name, tiers=[{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "escalateAfter": "1m"}]
    ).spec
    keys = PoolKeys("test", pool_name)
    streams = PoolStreams(client, keys, ["p0", "p1"])
    await streams.load_scripts()
    await streams.ensure_groups()
    ten_minutes_ago = await server_ms(client) - 600_000
    await client.xadd(keys.tier("p1"), encode("stale", "p1", "{}", ten_minutes_ago), id=f"{ten_minutes_ago}-0")
    before = await observe(client, keys, TIERS)
    assert before.tiers[1].oldest_age_seconds > 590
    assert await Maintainer(streams, spec, "m1").escalate_all() == {"p1": 1}
    p0, p1 = (await observe(client, keys, TIERS)).tiers
    assert p1.backlog == 0 and p0.backlog == 1
    assert p0.oldest_age_seconds < 30, p0
    [(_, fields)] = await client.xrange(keys.tier("p0"))
    assert fields["created_at"] == str(ten_minutes_ago)  # kept for reporting


async def test_in_flight_per_consumer_leaves_out_dead_and_internal_consumers(
    client: aioredis.Redis, pool_name: str
) -> None:
    """What the operator writes as each pod's deletion cost before a scale-in: tasks per live worker."""
    keys = PoolKeys("test", pool_name)
    streams = [keys.tier(name) for name in TIERS]
    for stream in streams:
        await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    ids = [await client.xadd(streams[0], encode(f"t{i}", "p0", "{}", 1)) for i in range(4)]
    await client.xadd(streams[1], encode("u", "p1", "{}", 1))
    await client.xreadgroup(GROUP, "pod-a-0001", {streams[0]: ">"}, count=4)
    await client.xclaim(streams[0], GROUP, RETRY_CONSUMER, 0, [ids[0]], idle=59_000, justid=True)
    await client.xclaim(streams[0], GROUP, "pod-dead-0002", 0, [ids[1]], idle=0, justid=True)
    active_idle = active_idle_seconds(heartbeat=0.25, claim_idle=60)  # 0.5 s
    await asyncio.sleep(active_idle + 0.3)
    await client.xclaim(streams[0], GROUP, "pod-a-0001", 0, ids[2:], idle=0, justid=True)  # its heartbeat
    await client.xreadgroup(GROUP, "pod-a-0001", {streams[1]: ">"}, count=1)  # one more task, in the other tier
    await client.xreadgroup(GROUP, "pod-b-0003", {streams[1]: ">"}, count=1)  # idle: nothing left to read
    assert await in_flight_by_consumer(client, keys, TIERS, active_idle) == {"pod-a-0001": 3, "pod-b-0003": 0}
    every = await in_flight_by_consumer(client, keys, TIERS)  # local mode's call: no idle threshold, as before
    assert every == {"pod-a-0001": 3, "pod-dead-0002": 1, "pod-b-0003": 0}


async def test_in_flight_per_consumer_counts_a_missing_tier_as_idle_and_raises_any_other_error(
    client: aioredis.Redis, pool_name: str
) -> None:
    """A tier with no stream or no group yet runs nothing; a key of the wrong type (or a refused command) is not
    "nothing in flight", which would remove the busy pods' deletion costs: it is raised."""
    keys = PoolKeys("test", pool_name)
    await client.xgroup_create(keys.tier("p0"), GROUP, id="0", mkstream=True)
    await client.xadd(keys.tier("p0"), encode("t", "p0", "{}", 1))
    await client.xreadgroup(GROUP, "pod-a-0001", {keys.tier("p0"): ">"}, count=1)
    assert await in_flight_by_consumer(client, keys, TIERS) == {"pod-a-0001": 1}  # p1: no key at all
    await client.xadd(keys.tier("p1"), encode("u", "p1", "{}", 1))  # p1: a stream, no group
    assert await in_flight_by_consumer(client, keys, TIERS) == {"pod-a-0001": 1}
    await client.delete(keys.tier("p1"))
    await client.set(keys.tier("p1"), "not a stream")
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await in_flight_by_consumer(client, keys, TIERS)


async def test_a_refused_command_is_raised_not_read_as_an_empty_tier(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """Without XINFO (an ACL that forgot it) the observation once saw a backlog of 0 where 50 tasks waited, and
    would have scaled the pool to its minimum: only a missing key or group means absent."""
    keys = PoolKeys("test", pool_name)
    for i in range(50):
        await client.xadd(keys.tier("p0"), encode(f"t{i}", "p0", "{}", 1))
    user = f"observer-{pool_name}"
    await client.acl_setuser(user, enabled=True, passwords=["+pw"], keys=["*"], commands=["+@all", "-xinfo"])
    limited = aioredis.Redis.from_url(redis_url, username=user, password="pw", decode_responses=True)
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            await observe(limited, keys, TIERS)
        assert (await observe(client, keys, TIERS)).tiers[0].backlog == 50
    finally:
        await limited.aclose()
        await client.acl_deluser(user)


async def test_a_tier_key_of_the_wrong_type_is_raised(client: aioredis.Redis, pool_name: str) -> None:
    keys = PoolKeys("test", pool_name)
    await client.set(keys.tier("p1"), "not a stream")
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        await observe(client, keys, TIERS)


async def test_the_observation_reads_the_eviction_policy(client: aioredis.Redis, pool_name: str) -> None:
    keys = PoolKeys("test", pool_name)
    assert (await observe(client, keys, TIERS)).eviction_policy == "noeviction"  # the test server's default


async def test_the_oldest_pending_entrys_age_counts_from_its_entry_id(client: aioredis.Redis, pool_name: str) -> None:
    """A task delivered ten minutes ago that has not finished (hung, heartbeating): its tier's oldest pending age is
    ten minutes, on Redis' clock, whatever finished after it; a tier with nothing pending shows 0."""
    keys = PoolKeys("test", pool_name)
    stream = keys.tier("p0")
    await client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    ten_minutes_ago = await server_ms(client) - 600_000
    await client.xadd(stream, encode("hung", "p0", "{}", 1), id=f"{ten_minutes_ago}-0")
    done = await client.xadd(stream, encode("done", "p0", "{}", 1))
    await client.xreadgroup(GROUP, "w1", {stream: ">"}, count=2)
    await client.xack(stream, GROUP, done)
    p0, p1 = (await observe(client, keys, TIERS)).tiers
    assert 600 <= p0.oldest_pending_age_seconds < 630, p0
    assert p0.oldest_age_seconds == 0.0  # nothing waits: the head-of-line age is the backlog's, not this
    assert p1.oldest_pending_age_seconds == 0.0
    await client.xack(stream, GROUP, f"{ten_minutes_ago}-0")
    assert (await observe(client, keys, TIERS)).tiers[0].oldest_pending_age_seconds == 0.0
