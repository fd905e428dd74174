"""Celery's side of bench/refill.py (run from .venv-peers): the app, its one task, and a producer.

Worker:    celery -A refill_celery worker --pool prefork|threads --concurrency 8   (PYTHONPATH=bench:bench/peers)
Producer:  python -m refill_celery backlog COUNT WORK_MS | p0 SEED INTERVAL SECONDS WORK_MS

The Redis broker with priorities as its docs set them up: ``priority_steps`` 0-9 (one list per step) and the
``priority`` queue order, so BRPOP always names the step-0 list first. For the Redis transport 0 is the highest
priority: lower-tier tasks are sent at 9, P0 at 0. ``worker_prefetch_multiplier=1`` and ``task_acks_late`` keep a
worker from holding more than one task a slot. No result backend.
"""

from __future__ import annotations

import json
import os
import sys
import time

from celery import Celery

from refill_tasks import poisson, record

app = Celery("refill", broker=os.environ.get("REFILL_BENCH_REDIS_URL", "redis://localhost:6379/0"))
app.conf.update(
    broker_transport_options={"priority_steps": list(range(10)), "queue_order_strategy": "priority"},
    broker_connection_retry_on_startup=True,
    worker_prefetch_multiplier=1,
    task_acks_late=True,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
)
LOWEST, HIGHEST = 9, 0


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
