"""Every protocol script declares every key it touches (but for a key it only reads, named in its ARGV: see
:func:`read_by_argv_name`), and every key carries the pool's hash tag.

Redis Cluster routes a script by its declared keys, and a key a script reaches without declaring it may live on
another shard. The server is watched with MONITOR (it shows the commands a script runs, as client ``lua``) while
a workload drives every script through the real worker, client, maintenance and DLQ code; the server's own
``COMMAND GETKEYS`` names the keys of each command. A script that no part of the workload ran fails the test, so
a new script must be added to the workload.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from tierpool import scripts
from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import GROUP
from tierpool.protocol.dispatch import TakePlan
from tierpool.protocol.envelope import Task
from tierpool.protocol.errors import NonRetryable, RetryAfter
from tierpool.runtime.maintenance import Maintainer
from tierpool.runtime.reads import Reads
from tierpool.store import dlq
from tierpool.store.streams import PoolStreams

from . import fanout_app
from .support import async_wait_until, make_pool, running_worker

pytestmark = pytest.mark.redis
STOP = "tierpool-test-monitor-stop"
DEFERRED: set[str] = set()
ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


def script_names() -> dict[str, str]:
    """sha1 -> name of every protocol script (every .lua file of tierpool.scripts but its helpers)."""
    found = scripts.by_name()
    assert len(found) > 20 and "TAKE" in found and "CANCEL" in found, sorted(found)
    return {script.sha: name for name, script in found.items()}


def unescape(text: str) -> str:
    return text.encode("latin-1", "backslashreplace").decode("unicode_escape")


@dataclass
class Call:
    script: str
    declared: list[str]
    args: list[str] = field(default_factory=list)
    inner: list[list[str]] = field(default_factory=list)


@dataclass
class Watch:
    """MONITOR on a thread: script calls with the commands each one ran."""

    url: str
    calls: list[Call] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=script_names)
    ready: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        connection = redis.Redis.from_url(self.url)
        with connection.monitor() as monitor:
            self.ready.set()
            while True:
                line = monitor.connection.read_response()
                text = line.decode() if isinstance(line, bytes) else str(line)
                argv = [unescape(arg) for arg in ARG.findall(text)]
                if not argv:
                    continue
                if argv[0].upper() == "ECHO" and argv[1:] == [STOP]:
                    return
                if "[0 lua]" in text and self.calls:
                    self.calls[-1].inner.append(argv)
                elif argv[0].upper() in {"EVAL", "EVALSHA"}:
                    sha = argv[1] if argv[0].upper() == "EVALSHA" else scripts.sha1_hex(argv[1])
                    count = int(argv[2])
                    name = self.names.get(sha, f"unknown script {sha}")
                    self.calls.append(Call(name, argv[3 : 3 + count], argv[3 + count :]))


@pytest.fixture
def watch(redis_url: str) -> Iterator[Watch]:
    found = Watch(redis_url)
    thread = threading.Thread(target=found.run, daemon=True)
    thread.start()
    assert found.ready.wait(5)
    yield found
    redis.Redis.from_url(redis_url).echo(STOP)
    thread.join(10)


async def handler(task: Task) -> Any:
    mode = task.payload.get("mode") if isinstance(task.payload, dict) else None
    if mode == "fail":
        raise RuntimeError("fails every time")
    if mode == "refuse":
        raise NonRetryable("context too long")
    if mode == "defer" and task.attempt == 1 and task.checkpoint_state is None:
        await task.checkpoint({"deferred": True})
        raise RetryAfter(0.2, "429")
    if mode == "later" and task.id not in DEFERRED:  # a deferral does not count as an attempt
        DEFERRED.add(task.id)
        raise RetryAfter(1.5, "503, retry in 1.5 s")  # longer than claimIdle: through the due-time index
    if mode == "slow":
        await task.progress({"step": 1})
        await asyncio.sleep(float(task.payload.get("seconds", 0.6)))
    return {"ok": True}


async def workload(redis_url: str, pool_name: str, client: aioredis.Redis) -> None:
    tiers = [
        {"name": "p0", "weight": 70, "sla": "30s"},
        {"name": "p1", "weight": 25, "sla": "5m", "escalateAfter": "1s"},
        {"name": "p2", "weight": 5},
    ]
    recovery = {"claimIdle": "1s", "heartbeat": "200ms", "retryBackoff": "50ms", "sweepInterval": "200ms"}
    limits = [{"name": "provider", "perMinute": 60}]
    pool = make_pool(pool_name, tiers=tiers, recovery={**recovery, "maxDeliveries": 2}, rateLimits=limits)
    producer = AsyncClient(client, pool, pool.spec)
    keys = producer.keys
    await producer.submit("p1", {}, task_id="stale")  # waits past escalateAfter before any worker runs
    orphan = await producer.submit("p2", {})
    await client.xgroup_create(keys.tier("p2"), GROUP, id="0", mkstream=True)
    await client.xreadgroup(GROUP, "ghost", {keys.tier("p2"): ">"}, count=1)  # a dead consumer's entry
    await producer.submit("p0", {}, task_id="doomed")
    await producer.cancel("doomed")  # waiting: cancelled at take time
    await producer.cancel(await producer.submit("p1", {}, delay=60))  # in the due-time index: cancelled at once
    await asyncio.sleep(1.2)
    streams = PoolStreams(client, keys, pool.spec.tier_names)
    await streams.load_scripts()
    await streams.ensure_groups()
    assert await Maintainer(streams, pool.spec, "m1").escalate_all() == {"p1": 1}
    ids = [await producer.submit("p0", {"mode": mode}) for mode in ("ok", "fail", "refuse", "defer")]
    ids.append(await producer.submit("p0", {"mode": "later"}))
    ids.append(await producer.submit("p1", {}, delay=0.3))
    ids += [await producer.submit("p1", {}, rate_limit="provider") for _ in range(3)]  # 1/s: two are throttled
    slow = await producer.submit("p0", {"mode": "slow", "seconds": 5})
    async with running_worker(pool, redis_url, handler, concurrency=8):
        await async_wait_until(lambda: client.exists(keys.result(slow), keys.events(slow)), 5)
        await asyncio.sleep(0.3)
        await producer.cancel(slow)  # running: stopped by the heartbeat's check
        for task_id in [*ids, orphan, "stale", slow, "doomed"]:
            await producer.wait_result(task_id, 15)
        dead = await dlq.list_dead(client, keys)
        await dlq.replay(client, keys, [dead[0].id], None, pool.spec.tier_names)
        await asyncio.sleep(1.0)  # the sweep trims and removes dead consumers
    await tenant_workload(redis_url, f"{pool_name}-t", client, recovery)
    await hand_back_workload(redis_url, streams, pool)
    await preempt_workload(redis_url, f"{pool_name}-p", client, recovery)
    await gather_workload(redis_url, f"{pool_name}-g", client, recovery)


async def gather_workload(redis_url: str, name: str, client: aioredis.Redis, recovery: dict[str, Any]) -> None:
    """PARK and GATHERED (and the worker's SUBMIT_ONCE for its children): a parent gathers on a worker of one slot."""
    pool = make_pool(name, recovery=recovery, worker={"handler": "tests.integration.fanout_app:app"})
    producer = AsyncClient(client, pool, pool.spec)
    async with running_worker(pool, redis_url, fanout_app.app, concurrency=1):
        handle = await producer.submit(fanout_app.parent, fanout_app.Fan(n=2))
        assert await handle.result(timeout=15) == [0, 1]


async def preempt_workload(redis_url: str, name: str, client: aioredis.Redis, recovery: dict[str, Any]) -> None:
    """PREEMPT: a slow preemptible p1 run on a worker of one slot gives way to a p0 task."""
    tiers = [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "preemptible": True, "preemptAfter": "100ms"}]
    pool = make_pool(name, tiers=tiers, recovery=recovery)
    producer = AsyncClient(client, pool, pool.spec)
    slow = await producer.submit("p1", {"mode": "slow", "seconds": 1.0})
    async with running_worker(pool, redis_url, handler, concurrency=1) as worker:
        await async_wait_until(lambda: client.exists(producer.keys.events(slow)), 5)
        await asyncio.sleep(0.3)
        quick = await producer.submit("p0", {})
        for task_id in (quick, slow):
            await producer.wait_result(task_id, 15)
        assert worker.series[1].preempted.value == 1


async def hand_back_workload(redis_url: str, streams: PoolStreams, pool: Any) -> None:
    """HAND_BACK: an entry delivered to a blocked read as the worker stops (a sync submit holds the loop)."""
    stop = asyncio.Event()
    reads = Reads(streams, "w-stop", 1_000, stop)
    read = asyncio.create_task(reads.wait_for_work(TakePlan((1, 1, 1), (1, 1, 1)), 5_000, asyncio.Event()))
    await asyncio.sleep(0.3)
    Client(redis.Redis.from_url(redis_url, decode_responses=True), pool).submit("p2", {})
    stop.set()
    assert await read == [] and reads.handed_back == 1
    await reads.close()


async def tenant_workload(redis_url: str, name: str, client: aioredis.Redis, recovery: dict[str, Any]) -> None:
    """Protocols 6 and 7 on their own pool: tenant limits with a rate limit, delays and long retries, and a
    scheduled task for a tier the pool does not have."""
    tiers = [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "tenantConcurrency": 1}]
    limits = [{"name": "provider", "perMinute": 60}]
    pool = make_pool(name, tiers=tiers, recovery={**recovery, "maxDeliveries": 2}, rateLimits=limits)
    producer = AsyncClient(client, pool, pool.spec)
    ids = [await producer.submit("p1", {}, tenant="acme") for _ in range(2)]  # one admitted, one held
    await producer.cancel(await producer.submit("p1", {}, tenant="acme"))  # held: cancelled at once
    ids.append(await producer.submit("p1", {"mode": "refuse"}, tenant="acme"))
    ids.append(await producer.submit("p1", {}, tenant="acme", delay=0.2))  # gated SCHEDULE, then MOVE_DUE's gate
    ids += [await producer.submit("p1", {}, tenant="beta", rate_limit="provider") for _ in range(2)]  # throttled
    ids.append(await producer.submit("p1", {"mode": "later"}, tenant="gamma"))  # RESCHEDULE, then the gate
    await client.zadd(producer.keys.due, {json.dumps(["gone", ["task_id", "x"]]): 0})  # stranded
    direct = {"task_id": "direct", "tier": "p1", "payload": "{}", "created_at": "1", "tenant": "acme"}
    await client.xadd(producer.keys.tier("p1"), direct)  # past the gate: ADMIT_ENTRIES holds or admits it
    ids.append("direct")
    async with running_worker(pool, redis_url, handler, concurrency=4):
        for task_id in ids:
            await producer.wait_result(task_id, 15)
        dead = await dlq.list_dead(client, producer.keys)
        names, limits_of = pool.spec.tier_names, pool.spec.tenant_limits
        await dlq.replay(client, producer.keys, [dead[0].id], None, names, limits_of)  # through the gate
        await asyncio.sleep(1.0)  # the sweep repairs the counts


READ_BY_ARGV_NAME = {"SUBMIT_GATED", "REPLAY_GATED"}


def read_by_argv_name(server: redis.Redis, call: Call, command: str, key: str, tag: str) -> bool:
    """The one exception: the tenant gate's producer side reads the tenant counts by a name in its ARGV, with the
    pool's hash tag (so one slot), because a key in KEYS needs write access and a producer may only read them
    (helpers/tenants.lua)."""
    if call.script not in READ_BY_ARGV_NAME or ":tenants:" not in key:
        return False
    (info,) = server.execute_command("COMMAND", "INFO", command).values()  # redis-py parses it by name
    return key in call.args and key.startswith(tag) and "readonly" in info["flags"]


async def test_every_script_declares_its_keys_under_the_pool_hash_tag(
    redis_url: str, pool_name: str, client: aioredis.Redis, watch: Watch, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATHER_TEST_URL", redis_url)
    await workload(redis_url, pool_name, client)
    redis.Redis.from_url(redis_url).echo(STOP)
    await asyncio.sleep(0.5)
    server = redis.Redis.from_url(redis_url, decode_responses=True)
    tags = tuple(f"tierpool:{{test/{pool_name}{suffix}}}:" for suffix in ("", "-t", "-p", "-g"))
    undeclared, untagged = set(), set()
    for call in watch.calls:
        tag = next((tag for tag in tags if call.declared and call.declared[0].startswith(tag)), tags[0])
        untagged |= {(call.script, key) for key in call.declared if not key.startswith(tag)}
        for argv in call.inner:
            try:
                touched = server.command_getkeys(*argv)
            except redis.ResponseError:  # a command without keys (TIME, ...)
                continue
            undeclared |= {
                (call.script, argv[0], key)
                for key in touched
                if key not in call.declared and not read_by_argv_name(server, call, argv[0], key, tag)
            }
    assert not [call.script for call in watch.calls if call.script.startswith("unknown")]
    assert not untagged, untagged
    assert not undeclared, undeclared
    ran = {call.script for call in watch.calls}
    missing = set(watch.names.values()) - ran
    assert not missing, f"scripts the workload never ran (add them to it): {sorted(missing)}"
