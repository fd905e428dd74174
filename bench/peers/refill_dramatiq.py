"""Dramatiq's side of bench/refill.py (run from .venv-peers): the broker, its one actor, and a producer.

Worker:    dramatiq refill_dramatiq --processes 1 --threads 64   (PYTHONPATH=bench:bench/peers)
Producer:  python -m refill_dramatiq fill COUNT WORK_MS

The Redis broker with its defaults; the actor does ``time.sleep`` (Dramatiq runs actors in threads).
"""

from __future__ import annotations

import json
import os
import sys
import time

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from refill_tasks import record

broker = RedisBroker(url=os.environ.get("REFILL_BENCH_REDIS_URL", "redis://localhost:6379/0"))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="refill", max_retries=0)
def work(kind: str, sent: float, work_ms: float) -> None:
    started = time.time()
    time.sleep(work_ms / 1000)
    record(kind, sent, started, time.time())


def main() -> None:
    mode, count, work_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    if mode != "fill":
        raise SystemExit(f"unknown mode {mode!r}")
    for _ in range(count):
        work.send("io", time.time(), work_ms)
    print(json.dumps({"sent": count}))


if __name__ == "__main__":
    main()
