"""The task commands' exit codes on a real Valkey (one table, tierpool.cli.exits: 0 ok, 1 error, 2 usage, 3 not
found, 4 cancelled, 5 timed out, 6 dead-lettered, 7 finished already), and cancelling many tasks at once
(``Client.cancel_many``, ``tierpool cancel ID [ID ...]``)."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tierpool.client.producer import AsyncClient, Client
from tierpool.model.keys import PoolKeys
from tierpool.protocol.submission import TaskRequest
from tierpool.protocol.task_state import CancelState

from .support import killed_on_exit, make_pool, results, spawn_worker, sync_redis, wait_until
from .test_cli import tierpool

pytestmark = pytest.mark.redis
RECOVERY = {"claimIdle": "1s", "heartbeat": "200ms", "retryBackoff": "50ms", "sweepInterval": "200ms"}


def test_result_watch_and_cancel_share_one_exit_code_table(redis_url: str, pool_name: str, tmp_path: Path) -> None:
    pool = make_pool(
        pool_name, worker={"handler": "tierpool.handlers:simulate"}, recovery={**RECOVERY, "maxDeliveries": 1}
    )
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(pool.model_dump(by_alias=True, mode="json")))
    client = sync_redis(redis_url)
    producer = Client(client, pool)

    def run(*args: str) -> int:
        return tierpool(*args, "-f", str(path), url=redis_url).returncode

    producer.submit("p0", {}, task_id="ok")
    producer.submit("p0", {"fail": True}, task_id="bad")
    producer.submit("p0", {}, task_id="later", delay=3600)
    producer.submit("p0", {}, task_id="soon", delay=0.3)
    assert run("cancel") == 2  # usage
    assert run("cancel", "soon") == 0
    many = tierpool("cancel", "later", "nope", "--json", "-f", str(path), url=redis_url)
    assert many.returncode == 3, many.stderr  # the largest of 0 (later) and 3 (nope)
    lines = [json.loads(line) for line in many.stdout.splitlines()]
    assert [(line["task_id"], line["state"], line["cancelled"]) for line in lines] == [
        ("later", "waiting", True),
        ("nope", "unknown", False),
    ]
    worker = spawn_worker(pool, redis_url, log=tmp_path / "worker.log")
    with killed_on_exit(worker):
        assert wait_until(lambda: len(results(client, pool, ["ok", "bad", "soon"])) == 3, 20)
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    codes = {
        "result ok": run("result", "ok"),
        "result bad": run("result", "bad"),
        "result soon": run("result", "soon"),
        "result later": run("result", "later"),
        "result nope --wait": run("result", "nope", "--wait", "0.5"),
        "watch ok": run("watch", "ok"),
        "watch bad": run("watch", "bad"),
        "watch soon": run("watch", "soon"),
        "watch nope": run("watch", "nope", "--timeout", "0.5"),
        "cancel ok bad": run("cancel", "ok", "bad"),
        "cancel --undo later nope": run("cancel", "--undo", "later", "nope"),
    }
    assert codes == {
        "result ok": 0,
        "result bad": 6,
        "result soon": 4,
        "result later": 4,  # cancelled at once out of the due-time index (it used to wait for its due time: 3)
        "result nope --wait": 5,
        "watch ok": 0,
        "watch bad": 6,
        "watch soon": 4,
        "watch nope": 5,
        "cancel ok bad": 7,
        "cancel --undo later nope": 3,
    }


async def test_cancel_many_reports_each_task_in_a_fixed_number_of_round_trips(
    client: aioredis.Redis, redis_url: str, pool_name: str
) -> None:
    tiers = [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "tenantConcurrency": 1}]
    pool = make_pool(pool_name, tiers=tiers, recovery=RECOVERY)
    producer = AsyncClient(client, pool, pool.spec)
    keys = PoolKeys.parse(pool.ref)
    await producer.submit_many([TaskRequest("p0", {}, task_id=i) for i in ("a", "b")])
    await producer.submit("p0", {}, task_id="d", delay=600)
    await producer.submit_many([TaskRequest("p1", {}, task_id=i, tenant="acme") for i in ("g", "h")])  # h held
    await client.set(keys.result("f"), json.dumps({"task_id": "f", "status": "succeeded"}))
    pipelines = _count_pipelines(client)
    reports = await producer.cancel_many(["a", "b", "d", "g", "h", "x", "f", "a"])
    assert [(r.task_id, r.state) for r in reports] == [
        ("a", CancelState.WAITING),
        ("b", CancelState.WAITING),
        ("d", CancelState.WAITING),
        ("g", CancelState.WAITING),
        ("h", CancelState.WAITING),
        ("x", CancelState.UNKNOWN),
        ("f", CancelState.FINISHED),
        ("a", CancelState.WAITING),
    ]
    assert [await client.exists(keys.cancel(i)) for i in "abdghxf"] == [1, 1, 1, 1, 1, 0, 0]
    assert await client.pttl(keys.cancel("d")) > 600_000  # outlives its due time
    many = pipelines[0]
    await producer.cancel_many([f"none-{i}" for i in range(200)])
    assert pipelines[0] - many == many, "round trips grew with the number of tasks"
    sync = Client(sync_redis(redis_url), pool)
    assert [r.state for r in sync.cancel_many(["b", "x"])] == [CancelState.WAITING, CancelState.UNKNOWN]
    assert sync.cancel("f").state is CancelState.FINISHED


def _count_pipelines(client: aioredis.Redis) -> list[int]:
    """Counts the pipelines the client executes (each is one round trip)."""
    count = [0]
    make = client.pipeline

    def counted(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return make(*args, **kwargs)

    client.pipeline = counted  # type: ignore[method-assign]
    return count
