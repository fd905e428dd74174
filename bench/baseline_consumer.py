"""The baseline: a bare redis-py consumer loop (XREADGROUP, then XACK), no tiers, no results, no recovery.

--ack per-message acks each entry with its own XACK (how most hand-rolled consumers and the seed article do it);
--ack batch acks a whole read with one XACK (the fastest correct bare loop).
"""

import argparse
import os

import redis


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stream", required=True)
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--ack", choices=["per-message", "batch"], default="batch")
    args = parser.parse_args()
    client = redis.Redis.from_url(os.environ["TIERPOOL_REDIS_URL"], decode_responses=True)
    while True:
        reply = client.xreadgroup("workers", "baseline", {args.stream: ">"}, count=args.count, block=1000)
        if not reply:
            continue
        ids = [entry_id for entry_id, _ in reply[0][1]]
        if args.ack == "batch":
            client.xack(args.stream, "workers", *ids)
        else:
            for entry_id in ids:
                client.xack(args.stream, "workers", entry_id)


if __name__ == "__main__":
    main()
