"""The tierpool CLI against a real Valkey: submit, status --json, result, dlq list/replay/purge, validate."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tierpool.cli.main import main
from tierpool.client.producer import Client
from tierpool.model.keys import PoolKeys

from .support import ROOT, make_pool, sync_redis

pytestmark = pytest.mark.redis


def tierpool(*args: str, url: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tierpool", *args, *(["--redis-url", url] if url else [])]
    return subprocess.run(command, capture_output=True, text=True, input=stdin, timeout=120)


@pytest.fixture
def pool_file(tmp_path: Path, pool_name: str) -> Path:
    path = tmp_path / "pool.yaml"
    path.write_text(
        f"apiVersion: tierpool.io/v1alpha1\nkind: AgentPool\nmetadata: {{name: {pool_name}, namespace: cli}}\n"
        "spec:\n  tiers:\n  - {name: p0, weight: 3, sla: 30s}\n  - {name: p1, weight: 1}\n"
    )
    return path


def test_submit_from_jsonl_pipelines_ten_thousand(redis_url: str, pool_file: Path, tmp_path: Path) -> None:
    lines = tmp_path / "tasks.jsonl"
    lines.write_text(
        "".join(json.dumps({"tier": "p0" if i % 4 else "p1", "payload": {"i": i}}) + "\n" for i in range(10_000))
    )
    done = tierpool("submit", "-f", str(pool_file), "--from-jsonl", str(lines), url=redis_url)
    assert done.returncode == 0, done.stderr
    assert "submitted 10000 task(s)" in done.stdout
    status = tierpool("status", "-f", str(pool_file), "--json", url=redis_url)
    body = json.loads(status.stdout)
    assert [t["name"] for t in body["tiers"]] == ["p0", "p1"]
    assert body["tiers"][0]["length"] == 7_500 and body["tiers"][1]["length"] == 2_500
    assert set(body["tiers"][0]) >= {"name", "length", "lag", "pending", "oldest_age_seconds", "consumers"}
    assert body["dlq"] == 0
    assert body["tiers"][0]["exists"] is False  # no worker has created the group yet


def test_submit_refuses_bad_input_and_writes_nothing(redis_url: str, pool_file: Path, tmp_path: Path) -> None:
    bad_tier = tierpool("submit", "-f", str(pool_file), "--tier", "p7", "--payload", "{}", url=redis_url)
    assert bad_tier.returncode == 1 and "unknown tier 'p7'" in bad_tier.stderr
    bad_json = tierpool("submit", "-f", str(pool_file), "--tier", "p0", "--payload", "{nope", url=redis_url)
    assert bad_json.returncode == 1 and "--payload is not JSON" in bad_json.stderr
    lines = tmp_path / "mixed.jsonl"
    lines.write_text('{"tier": "p0", "payload": {}}\n{"tier": "nope", "payload": {}}\n')
    mixed = tierpool("submit", "-f", str(pool_file), "--from-jsonl", str(lines), url=redis_url)
    assert mixed.returncode == 1 and "unknown tier 'nope'" in mixed.stderr
    keys = PoolKeys("cli", pool_file.read_text().split("name: ")[1].split(",")[0])
    assert sync_redis(redis_url).exists(keys.tier("p0")) == 0  # nothing half-written


def test_submit_timeout_is_carried_in_the_envelope(redis_url: str, pool_file: Path) -> None:
    done = tierpool("submit", "-f", str(pool_file), "--tier", "p0", "--timeout", "2m30s", url=redis_url)
    assert done.returncode == 0, done.stderr
    keys = PoolKeys("cli", pool_file.read_text().split("name: ")[1].split(",")[0])
    [(_, fields)] = sync_redis(redis_url).xrange(keys.tier("p0"))
    assert fields["task_id"] == done.stdout.strip() and fields["timeout"] == "150000"
    bad = tierpool("submit", "-f", str(pool_file), "--tier", "p0", "--timeout", "soon", url=redis_url)
    assert bad.returncode == 2 and "'soon' is not a duration" in bad.stderr  # a usage error, as argparse's
    zero = tierpool("submit", "-f", str(pool_file), "--tier", "p0", "--timeout", "0s", url=redis_url)
    assert zero.returncode == 1 and "timeout must be" in zero.stderr
    assert sync_redis(redis_url).xlen(keys.tier("p0")) == 1


def test_dlq_list_replay_purge(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    pool = make_pool(pool_name)
    client = sync_redis(redis_url)
    keys = PoolKeys.parse(pool.ref)
    for task_id in ("a", "b", "c"):
        client.xadd(
            keys.dlq,
            {
                "timeout": "250",  # protocol 3: the task's own time limit, kept by replay
                "task_id": task_id,
                "tier": "p1",
                "payload": json.dumps({"ticket": task_id}),
                "created_at": "5",
                "reason": "exceeded maxDeliveries (5)",
                "error": "boom",
                "deliveries": "5",
                "source_tier": "p1",
            },
        )
    client.xadd(keys.dlq, {"garbage": "1", "reason": "bad envelope"})
    path = tmp_path / "pool.yaml"
    path.write_text(pool.model_dump_json(by_alias=True))
    listed = json.loads(tierpool("dlq", "list", "-f", str(path), "--json", url=redis_url).stdout)
    assert [item["task_id"] for item in listed] == ["a", "b", "c", ""]
    assert listed[0]["payload"] == {"ticket": "a"}  # the JSON the payload holds, not a string of it
    replay = tierpool("dlq", "replay", "-f", str(path), listed[0]["id"], url=redis_url)
    assert replay.returncode == 0 and "replayed 1" in replay.stdout
    [(_, fields)] = client.xrange(keys.tier("p1"))
    assert fields["task_id"] == "a" and fields["created_at"] == "5" and fields["timeout"] == "250"
    to_p0 = tierpool("dlq", "replay", "-f", str(path), listed[1]["id"], "--tier", "p0", url=redis_url)
    assert to_p0.returncode == 0 and client.xlen(keys.tier("p0")) == 1
    garbage = tierpool("dlq", "replay", "-f", str(path), listed[3]["id"], url=redis_url)
    assert garbage.returncode == 1 and "not a task envelope" in garbage.stderr
    purge = tierpool("dlq", "purge", "-f", str(path), "--yes", url=redis_url)
    assert "purged 2" in purge.stdout and client.xlen(keys.dlq) == 0


def test_pool_by_reference_needs_a_published_spec(redis_url: str, pool_name: str) -> None:
    done = tierpool("status", "--pool", f"nowhere/{pool_name}", url=redis_url)
    assert done.returncode == 1 and "not known in this Redis" in done.stderr
    said = " ".join(done.stderr.split())  # however the console wraps it
    assert (
        "Pass the AgentPool itself" in said and f"pass --file pool.yaml instead of --pool nowhere/{pool_name}" in said
    )
    pool = make_pool(pool_name)
    client = sync_redis(redis_url)
    client.set(f"tierpool:{{{pool.ref}}}:spec", pool.spec.model_dump_json(by_alias=True))
    assert tierpool("status", "--pool", pool.ref, url=redis_url).returncode == 0
    producer = Client(client, pool.ref)
    assert producer.spec == pool.spec


def test_validate(tmp_path: Path) -> None:
    good = ROOT / "examples" / "minimal.yaml"
    done = tierpool("validate", str(good), url="")
    assert done.returncode == 0 and "ok: pool tierpool-system/minimal" in done.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: tierpool.io/v1alpha1\nkind: AgentPool\nmetadata: {name: b}\nspec:\n"
        "  tiers: [{name: p0, weight: 1, escalateAfter: 5m}]\n  colour: blue\n"
    )
    done = tierpool("validate", str(bad), url="")
    assert done.returncode == 1
    assert "spec.colour: unknown field" in done.stdout


def test_status_counts_tasks_submitted_before_any_worker(redis_url: str, pool_name: str) -> None:
    """A pool at zero must still see its first tasks (the group does not exist yet), or it never wakes."""
    import asyncio

    import redis.asyncio as aioredis

    from tierpool.store.observe import observe

    pool = make_pool(pool_name)
    Client(sync_redis(redis_url), pool).submit_many([__import__("tierpool").TaskRequest("p1", {}) for _ in range(7)])

    async def look() -> object:
        client = aioredis.Redis.from_url(redis_url, decode_responses=True)
        try:
            return await observe(client, PoolKeys.parse(pool.ref), ["p0", "p1", "p2"])
        finally:
            await client.aclose()

    obs = asyncio.run(look())
    p0, p1, _ = obs.tiers  # type: ignore[attr-defined]
    assert (p0.exists, p0.backlog) == (False, 0)
    assert (p1.exists, p1.backlog, p1.pending) == (False, 7, 0)
    assert p1.oldest_age_seconds >= 0


def test_the_pool_files_redis_url_is_used_and_flag_and_environment_override_it(
    redis_url: str, tmp_path: Path, pool_name: str
) -> None:
    """`--file` with `spec.redis.url`: that Redis is used. `--redis-url`, then TIERPOOL_REDIS_URL, win over it."""
    import os

    def pool_file(url: str) -> Path:
        path = tmp_path / f"pool-{abs(hash(url))}.yaml"
        path.write_text(
            f"apiVersion: tierpool.io/v1alpha1\nkind: AgentPool\nmetadata: {{name: {pool_name}, namespace: cli}}\n"
            f"spec:\n  redis: {{url: '{url}'}}\n  tiers:\n  - {{name: p0, weight: 1}}\n"
        )
        return path

    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERPOOL_REDIS")}
    unreachable = "redis://127.0.0.1:1/0"

    def run(*args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tierpool", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env={**env, **(extra_env or {})})

    from_file = run("submit", "-f", str(pool_file(redis_url)), "--tier", "p0", "--task-id", "via-file")
    assert from_file.returncode == 0, from_file.stderr
    bad_file = str(pool_file(unreachable))
    from_flag = run("submit", "-f", bad_file, "--tier", "p0", "--task-id", "via-flag", "--redis-url", redis_url)
    assert from_flag.returncode == 0, from_flag.stderr
    from_env = run(
        "submit", "-f", bad_file, "--tier", "p0", "--task-id", "via-env", extra_env={"TIERPOOL_REDIS_URL": redis_url}
    )
    assert from_env.returncode == 0, from_env.stderr
    stream = PoolKeys("cli", pool_name).tier("p0")
    assert sorted(f["task_id"] for _, f in sync_redis(redis_url).xrange(stream)) == ["via-env", "via-file", "via-flag"]
    status = run("status", "-f", str(pool_file(redis_url)), "--json")
    assert status.returncode == 0 and json.loads(status.stdout)["tiers"][0]["length"] == 3


class _Terminal(io.StringIO):
    """A stdin that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_dlq_purge_asks_first_and_refuses_without_a_terminal(
    redis_url: str, pool_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pool = make_pool(pool_name)
    client = sync_redis(redis_url)
    keys = PoolKeys.parse(pool.ref)
    for task_id in ("a", "b"):
        client.xadd(keys.dlq, {"task_id": task_id, "tier": "p1", "payload": "{}", "reason": "boom"})
    path = tmp_path / "pool.yaml"
    path.write_text(pool.model_dump_json(by_alias=True))
    refused = subprocess.run(
        [sys.executable, "-m", "tierpool", "dlq", "purge", "-f", str(path), "--redis-url", redis_url],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "pass --yes" in refused.stderr and client.xlen(keys.dlq) == 2
    argv = ["dlq", "purge", "-f", str(path), "--redis-url", redis_url]
    monkeypatch.setattr(sys, "stdin", _Terminal("n\n"))
    assert main(argv) == 1 and client.xlen(keys.dlq) == 2
    assert "delete all 2 dead letter(s) of " in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", _Terminal("y\n"))
    assert main(argv) == 0 and client.xlen(keys.dlq) == 0
    assert "purged 2 dead letter(s)" in capsys.readouterr().out
