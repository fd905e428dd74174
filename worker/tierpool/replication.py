"""The opt-in ``WAIT`` after acknowledged writes (``spec.redis.waitReplicas``): queued on the same pipeline as the
writes it covers, so it waits for their replication offset, not another connection's."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from tierpool.spec import RedisSpec

log = logging.getLogger("tierpool.replication")


@dataclass(frozen=True)
class Wait:
    replicas: int
    timeout_ms: int

    @classmethod
    def of(cls, redis: RedisSpec) -> Wait | None:
        """The WAIT the spec asks for, None when it asks for none. Pure."""
        if redis.wait_replicas <= 0:
            return None
        return cls(redis.wait_replicas, max(1, round(redis.wait_timeout * 1000)))


def queue_wait(pipe: Any, wait: Wait | None) -> None:
    """Add the WAIT as the pipeline's last command (nothing without one)."""
    if wait is not None:
        pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)


def reached(reply: Any, wait: Wait) -> bool:
    """Whether WAIT's reply says enough replicas acknowledged (an error reply: no). Pure."""
    return isinstance(reply, int) and not isinstance(reply, bool) and reply >= wait.replicas


def split_wait(replies: list[Any], wait: Wait | None, what: str) -> list[Any]:
    """The writes' replies without the WAIT's; a WAIT that fell short is logged (the writes stay: they are
    acknowledged on the master, only less safe against a failover)."""
    if wait is None:
        return replies
    reply = replies[-1]
    if not reached(reply, wait):
        log.warning("%s reached %s of %d replica(s) within %d ms", what, reply, wait.replicas, wait.timeout_ms)
    return replies[:-1]
