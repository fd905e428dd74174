"""The protocol floor: the worker's own Redis calls with no per-task Python work.

It takes with the worker's TAKE script (weighted plan, one round trip) and completes each read with one
COMPLETE_MANY call carrying a fixed, pre-encoded result record per task: the same server work as the worker,
without decoding, handlers, metrics or record building. It bounds what any Python worker speaking the tierpool
protocol (at-least-once, one result record per task) can reach, and splits the gap to the bare loop into the
protocol's cost (bare loop -> floor) and the worker's own overhead (floor -> worker).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "worker"))

from tierpool import scripts
from tierpool.model.keys import GROUP, PoolKeys
from tierpool.protocol.task_state import EVENTS_MAXLEN
from tierpool.store import script_registry

RECORD = json.dumps(
    {
        "task_id": "task-000000",
        "status": "succeeded",
        "attempts": 1,
        "tier": "p0",
        "escalated_from": None,
        "worker": "floor",
        "queue_wait_ms": 1,
        "run_ms": 0,
        "created_at": 0,
        "finished_at": 0,
        "result": None,
    }
)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pool", required=True, help="NAMESPACE/NAME")
    parser.add_argument("--tiers", default="p0,p1,p2")
    parser.add_argument("--weights", default="45,16,3", help="per-read counts, as the worker plans them")
    args = parser.parse_args()
    client = redis.Redis.from_url(os.environ["TIERPOOL_REDIS_URL"], decode_responses=True)
    keys = PoolKeys.parse(args.pool)
    streams = [keys.tier(tier) for tier in args.tiers.split(",")]
    for stream in streams:
        with contextlib.suppress(redis.ResponseError):
            client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    script_registry.load_sync(client, ["TAKE", "COMPLETE_MANY"])
    take, complete = scripts.sha("TAKE"), scripts.sha("COMPLETE_MANY")
    plan = [int(count) for count in args.weights.split(",")]
    room = [-1] * len(streams)
    while True:
        reply = client.evalsha(take, len(streams), *streams, GROUP, "floor", *plan, *room)
        if not reply:
            time.sleep(0.001)
            continue
        for index, entries in reply:
            names: list[str] = [streams[int(index)], keys.errors]
            call: list[object] = [GROUP, "floor", 86_400_000, "0", EVENTS_MAXLEN]
            for entry_id, _ in entries:
                task = entry_id
                names += [keys.result(task), keys.events(task), keys.checkpoint(task), keys.cancel(task)]
                call += [entry_id, entry_id, RECORD]
            names.append(keys.where)
            client.evalsha(complete, len(names), *names, *call)


if __name__ == "__main__":
    main()
