"""Cancel's lookup against what moves under it: ids that Lua's cjson escapes inside the indexed members, and a
task the mover takes from the due-time index into its stream while the lookup runs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client import cancels
from tierpool.client.producer import AsyncClient
from tierpool.model.keys import PoolKeys
from tierpool.protocol.task_state import CancelState
from tierpool.store.due import DueMover
from tierpool.store.streams import PoolStreams

from .support import FAST_RECOVERY, make_pool

pytestmark = pytest.mark.redis


def tenant_pool(name: str) -> Any:
    tiers = [{"name": "p0", "weight": 1, "sla": "5s", "tenantConcurrency": 1}, {"name": "p1", "weight": 1}]
    return make_pool(name, tiers=tiers, recovery=FAST_RECOVERY)


async def test_a_single_cancel_finds_held_and_delayed_tasks_whose_ids_json_escapes(
    client: aioredis.Redis, pool_name: str
) -> None:
    """cjson writes ``/`` as ``\\/``: a MATCH pattern made from the id never matched, so the task was reported
    unknown, its marker dropped, and it ran later."""
    pool = tenant_pool(pool_name)
    producer = AsyncClient(client, pool, pool.spec)
    await producer.submit("p0", {}, task_id="acme/1", tenant="acme")  # admitted
    await producer.submit("p0", {}, task_id="acme/2", tenant="acme")  # held for acme's turn
    await producer.submit("p1", {}, task_id='later/"quoted"', delay=60)
    for task_id in ("acme/2", 'later/"quoted"'):
        report = await producer.cancel(task_id)
        assert report.state is CancelState.WAITING, report
        assert await client.exists(producer.keys.cancel(task_id)) == 1


async def test_a_task_moved_from_the_due_index_while_the_lookup_runs_is_still_found(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    """The lookup scans where tasks move from (due index, held) before where they move to (streams): the mover
    running between its batches must not make a waiting task look unknown (which drops its marker)."""
    pool = make_pool(pool_name, recovery=FAST_RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    task_id = await producer.submit("p1", {}, delay=0.3)
    keys, tiers = producer.keys, pool.spec.tier_names
    await client.eval(  # the marker, as cancel_plan's first batch writes it
        "return redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])", 1, keys.cancel(task_id), 60_000
    )
    plan = cancels._locate(keys, tiers, [task_id], 60_000)
    batch, batches = next(plan), 0
    streams = PoolStreams(client, keys, tiers)
    await streams.load_scripts()
    try:
        while True:
            if batches == 1:  # the index was scanned: now the task comes due and moves into its stream
                await asyncio.sleep(0.4)
                assert await DueMover(streams).move() == 1
            pipe = client.pipeline(transaction=False)
            for name, args, kwargs in batch:
                getattr(pipe, name)(*args, **kwargs)
            batch, batches = plan.send(await pipe.execute(raise_on_error=False)), batches + 1
    except StopIteration as done:
        report = done.value[task_id]
    assert report.state is CancelState.WAITING, report
    assert await client.exists(keys.cancel(task_id)) == 1


@pytest.mark.parametrize(
    ("ids", "pattern"),
    [
        (["plain-id_1.2:3"], "*plain-id_1.2:3*"),
        (["a*b"], "*a\\*b*"),
        (["acme/2"], None),
        (['say "hi"'], None),
        (["back\\slash"], None),
        (["é"], None),
        (["a", "b"], None),
    ],
)
def test_match_pattern(ids: list[str], pattern: str | None) -> None:
    assert cancels.match_pattern(ids) == pattern


def test_the_lookup_reads_the_parked_hashes_then_scans_the_sets_before_the_streams() -> None:
    keys = PoolKeys("ns", "pool")
    plan = cancels._locate(keys, ["p0"], ["t"], 1000)
    first = next(plan)  # a parent moves both ways between its stream and its parked hash: read before the scan
    assert [(name, args) for name, args, _ in first] == [("exists", (keys.parked("t"),))]
    second = plan.send([0])
    assert {args[0] for _, args, _ in second} == {"ZSCAN"}
