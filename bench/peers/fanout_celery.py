"""Celery's side of bench/fanout.py (run from .venv-peers): a P0 parent that fans out to children as a chord.

Worker:    celery -A fanout_celery worker --pool threads --concurrency 8   (PYTHONPATH=bench/peers)
Producer:  python -m fanout_celery BACKLOG CHILDREN LEAF_MS

The Redis broker with priorities as bench/peers/celery_priority.py sets them up (0 the highest), a Redis result
backend (a chord needs one), and ``task_inherit_parent_priority``, so the children the parent sends run at its
priority. The parent sends ``chord(leaf × CHILDREN)(done)`` and returns: it holds no slot while they run; ``done``
marks the end. The producer sends the backlog (priority 9) and then the parent (priority 0), waits for ``done``,
and prints the time from the parent's send and the backlog done by then, as JSON.
"""

from __future__ import annotations

import json
import os
import sys
import time

import redis
from celery import chord
from celery_priority import HIGHEST, LOWEST, priority_app

URL = os.environ.get("FANOUT_BENCH_REDIS_URL", "redis://localhost:6379/0")
app = priority_app("fanout", URL, backend=URL, task_inherit_parent_priority=True)
DONE, BACKLOG_DONE = "fanout-bench:done", "fanout-bench:backlog-done"


@app.task(name="fanout.leaf")
def leaf(work_ms: float, backlog: bool = False) -> int:
    time.sleep(work_ms / 1000)
    if backlog:
        redis.Redis.from_url(URL).incr(BACKLOG_DONE)
    return 1


@app.task(name="fanout.done")
def done(results: list[int]) -> int:
    client = redis.Redis.from_url(URL)
    client.set(DONE, json.dumps({"at": time.time(), "backlog_done": int(client.get(BACKLOG_DONE) or 0)}))
    return sum(results)


@app.task(name="fanout.parent")
def parent(children: int, work_ms: float) -> None:
    chord(leaf.s(work_ms) for _ in range(children))(done.s())


def main() -> None:
    backlog, children, work_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    client = redis.Redis.from_url(URL)
    with app.producer_or_acquire() as producer:
        for _ in range(backlog):
            leaf.apply_async((work_ms, True), priority=LOWEST, producer=producer)
        sent = time.time()
        parent.apply_async((children, work_ms), priority=HIGHEST, producer=producer)
    while not client.exists(DONE):
        time.sleep(0.005)
    finished = json.loads(client.get(DONE) or "{}")
    print(json.dumps({"seconds": finished["at"] - sent, "backlog_done": finished["backlog_done"]}))


if __name__ == "__main__":
    main()
