"""Spawn and gather under crashes: a ``tierpool worker`` of one slot is SIGKILLed at points around the park and
around the last child's completion, and a second one finishes the work. The parent's handler completes exactly
once, with every child's output, and each child ends with one outcome (tests/integration/fanout_app.py)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from tierpool import Client
from tierpool.model.keys import PoolKeys
from tierpool.protocol.gather import child_id

from .fanout_app import Fan, parent
from .support import FAST_RECOVERY, killed_on_exit, make_pool, spawn_worker, sync_redis, wait_until

pytestmark = pytest.mark.redis
CHILDREN = 5
Point = Callable[[redis.Redis, PoolKeys, str], bool]


def _count(client: redis.Redis, task_id: str, what: str) -> int:
    return int(client.get(f"gathertest:{task_id}:{what}") or 0)


POINTS: dict[str, Point] = {
    "while it spawns, before the park": lambda c, keys, p: _count(c, p, "started") >= 1,
    "just after the park": lambda c, keys, p: bool(c.exists(keys.parked(p))),
    "while the last child runs": lambda c, keys, p: _count(c, child_id(p, CHILDREN - 1), "ran") >= 1,
    "just after the last child's outcome": lambda c, keys, p: bool(c.exists(keys.result(child_id(p, CHILDREN - 1)))),
}


@pytest.mark.parametrize("point", POINTS.values(), ids=POINTS.keys())
def test_a_parent_completes_once_when_its_worker_is_killed(
    redis_url: str, pool_name: str, tmp_path: Path, point: Point
) -> None:
    pool = make_pool(pool_name, recovery=FAST_RECOVERY, worker={"handler": "tests.integration.fanout_app:app"})
    keys = PoolKeys.parse(pool.ref)
    client = sync_redis(redis_url)
    handle = Client(client, pool).submit(parent, Fan(n=CHILDREN, hold=0.3, settle=0.5))
    env = {"GATHER_TEST_URL": redis_url}
    first = spawn_worker(pool, redis_url, "--concurrency", "1", "--consumer", "w1", log=tmp_path / "w1.log", env=env)
    with killed_on_exit(first):
        assert wait_until(lambda: point(client, keys, handle.id), 60, interval=0.001)
        first.send_signal(signal.SIGKILL)
        first.wait()
    second = spawn_worker(pool, redis_url, "--concurrency", "1", "--consumer", "w2", log=tmp_path / "w2.log", env=env)
    with killed_on_exit(second):
        assert handle.result(timeout=60) == [n * n for n in range(CHILDREN)]
        record = handle.record(1)
    children = [child_id(handle.id, n) for n in range(CHILDREN)]
    assert record.children == children
    assert _count(client, handle.id, "finished") == 1
    assert [Client(client, pool).result(child).status for child in children] == ["succeeded"] * CHILDREN  # type: ignore[union-attr]
    assert all(_count(client, child, "ran") >= 1 for child in children)
    assert not client.keys(f"gathertest:{handle.id}.{CHILDREN}*")  # no child beyond the five
    assert (client.exists(keys.parked(handle.id)), client.zcard(keys.gathering), client.xlen(keys.dlq)) == (0, 0, 0)
