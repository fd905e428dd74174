"""The sync and the async driver (tierpool.store.drivers) agree on a real server: the same plans, run by each on
its own pool, emit and return the same, block as long, and time out alike."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.cancels import cancel_plan, uncancel_plan
from tierpool.client.tracking import follow_plan, result_plan
from tierpool.model.keys import PoolKeys
from tierpool.protocol.submission import TaskRequest
from tierpool.store import drivers
from tierpool.store.plans import Batch, Emit, Plan, call
from tierpool.store.registry import load_spec_plan, spec_json, spec_key
from tierpool.store.replication import WaitGate
from tierpool.store.submits import submit_plan

from .support import make_pool, sync_redis

pytestmark = pytest.mark.redis
BLOCK_MS = 200


def commands(keys: PoolKeys) -> Plan[Any]:
    """Each kind of step: a batch with an error among its replies, a transaction, an emit, a blocking read."""
    key, stream = f"{keys.prefix}n", f"{keys.prefix}s"
    first = yield Batch([call("set", key, "1"), call("hset", key, "f", "v"), call("incr", key)])
    yield Emit([type(reply).__name__ if isinstance(reply, Exception) else reply for reply in first])
    yield Emit((yield Batch([call("incr", key), call("get", key)], transaction=True, raise_on_error=True)))
    return (yield call("xread", {stream: "0-0"}, count=1, block=BLOCK_MS))


def producer(keys: PoolKeys, pool: Any) -> Plan[Any]:
    """The producer's own plans, one after the other."""
    requests = [TaskRequest("p0", {"n": 1}, task_id="now"), TaskRequest("p1", {}, task_id="later", delay=60)]
    ids = yield from submit_plan(pool.spec, keys, requests, WaitGate(None))
    before = yield from result_plan(keys, "now")
    record = json.dumps({"task_id": "now", "status": "succeeded", "result": 7})
    yield Batch([call("set", keys.result("now"), record), call("set", spec_key(keys), spec_json(pool.spec))])
    followed = yield from follow_plan(keys, "now", 5.0, 60_000)
    reports = yield from cancel_plan(keys, pool.spec.tier_names, ["now", "later", "nobody"], 60_000)
    return ids, before, followed, reports, (yield from uncancel_plan(keys, "later")), (yield from load_spec_plan(keys))


async def test_the_sync_and_the_async_driver_agree(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    sync_client = sync_redis(redis_url)
    ran: dict[str, list[Any]] = {}
    for kind in ("sync", "async"):
        run = Runner(kind, sync_client, client)
        pools = {way: make_pool(f"{pool_name}-{kind}-{way}") for way in ("run", "stream")}
        keys = {way: PoolKeys.parse(pool.ref) for way, pool in pools.items()}
        started = time.monotonic()
        seen = [await run.result(commands(keys["run"])), await run.emitted(commands(keys["stream"]))]
        assert BLOCK_MS / 1000 <= time.monotonic() - started < 5  # both blocking reads waited
        seen += [await run.result(producer(keys["run"], pools["run"]))]
        seen += [await run.emitted(producer(keys["stream"], pools["stream"]))]
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"within 0\.3s"):
            await run.result(follow_plan(keys["run"], "missing", 0.3, 60_000))
        assert 0.3 <= time.monotonic() - started < 1.5
        ran[kind] = seen
    read, emitted_commands, result, emitted_producer = ran["sync"]
    assert (read, emitted_commands) == ([], [[True, "ResponseError", 2], [3, "3"]])
    assert [item.result for item in emitted_producer] == [7]  # follow's only item: the result
    ids, before, followed, reports, undone, spec = result
    assert (ids, before, followed.result, undone) == (["now", "later"], None, 7, True)
    assert [report.state.value for report in reports] == ["finished", "waiting", "unknown"]
    assert spec == pools["run"].spec
    assert ran["async"] == ran["sync"]
    sync_client.close()


class Runner:
    """One driver: the sync one on a sync client, or the async one on an async client."""

    def __init__(self, kind: str, sync_client: Any, client: aioredis.Redis) -> None:
        self.kind, self.sync_client, self.client = kind, sync_client, client

    async def result(self, plan: Plan[Any]) -> Any:
        if self.kind == "sync":
            return drivers.run_sync(self.sync_client, plan)
        return await drivers.run_async(self.client, plan)

    async def emitted(self, plan: Plan[Any]) -> list[Any]:
        if self.kind == "sync":
            return list(drivers.stream_sync(self.sync_client, plan))
        return [item async for item in drivers.stream_async(self.client, plan)]
