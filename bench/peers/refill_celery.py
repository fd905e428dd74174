"""Celery's side of bench/refill.py (run from .venv-peers): the app, its one task, and a producer.

Worker:    celery -A refill_celery worker --pool prefork|threads --concurrency 8   (PYTHONPATH=bench:bench/peers)
Producer:  python -m refill_celery backlog COUNT WORK_MS | p0 SEED INTERVAL SECONDS WORK_MS

The Redis broker with priorities of bench/peers/celery_priority.py: lower-tier tasks are sent at 9, P0 at 0. No
result backend.
"""

from __future__ import annotations

import json
import os
import sys
import time

from celery_priority import HIGHEST, LOWEST, priority_app

from refill_tasks import poisson, record

URL = os.environ.get("REFILL_BENCH_REDIS_URL", "redis://localhost:6379/0")
app = priority_app("refill", URL, task_ignore_result=True)


@app.task(name="refill.work")
def work(kind: str, sent: float, work_ms: float) -> None:
    started = time.time()
    time.sleep(work_ms / 1000)
    record(kind, sent, started, time.time())


def main() -> None:
    mode, *rest = sys.argv[1:]
    with app.producer_or_acquire() as producer:
        if mode == "backlog":
            count, work_ms = int(rest[0]), float(rest[1])
            for _ in range(count):
                work.apply_async(("p2", time.time(), work_ms), priority=LOWEST, producer=producer)
            print(json.dumps({"sent": count}))
        elif mode == "p0":
            seed, interval, seconds, work_ms = int(rest[0]), float(rest[1]), float(rest[2]), float(rest[3])

            def send(sent: float) -> None:
                work.apply_async(("p0", sent, work_ms), priority=HIGHEST, producer=producer)

            start, end, sent = poisson(send, seed, interval, seconds)
            print(json.dumps({"start": start, "end": end, "sent": sent}))
        else:
            raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
