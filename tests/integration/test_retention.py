"""Retention on a real Valkey: acked entries leave their tier stream as they are acked, and the lag stays exact."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.dispatch import UNLIMITED, TakePlan
from tierpool.protocol.envelope import encode
from tierpool.runtime.maintenance import Maintainer
from tierpool.store.streams import Completion, PoolStreams

from .support import make_pool

pytestmark = pytest.mark.redis
TIERS = [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "escalateAfter": "1m"}]


async def server_ms(client: aioredis.Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def group(client: aioredis.Redis, stream: str) -> dict[str, Any]:
    return next(g for g in await client.xinfo_groups(stream) if g["name"] == GROUP)


async def ids_in(client: aioredis.Redis, stream: str) -> list[str]:
    return [entry_id for entry_id, _ in await client.xrange(stream)]


@pytest.fixture
async def streams(client: aioredis.Redis, pool_name: str) -> PoolStreams:
    ops = PoolStreams(client, PoolKeys("test", pool_name), ["p0", "p1"])
    await ops.load_scripts()
    await ops.ensure_groups()
    return ops


async def fill(ops: PoolStreams, tier: int, count: int) -> list[str]:
    pipe = ops.client.pipeline(transaction=False)
    for i in range(count):
        pipe.xadd(ops.streams[tier], encode(f"t{tier}-{i}", ops.tiers[tier], "{}", 1))
    return [str(entry_id) for entry_id in await pipe.execute()]


async def test_completion_deletes_all_but_the_last_delivered_entry_so_the_lag_stays_exact(
    streams: PoolStreams,
) -> None:
    """A deletion at the group's last delivered entry makes XINFO GROUPS report the lag as nil: that one stays."""
    ids = await fill(streams, 0, 10)
    taken = await streams.take(TakePlan((5, 0), (UNLIMITED,) * 2), "c1")
    items = [Completion(0, e.id, e.fields["task_id"], b"{}", False) for e in taken]
    assert await streams.run_batch([streams.complete_many_call(0, "c1", 1000, items)]) == [[1] * 5]
    assert await ids_in(streams.client, streams.streams[0]) == ids[4:]
    assert (await group(streams.client, streams.streams[0]))["lag"] == 5
    await streams.take(TakePlan((5, 0), (UNLIMITED,) * 2), "c1")  # the group reads past it
    assert (await group(streams.client, streams.streams[0]))["lag"] == 0
    assert await streams.trim_acknowledged(0) == 1  # the sweep's trim takes it: below the oldest pending entry
    assert await ids_in(streams.client, streams.streams[0]) == ids[5:]


async def test_dead_letter_and_cancelled_outcomes_delete_their_entries(streams: PoolStreams) -> None:
    ids = await fill(streams, 0, 4)
    await streams.take(TakePlan((4, 0), (UNLIMITED,) * 2), "c1")
    dead = streams.dead_letter_call(0, "c1", ids[0], "t0-0", "refused", "no", 1, 1000)
    cancelled = streams.cancelled_call(0, "c1", ids[1], "t0-1", b"{}", 1000)
    assert await streams.run_batch([dead, cancelled]) == [1, 1]
    assert await ids_in(streams.client, streams.streams[0]) == ids[2:]
    assert (await group(streams.client, streams.streams[0]))["lag"] == 0


async def test_a_reschedule_and_a_throttle_delete_the_entries_they_ack(streams: PoolStreams) -> None:
    """RESCHEDULE (a retry into the due-time index) and THROTTLE (a rate limit's wait) ack their entry: it goes."""
    keys = streams.keys
    ids = await fill(streams, 0, 4)
    await streams.take(TakePlan((4, 0), (UNLIMITED,) * 2), "c1")
    retry = [GROUP, "c1", ids[0], "t0-0", "boom", "retry", 60_000, 60_000, 10, 60_000, "p0"]
    assert await streams.run("RESCHEDULE", [streams.streams[0], keys.due, keys.errors, keys.deferrals("t0-0")], retry)
    bucket = keys.rate_bucket("provider")
    throttle_keys = [streams.streams[0], keys.throttled, bucket, keys.admitted("p0")]
    for entry_id, task_id, wait in ((ids[1], "t0-1", False), (ids[2], "t0-2", True)):  # one a second: then a wait
        args = [GROUP, "c1", entry_id, "p0", 1000, 1, 0, 1, 1, "", task_id]
        assert (await streams.run("THROTTLE", throttle_keys, args) > 0) is wait
    assert await ids_in(streams.client, streams.streams[0]) == [ids[1], ids[3]]  # pending: running, last read
    assert (await group(streams.client, streams.streams[0]))["lag"] == 0


async def test_escalation_deletes_the_entries_it_moves(streams: PoolStreams, pool_name: str) -> None:
    spec = make_pool(pool_name, tiers=TIERS).spec
    old = await server_ms(streams.client) - 600_000
    for i in range(5):
        await streams.client.xadd(streams.streams[1], encode(f"s{i}", "p1", "{}", 1), id=f"{old}-{i}")
    assert await Maintainer(streams, spec, "m1").escalate_all() == {"p1": 5}
    assert await ids_in(streams.client, streams.streams[1]) == [f"{old}-4"]  # the last delivered one stays
    assert (await group(streams.client, streams.streams[1]))["lag"] == 0
    assert (await group(streams.client, streams.streams[0]))["lag"] == 5
