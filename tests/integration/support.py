"""Helpers for integration tests: pools, in-process workers, worker subprocesses, a counting handler."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from tierpool.model.keys import PoolKeys
from tierpool.model.resource import AgentPool, parse_pool
from tierpool.protocol.envelope import Task
from tierpool.runtime.handler_loading import Handler
from tierpool.runtime.metrics import WorkerMetrics
from tierpool.runtime.settings import WorkerSettings
from tierpool.runtime.worker import TaskStarter, Worker, start_task
from tierpool.store.connection import RedisSettings

ROOT = Path(__file__).resolve().parents[2]
TIERS = [
    {"name": "p0", "weight": 70, "sla": "30s"},
    {"name": "p1", "weight": 25, "sla": "5m"},
    {"name": "p2", "weight": 5},
]


FAST_RECOVERY = {"claimIdle": "1s", "heartbeat": "200ms", "retryBackoff": "50ms", "sweepInterval": "200ms"}
"""Recovery settings that let reclaim, heartbeats and retries happen within a test's patience."""


def make_pool(name: str, **spec: Any) -> AgentPool:
    document = {"tiers": TIERS, **spec}
    return parse_pool(
        {
            "apiVersion": "tierpool.io/v1alpha1",
            "kind": "AgentPool",
            "metadata": {"name": name, "namespace": "test"},
            "spec": document,
        }
    )


def pool_env(pool: AgentPool, redis_url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "TIERPOOL_REDIS_URL": redis_url,
            "TIERPOOL_POOL_SPEC": pool.model_dump_json(by_alias=True),
            "TEST_POOL": pool.metadata.name,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), env.get("PYTHONPATH", "")]),
        }
    )
    return env


def spawn_worker(
    pool: AgentPool, redis_url: str, *extra: str, log: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``tierpool worker`` as a process; ``env`` adds to (and overrides) the pool's environment."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(
        [sys.executable, "-m", "tierpool", "worker", "--metrics-port", "0", *extra],
        env={**pool_env(pool, redis_url), **(env or {})},
        stdout=out,
        stderr=subprocess.STDOUT,
    )


@contextlib.asynccontextmanager
async def running_worker(
    pool: AgentPool,
    redis_url: str,
    handler: Handler,
    concurrency: int = 8,
    consumer: str = "w1",
    start: TaskStarter = start_task,
    monotonic: Callable[[], float] = time.monotonic,
    **kw: Any,
) -> AsyncIterator[Worker]:
    """An in-process worker on the running loop, with a client made as ``tierpool worker`` makes its own (the
    same decoding: see RedisSettings.client_kwargs); stopped (drained) on exit."""
    redis_settings = RedisSettings(url=redis_url)
    client = aioredis.Redis.from_url(redis_url, **redis_settings.client_kwargs())
    settings = WorkerSettings(
        pool=pool,
        redis=redis_settings,
        handler="test",
        concurrency=concurrency,
        consumer=consumer,
        grace_seconds=kw.pop("grace", 10.0),
        **kw,
    )
    worker = Worker(settings, handler, client, WorkerMetrics(CollectorRegistry()), start=start, monotonic=monotonic)
    task = asyncio.create_task(worker.run())
    for _ in range(200):
        if worker.ready or task.done():
            break
        await asyncio.sleep(0.01)
    try:
        yield worker
    finally:
        worker.request_stop()
        await asyncio.wait_for(task, 30)
        await client.aclose()


def sync_redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def wait_until(check: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval)
    return check()


def wait_ready(
    check: Callable[[], bool],
    timeout: float,
    what: str,
    not_yet: tuple[type[BaseException], ...] = (redis.RedisError,),
    interval: float = 0.05,
) -> None:
    """Wait until ``check()`` holds, a ``not_yet`` error counting as not yet (a server still starting); raise
    TimeoutError naming ``what`` when it does not hold within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(*not_yet):
            if check():
                return
        time.sleep(interval)
    raise TimeoutError(f"{what} within {timeout:g}s")


async def async_wait_until(check: Callable[[], Any], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return True
        await asyncio.sleep(interval)
    return bool(await check())


def results(client: redis.Redis, pool: AgentPool, task_ids: list[str]) -> dict[str, dict[str, Any]]:
    prefix = f"tierpool:{{{pool.ref}}}:result:"
    found: dict[str, dict[str, Any]] = {}
    for start in range(0, len(task_ids), 1000):
        chunk = task_ids[start : start + 1000]
        for task_id, raw in zip(chunk, client.mget([prefix + t for t in chunk]), strict=True):
            if raw:
                found[task_id] = json.loads(raw)
    return found


class Recorder:
    """An async handler that records every execution in memory and can be told to block or fail."""

    def __init__(self, work: float = 0.0) -> None:
        self.calls: list[Task] = []
        self.work = work

    async def __call__(self, task: Task) -> Any:
        self.calls.append(task)
        payload = task.payload if isinstance(task.payload, dict) else {}
        if payload.get("fail"):
            raise RuntimeError(f"boom on attempt {task.attempt}")
        await asyncio.sleep(float(payload.get("work_s", self.work)))
        return {"seen": task.id}

    def count(self, task_id: str) -> int:
        return sum(1 for call in self.calls if call.id == task_id)


@contextlib.contextmanager
def killed_on_exit(*processes: subprocess.Popen[bytes]) -> Iterator[None]:
    try:
        yield
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


async def occupancy(client: aioredis.Redis, keys: PoolKeys, tier: str) -> tuple[dict[str, str], int, int]:
    """(slots each tenant occupies, entries occupying them, held tasks) of a tier with ``tenantConcurrency``: a
    tenant occupies its admitted entries (a worker took them) and its queued ones (a producer's gate put them in
    the stream)."""
    tenants: Counter[str] = Counter({t: int(n) for t, n in (await client.hgetall(keys.tenants(tier))).items()})
    queued = [member.split("\0")[0] for member in await client.zrange(keys.queued(tier), 0, -1)]
    tenants.update(queued)
    entries = int(await client.hlen(keys.admitted(tier))) + len(queued)
    return {t: str(n) for t, n in tenants.items() if n}, entries, int(await client.zcard(keys.held(tier)))
