"""The stream protocol scripts against a real Valkey: take, escalate, trim, heartbeat, reclaim, cleanup."""

from __future__ import annotations

from collections import Counter

import pytest
import redis.asyncio as aioredis

from tierpool.model.keys import GROUP, PoolKeys
from tierpool.model.spec import DispatchPolicy
from tierpool.protocol.dispatch import UNLIMITED, Planner, TakePlan
from tierpool.protocol.envelope import encode
from tierpool.runtime.maintenance import Maintainer
from tierpool.store.streams import Completion, PoolStreams

from .support import make_pool

pytestmark = pytest.mark.redis


@pytest.fixture
async def streams(redis_url: str, pool_name: str) -> PoolStreams:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    ops = PoolStreams(client, PoolKeys("test", pool_name), ["p0", "p1", "p2"])
    await ops.load_scripts()
    await ops.ensure_groups()
    await ops.ensure_groups()  # BUSYGROUP is not an error
    yield ops
    await client.aclose()


async def fill(ops: PoolStreams, tier: int, count: int, prefix: str = "t", created_at: int = 1) -> list[str]:
    pipe = ops.client.pipeline(transaction=False)
    for i in range(count):
        pipe.xadd(ops.streams[tier], encode(f"{prefix}{tier}-{i}", ops.tiers[tier], "{}", created_at))
    return [str(x) for x in await pipe.execute()]


async def lag(ops: PoolStreams, tier: int) -> int | None:
    groups = await ops.client.xinfo_groups(ops.streams[tier])
    return next(g["lag"] for g in groups if g["name"] == GROUP)


async def test_take_hands_shortfall_to_tiers_with_work(streams: PoolStreams) -> None:
    await fill(streams, 1, 5)
    got = await streams.take(TakePlan((3, 1, 0), (UNLIMITED,) * 3), "c1")
    assert [e.tier_index for e in got] == [1, 1, 1, 1]


async def test_take_respects_room(streams: PoolStreams) -> None:
    await fill(streams, 0, 5)
    await fill(streams, 1, 5)
    got = await streams.take(TakePlan((2, 2, 0), (2, UNLIMITED, UNLIMITED)), "c1")
    assert Counter(e.tier_index for e in got) == {0: 2, 1: 2}
    got = await streams.take(TakePlan((0, 0, 4), (0, 1, UNLIMITED)), "c1")  # p2 empty: p1 may take only 1 more
    assert Counter(e.tier_index for e in got) == {1: 1}


@pytest.mark.parametrize(("weights", "policy"), [([70, 25, 5], "weighted"), ([50, 30, 20], "weighted")])
async def test_saturated_shares_within_two_points(streams: PoolStreams, weights: list[int], policy: str) -> None:
    for tier in range(3):
        await fill(streams, tier, 10_000)
    planner = Planner(weights, [None] * 3, DispatchPolicy(policy))
    counts: Counter[int] = Counter()
    for _ in range(1_000):
        entries = await streams.take(planner.plan(10, [0, 0, 0]), "c1")
        counts.update(e.tier_index for e in entries)
    total = sum(counts.values())
    assert total == 10_000
    for tier, weight in enumerate(weights):
        assert abs(counts[tier] / total - weight / 100) <= 0.02, counts


async def test_empty_tier_share_goes_to_others_without_blocking(streams: PoolStreams) -> None:
    await fill(streams, 1, 3_000)
    await fill(streams, 2, 3_000)
    planner = Planner([70, 25, 5], [None] * 3, DispatchPolicy.WEIGHTED)
    counts: Counter[int] = Counter()
    for _ in range(100):
        entries = await streams.take(planner.plan(10, [0, 0, 0]), "c1")
        assert len(entries) == 10  # every slot filled although p0 (70%) is empty
        counts.update(e.tier_index for e in entries)
    assert counts[0] == 0
    assert counts[2] >= 50  # p2 keeps at least its 5% guaranteed share


async def test_escalation_moves_only_undelivered_once_and_keeps_lag(streams: PoolStreams, pool_name: str) -> None:
    spec = make_pool(
        pool_name,
        tiers=[
            {"name": "p0", "weight": 1},
            {"name": "p1", "weight": 1},
            {"name": "p2", "weight": 1, "escalateAfter": "1m"},
        ],
    ).spec
    await fill(streams, 2, 100, created_at=123)
    delivered = await streams.take(TakePlan((0, 0, 10), (UNLIMITED,) * 3), "c1")
    await streams.client.xack(streams.streams[2], GROUP, *[e.id for e in delivered[:5]])
    maintainer = Maintainer(streams, spec, "m1", clock=lambda: 10**10)  # far future: everything is stale
    assert (await maintainer.escalate_all()) == {"p2": 90}
    assert (await maintainer.escalate_all()) == {}
    moved = await streams.client.xrange(streams.streams[1])
    assert len(moved) == 90
    assert {f["task_id"] for _, f in moved} == {f"t2-{i}" for i in range(10, 100)}
    assert all(f["escalated_from"] == "p2" and f["tier"] == "p1" and f["created_at"] == "123" for _, f in moved)
    assert await lag(streams, 2) == 0
    assert await lag(streams, 1) == 90
    pending = await streams.client.xpending(streams.streams[2], GROUP)
    assert pending["pending"] == 5  # delivered-but-unacked entries are never escalated


async def test_escalation_keeps_the_target_below_its_backlog_cap(streams: PoolStreams, pool_name: str) -> None:
    """escalateMaxTargetBacklog: 7 means the tier above keeps fewer than 7 waiting: at most 6, never 7."""
    tiers = [
        {"name": "p0", "weight": 1},
        {"name": "p1", "weight": 1},
        {"name": "p2", "weight": 1, "escalateAfter": "1m", "escalateMaxTargetBacklog": 7},
    ]
    spec = make_pool(pool_name, tiers=tiers).spec
    await fill(streams, 1, 5)
    await fill(streams, 2, 20)
    maintainer = Maintainer(streams, spec, "m1", clock=lambda: 10**10)
    assert await maintainer.escalate_all() == {"p2": 1}  # p1 had 5 waiting: one more makes 6 < 7
    assert await maintainer.escalate_all() == {}
    await streams.take(TakePlan((0, 6, 0), (UNLIMITED,) * 3), "c1")  # workers drain p1: nothing waiting
    assert await maintainer.escalate_all() == {"p2": 6}
    assert await lag(streams, 2) == 13 and await lag(streams, 1) == 6


async def test_escalation_with_cap_zero_moves_only_into_an_empty_tier(streams: PoolStreams, pool_name: str) -> None:
    """escalateMaxTargetBacklog: 0 escalates only when the tier above has nothing waiting (it used to never)."""
    tiers = [
        {"name": "p0", "weight": 1},
        {"name": "p1", "weight": 1},
        {"name": "p2", "weight": 1, "escalateAfter": "1m", "escalateMaxTargetBacklog": 0},
    ]
    spec = make_pool(pool_name, tiers=tiers).spec
    await fill(streams, 1, 1)
    await fill(streams, 2, 5)
    maintainer = Maintainer(streams, spec, "m1", clock=lambda: 10**10)
    assert await maintainer.escalate_all() == {}  # p1 has a task waiting
    await streams.take(TakePlan((0, 1, 0), (UNLIMITED,) * 3), "c1")
    assert await maintainer.escalate_all() == {"p2": 1}  # p1 empty: one task moves up
    assert await maintainer.escalate_all() == {}  # and p1 is no longer empty
    assert await lag(streams, 2) == 4 and await lag(streams, 1) == 1


async def test_escalation_respects_age(streams: PoolStreams, pool_name: str) -> None:
    spec = make_pool(
        pool_name,
        tiers=[
            {"name": "p0", "weight": 1},
            {"name": "p1", "weight": 1, "escalateAfter": "1h"},
            {"name": "p2", "weight": 1},
        ],
    ).spec
    await fill(streams, 1, 10)
    assert await Maintainer(streams, spec, "m1").escalate_all() == {}
    assert await lag(streams, 1) == 10


async def test_trim_removes_acknowledged_history_only(streams: PoolStreams) -> None:
    ids = await fill(streams, 0, 20)
    taken = await streams.take(TakePlan((10, 0, 0), (UNLIMITED,) * 3), "c1")
    await streams.client.xack(streams.streams[0], GROUP, *[e.id for e in taken if e.id not in ids[3:5]])
    assert await streams.trim_acknowledged(0) == 3  # ids 0-2 acked and below the oldest pending (3)
    remaining = [i for i, _ in await streams.client.xrange(streams.streams[0])]
    assert remaining == ids[3:]
    assert await lag(streams, 0) == 10
    await streams.client.xack(streams.streams[0], GROUP, ids[3], ids[4])
    assert await streams.trim_acknowledged(0) == 7
    assert [i for i, _ in await streams.client.xrange(streams.streams[0])] == ids[10:]
    assert await lag(streams, 0) == 10


async def test_heartbeat_resets_idle_without_counting_and_never_steals(streams: PoolStreams) -> None:
    await fill(streams, 0, 2)
    taken = await streams.take(TakePlan((2, 0, 0), (UNLIMITED,) * 3), "owner")
    ids = [e.id for e in taken]
    await streams.client.xclaim(streams.streams[0], GROUP, "thief", 0, [ids[1]], justid=True)
    lost = await streams.heartbeat(0, "owner", ids)
    assert lost == [ids[1]]
    detail = await streams.client.xpending_range(streams.streams[0], GROUP, "-", "+", 10)
    by_id = {d["message_id"]: d for d in detail}
    assert by_id[ids[0]]["consumer"] == "owner" and by_id[ids[0]]["times_delivered"] == 1
    assert by_id[ids[1]]["consumer"] == "thief"


async def test_reclaim_reports_exhausted_and_deleted_entries(streams: PoolStreams) -> None:
    """An entry past max deliveries is claimed and returned as exhausted; its claimer dead-letters it with the
    remembered error and deliveries - 1 runs (the claim counted a delivery that never runs)."""
    ids = await fill(streams, 0, 3)
    await streams.take(TakePlan((3, 0, 0), (UNLIMITED,) * 3), "dead")
    for _ in range(2):  # ids[0] now delivered 3 times
        await streams.client.xclaim(streams.streams[0], GROUP, "dead", 0, [ids[0]])
    await streams.client.hset(streams.keys.errors, "t0-0", "ValueError: nope")
    await streams.client.xdel(streams.streams[0], ids[2])
    result = await streams.reclaim(0, "alive", 0, "0-0", 10, 2)
    assert [(e.id, e.deliveries, e.fields["task_id"]) for e in result.exhausted] == [(ids[0], 4, "t0-0")]
    assert result.deleted_ids == [ids[2]]
    assert [(e.id, e.deliveries) for e in result.claimed] == [(ids[1], 2)]
    assert await streams.client.xlen(streams.keys.dlq) == 0
    await streams.client.xadd(streams.keys.events("t0-0"), {"type": "follow"})
    reason = "exceeded maxDeliveries (2)"
    dead_letter = streams.dead_letter_call(0, "alive", ids[0], "t0-0", reason, "", 3, 60_000)
    assert await streams.run_batch([dead_letter]) == [1]
    [*_, (_, final)] = await streams.client.xrange(streams.keys.events("t0-0"))
    assert final["type"] == "outcome" and final["status"] == "dead_lettered"
    [(_, dead)] = await streams.client.xrange(streams.keys.dlq)
    assert dead["task_id"] == "t0-0" and dead["error"] == "ValueError: nope" and dead["deliveries"] == "3"
    assert "maxDeliveries" in dead["reason"]
    record = await streams.client.get(streams.keys.result("t0-0"))
    assert '"dead_lettered"' in record
    assert (await streams.client.xpending(streams.streams[0], GROUP))["pending"] == 1


async def test_complete_many_writes_records_once_and_forgets_errors(streams: PoolStreams) -> None:
    ids = await fill(streams, 0, 3, prefix="task with spaces ")
    await streams.take(TakePlan((3, 0, 0), (UNLIMITED,) * 3), "c1")
    await streams.client.xack(streams.streams[0], GROUP, ids[2])  # finished already (say, by a reclaimer)
    task_ids = [f"task with spaces 0-{i}" for i in range(3)]
    await streams.client.hset(streams.keys.errors, mapping=dict.fromkeys(task_ids, "ValueError: earlier"))
    done = [Completion(0, ids[i], task_ids[i], b'{"n": %d}' % i, retried=True) for i in range(3)]
    [acked] = await streams.run_batch([streams.complete_many_call(0, "c1", 60_000, done, forget_errors=True)])
    assert acked == [1, 1, 0]
    records = [await streams.client.get(streams.keys.result(task_id)) for task_id in task_ids]
    assert records == ['{"n": 0}', '{"n": 1}', None]  # the entry finished elsewhere writes nothing
    assert await streams.client.hkeys(streams.keys.errors) == [task_ids[2]]
    assert 0 < await streams.client.pttl(streams.keys.result(task_ids[0])) <= 60_000
    assert (await streams.client.xpending(streams.streams[0], GROUP))["pending"] == 0


async def test_consumer_cleanup_keeps_owners(streams: PoolStreams) -> None:
    await fill(streams, 0, 1)
    await streams.take(TakePlan((1, 0, 0), (UNLIMITED,) * 3), "busy")
    await streams.take(TakePlan((1, 0, 0), (UNLIMITED,) * 3), "idle")
    removed = await streams.remove_dead_consumers(0, 0)
    assert removed == ["idle"]
    names = [c["name"] for c in await streams.client.xinfo_consumers(streams.streams[0], GROUP)]
    assert names == ["busy"]


async def test_lease_is_exclusive(streams: PoolStreams) -> None:
    assert await streams.hold_lease("a", 10_000)
    assert not await streams.hold_lease("b", 10_000)
    assert await streams.hold_lease("a", 10_000)
    await streams.release_lease("b")
    assert not await streams.hold_lease("b", 10_000)
    await streams.release_lease("a")
    assert await streams.hold_lease("b", 10_000)


async def owner_of(ops: PoolStreams, tier: int, entry_id: str) -> tuple[str, int] | None:
    found = await ops.client.xpending_range(ops.streams[tier], GROUP, entry_id, entry_id, 1)
    return (found[0]["consumer"], found[0]["times_delivered"]) if found else None


async def test_outcomes_are_written_only_by_the_owner(streams: PoolStreams) -> None:
    """Worker A froze; B reclaimed the entry and runs it. A's late outcomes (dead letter, result, retry mark)
    must change nothing, and B's success must land."""
    await fill(streams, 0, 1)
    [entry] = await streams.take(TakePlan((1, 0, 0), (UNLIMITED,) * 3), "a")
    await streams.client.xclaim(streams.streams[0], GROUP, "b", 0, [entry.id])  # B's reclaim
    late = [
        streams.dead_letter_call(0, "a", entry.id, "t0-0", "handler failed on all 1 deliveries", "boom", 1, 60_000),
        streams.complete_many_call(0, "a", 60_000, [Completion(0, entry.id, "t0-0", b'{"by": "a"}', False)]),
        streams.retry_later_call(0, "a", entry.id, "t0-0", "boom", 0),
    ]
    assert await streams.run_batch(late) == [-1, [-1], 0]
    assert await streams.client.xlen(streams.keys.dlq) == 0
    assert await streams.client.get(streams.keys.result("t0-0")) is None
    assert await streams.client.hlen(streams.keys.errors) == 0
    assert await owner_of(streams, 0, entry.id) == ("b", 2)
    done = [Completion(0, entry.id, "t0-0", b'{"by": "b"}', False)]
    assert await streams.run_batch([streams.complete_many_call(0, "b", 60_000, done)]) == [[1]]
    assert await streams.client.get(streams.keys.result("t0-0")) == '{"by": "b"}'
    assert await owner_of(streams, 0, entry.id) is None


async def test_reclaim_never_takes_its_own_entries_but_takes_parked_retries(streams: PoolStreams) -> None:
    """Entries a worker holds (running, or finished with the outcome on its way) are idle after an outage, but
    that worker must not claim them back and run them again. A retry it marked is parked and reclaimable."""
    await fill(streams, 0, 2)
    held, failed = await streams.take(TakePlan((2, 0, 0), (UNLIMITED,) * 3), "me")
    for entry in (held, failed):  # no heartbeat for a minute (Redis was down)
        await streams.client.xclaim(streams.streams[0], GROUP, "me", 0, [entry.id], idle=60_000, justid=True)
    [marked] = await streams.run_batch([streams.retry_later_call(0, "me", failed.id, "t0-1", "boom", 60_000)])
    assert marked == 1
    result = await streams.reclaim(0, "me", 1_000, "0-0", 10, 5)
    assert [(e.id, e.deliveries) for e in result.claimed] == [(failed.id, 2)]
    assert await owner_of(streams, 0, held.id) == ("me", 1)  # not claimed back, no delivery counted
    result = await streams.reclaim(0, "other", 1_000, "0-0", 10, 5)
    assert [e.id for e in result.claimed] == [held.id]  # another worker may take it once it is idle


async def test_reclaim_cursor_moves_past_own_entries(streams: PoolStreams) -> None:
    """A scan that finds only this consumer's own entries moves on, so others' idle entries behind them are
    reached on a later pass."""
    await fill(streams, 0, 100)
    mine = await streams.take(TakePlan((80, 0, 0), (UNLIMITED,) * 3), "me")
    theirs = await streams.take(TakePlan((20, 0, 0), (UNLIMITED,) * 3), "dead")
    ids = [e.id for e in mine + theirs]
    await streams.client.xclaim(streams.streams[0], GROUP, "me", 0, [e.id for e in mine], idle=60_000, justid=True)
    await streams.client.xclaim(streams.streams[0], GROUP, "dead", 0, [e.id for e in theirs], idle=60_000, justid=True)
    cursor, claimed = "0-0", []
    for _ in range(5):
        result = await streams.reclaim(0, "me", 1_000, cursor, 10, 5)
        cursor, claimed = result.cursor, claimed + [e.id for e in result.claimed]
    assert sorted(claimed) == sorted(ids[80:])


async def test_heartbeat_sends_many_ids_in_chunks(streams: PoolStreams) -> None:
    """Lua's unpack fails above about 8,000 values; a worker may hold 10,000 entries."""
    await fill(streams, 0, 9_000)
    taken = await streams.take(TakePlan((9_000, 0, 0), (UNLIMITED,) * 3), "owner")
    ids = [e.id for e in taken]
    await streams.client.xclaim(streams.streams[0], GROUP, "owner", 0, ids, idle=60_000, justid=True)
    assert await streams.heartbeat(0, "owner", ids) == []
    detail = await streams.client.xpending_range(streams.streams[0], GROUP, "-", "+", 10_000)
    assert len(detail) == 9_000
    assert max(d["time_since_delivered"] for d in detail) < 30_000  # every one refreshed, not only the first
    assert {d["times_delivered"] for d in detail} == {1}


async def test_heartbeat_refreshes_every_id_it_is_given(streams: PoolStreams) -> None:
    await fill(streams, 1, 3)
    ids = [e.id for e in await streams.take(TakePlan((0, 3, 0), (UNLIMITED,) * 3), "owner")]
    await streams.client.xclaim(streams.streams[1], GROUP, "owner", 0, ids, idle=60_000, justid=True)
    assert await streams.heartbeat(1, "owner", ids) == []
    detail = await streams.client.xpending_range(streams.streams[1], GROUP, "-", "+", 10)
    assert [d["time_since_delivered"] < 30_000 for d in detail] == [True, True, True]
