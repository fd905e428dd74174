"""The commands with an App against a real Valkey: ``tierpool submit --task NAME``, typed with the task's defaults
when the pool's handler imports and the name as it is (with ``--tier``) when it does not; ``tierpool worker``
serving an App named as the handler."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool import AsyncClient, Client
from tierpool.model.keys import PoolKeys

from .support import FAST_RECOVERY, ROOT, killed_on_exit, make_pool, running_worker, spawn_worker
from .typed_app import Dispute, Verdict, app, resolve

pytestmark = pytest.mark.redis


def _pool(name: str) -> Any:
    return make_pool(name, recovery=FAST_RECOVERY, worker={"handler": "tests.integration.typed_app:app"})


def _tierpool(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    """The CLI, run from the repository's root, where the pool's handler (tests.integration.typed_app) imports."""
    command = [sys.executable, "-m", "tierpool", *args, "--redis-url", url]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)


async def test_the_cli_submits_by_task_name_with_the_tasks_defaults(
    redis_url: str, pool_name: str, tmp_path: Path, client: aioredis.Redis
) -> None:
    pool = _pool(pool_name)
    path = tmp_path / "pool.yaml"
    path.write_text(pool.model_dump_json(by_alias=True))  # JSON is YAML
    typed = await asyncio.to_thread(
        _tierpool, "submit", "-f", str(path), "--task", "resolve", "--payload", '{"ticket": 6}', url=redis_url
    )
    bad = await asyncio.to_thread(
        _tierpool, "submit", "-f", str(path), "--task", "resolve", "--payload", '{"ticket": "x"}', url=redis_url
    )
    unknown = await asyncio.to_thread(_tierpool, "submit", "-f", str(path), "--task", "refund", url=redis_url)
    assert typed.returncode == 0, typed.stderr
    assert bad.returncode == 1 and "task 'resolve': invalid input: ticket" in bad.stderr
    assert unknown.returncode == 1 and "unknown task 'refund'" in unknown.stderr
    keys = PoolKeys.parse(pool.ref)
    [(_, fields)] = await client.xrange(keys.tier("p0"))  # resolve's default tier, and only the good one
    assert (fields["task"], fields["timeout"], fields["task_id"]) == ("resolve", "30000", typed.stdout.strip())
    async with running_worker(pool, redis_url, app), AsyncClient.from_url(redis_url, pool) as producer:
        record = await producer.wait_result(typed.stdout.strip(), timeout=10)
    assert record.result == {"refund": True, "ticket": 6}


async def test_the_cli_writes_the_name_as_it_is_with_a_tier_when_the_handler_does_not_import(
    redis_url: str, pool_name: str, tmp_path: Path, client: aioredis.Redis
) -> None:
    pool = make_pool(pool_name, worker={"handler": "not_here:app"})
    path = tmp_path / "pool.yaml"
    path.write_text(pool.model_dump_json(by_alias=True))
    tierless = await asyncio.to_thread(_tierpool, "submit", "-f", str(path), "--task", "resolve", url=redis_url)
    tiered = await asyncio.to_thread(
        _tierpool, "submit", "-f", str(path), "--task", "resolve", "-t", "p1", url=redis_url
    )
    assert tierless.returncode == 1 and "--task resolve needs --tier" in tierless.stderr
    assert "cannot import module 'not_here'" in tierless.stderr
    assert tiered.returncode == 0, tiered.stderr
    [(_, fields)] = await client.xrange(PoolKeys.parse(pool.ref).tier("p1"))
    assert fields["task"] == "resolve" and "timeout" not in fields


async def test_jsonl_lines_name_their_task(
    redis_url: str, pool_name: str, tmp_path: Path, client: aioredis.Redis
) -> None:
    pool = _pool(pool_name)
    path, lines = tmp_path / "pool.yaml", tmp_path / "tasks.jsonl"
    path.write_text(pool.model_dump_json(by_alias=True))
    lines.write_text('{"tier": "p1", "payload": {"ticket": 1}, "task": "resolve"}\n{"tier": "p1", "payload": {}}\n')
    done = await asyncio.to_thread(_tierpool, "submit", "-f", str(path), "--from-jsonl", str(lines), url=redis_url)
    assert done.returncode == 0, done.stderr
    entries = await client.xrange(PoolKeys.parse(pool.ref).tier("p1"))
    assert [fields.get("task") for _, fields in entries] == ["resolve", None]


async def test_jsonl_lines_are_checked_as_task_flags_are(
    redis_url: str, pool_name: str, tmp_path: Path, client: aioredis.Redis
) -> None:
    """A line naming an App task takes the task's defaults (its tier too), and a line with input the model
    refuses, or a task the App lacks, stops the submit before anything is written, naming the line."""
    pool = _pool(pool_name)
    path = tmp_path / "pool.yaml"
    path.write_text(pool.model_dump_json(by_alias=True))
    good, bad, unknown, tierless = (tmp_path / f"{name}.jsonl" for name in ("good", "bad", "unknown", "tierless"))
    good.write_text('{"task": "resolve", "payload": {"ticket": 5}, "task_id": "j-1"}\n')
    bad.write_text('{"task": "resolve", "payload": {"ticket": 1}}\n{"task": "resolve", "payload": {"ticket": "x"}}\n')
    unknown.write_text('{"task": "refund", "tier": "p2", "payload": {}}\n')
    tierless.write_text('{"payload": {}}\n')
    runs = [
        await asyncio.to_thread(_tierpool, "submit", "-f", str(path), "--from-jsonl", str(f), url=redis_url)
        for f in (good, bad, unknown, tierless)
    ]
    assert runs[0].returncode == 0, runs[0].stderr
    assert runs[1].returncode == 1 and f"{bad}:2: task 'resolve': invalid input: ticket" in runs[1].stderr
    assert runs[2].returncode == 1 and f"{unknown}:1: unknown task 'refund'" in runs[2].stderr
    assert runs[3].returncode == 1 and f'{tierless}:1: a line without "task" needs "tier"' in runs[3].stderr
    keys = PoolKeys.parse(pool.ref)
    [(_, fields)] = await client.xrange(keys.tier("p0"))  # resolve's default tier; nothing of the bad files
    assert (fields["task"], fields["timeout"], fields["task_id"]) == ("resolve", "30000", "j-1")
    assert [await client.xlen(keys.tier(t)) for t in ("p1", "p2")] == [0, 0]


def test_tierpool_worker_serves_an_app_named_as_the_handler(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    pool = _pool(pool_name)
    worker = spawn_worker(pool, redis_url, log=tmp_path / "worker.log")
    with killed_on_exit(worker), Client.from_url(redis_url, pool) as client:
        handle = client.submit(resolve, Dispute(ticket=10))
        assert handle.result(timeout=30) == Verdict(refund=True, ticket=10)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
