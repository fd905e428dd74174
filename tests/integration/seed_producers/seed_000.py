"""Seed 000, "Your Multi-Agent System Has a Scheduling Problem": three streams ``tasks:p0..p2``, each entry with a
``created_at`` in seconds (``time.time()``) and a ``priority_ttl_s``.

The article prints no orchestrator code, only the fields its sweeper reads (``created_at`` as a float of
seconds, ``priority_ttl_s`` as an int of seconds, default 600) and the sweeper itself, whose ``xadd`` is the one
write the article shows. ``escalate_stale_tasks`` below is verbatim. ``orchestrate`` is NOT from the article: it
is the smallest orchestrator that writes those fields (its task data as plain fields, as the sweeper copies an
entry whole), marked so that nobody takes it for the seed's code.
"""

import time

from redis import Redis


def escalate_stale_tasks(redis: Redis):
    for stream_key in ["tasks:p2", "tasks:p1"]:
        tasks = redis.xrange(stream_key, min="-", max="+", count=50)
        for msg_id, msg_data in tasks:
            created_at = float(msg_data.get(b"created_at", 0))
            priority_ttl = int(msg_data.get(b"priority_ttl_s", 600))
            if time.time() - created_at > priority_ttl:
                target = "tasks:p1" if stream_key == "tasks:p2" else "tasks:p0"
                # Move task to higher priority stream
                redis.xadd(target, msg_data)
                redis.xdel(stream_key, msg_id)


# --- not from the article (see the module docstring) ---
def orchestrate(redis: Redis, tier: str, task_type: str, data: str, priority_ttl_s: int = 600) -> bytes:
    """One task into ``tasks:<tier>``, in the fields the article's sweeper reads."""
    fields = {"task_type": task_type, "data": data, "created_at": time.time(), "priority_ttl_s": priority_ttl_s}
    return redis.xadd(f"tasks:{tier}", fields)
