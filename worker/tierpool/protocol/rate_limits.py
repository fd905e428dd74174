"""Pool-wide provider rate limits: which limit a task draws from, the GCRA parameters of its
buckets, and the GCRA step itself, mirrored from the ``THROTTLE`` script for table-driven tests. Pure.

GCRA with reservations: a task asking at ``now`` may start at
``s = max(now, tat + min(cost, burst)*T - burst*T)``; the bucket is charged as of ``s`` for its whole cost
(``tat = max(tat, s) + cost*T``). A task whose ``s`` is later does not wait in a worker
slot: it is scheduled for ``s`` in the pool's throttled set, already paid for, so every worker of every replica
shares one bucket, throughput sits at the limit, and no herd of waiting tasks wakes at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from tierpool.model.spec import PoolSpec, RateLimit

MINUTE_MS = 60_000.0
ATTRIBUTE = "tierpool_rate_limit"
"""Attribute the :func:`rate_limited` decorator sets on a handler."""
F = TypeVar("F", bound=Callable[..., Any])


def rate_limited(name: str) -> Callable[[F], F]:
    """Mark a handler as drawing from the pool's rate limit ``name`` (``spec.rateLimits``) for every task; a
    submit's ``rate_limit=`` wins over it."""

    def mark(handler: F) -> F:
        setattr(handler, ATTRIBUTE, name)
        return handler

    return mark


def handler_limit(handler: object) -> str | None:
    """The rate limit a handler was marked with, if any."""
    value = getattr(handler, ATTRIBUTE, None)
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Bucket:
    """GCRA parameters of one limit: ms per task and burst (tasks), ms per token and token burst (0: none)."""

    name: str
    per_ms: float
    burst: float
    per_token_ms: float = 0.0
    token_burst: float = 0.0

    @classmethod
    def of(cls, limit: RateLimit) -> Bucket:
        """A burst of one second's worth, at least one task (or token)."""
        per_ms = MINUTE_MS / limit.per_minute
        burst = max(1.0, limit.per_minute / 60)
        if limit.tokens_per_minute is None:
            return cls(limit.name, per_ms, burst)
        tokens = limit.tokens_per_minute
        return cls(limit.name, per_ms, burst, MINUTE_MS / tokens, max(1.0, tokens / 60))


def buckets(spec: PoolSpec) -> dict[str, Bucket]:
    return {limit.name: Bucket.of(limit) for limit in spec.rate_limits}


def limit_for(task_limit: str | None, handler_default: str | None) -> str | None:
    """The submit's limit wins over the handler's."""
    return task_limit if task_limit is not None else handler_default


LATE_FLOOR_MS = 1000.0
"""A reservation always holds for a task that starts within this long of it: more than the due-time mover's
latency, so a task that draws again is never late again just from being moved (it would draw for ever)."""


def late_tolerance_ms(bucket: Bucket, cost: int) -> float:
    """How late a paid task may start on its reservation: half its spacing (of tasks, or of its tokens), at least
    ``LATE_FLOOR_MS``. Pure."""
    return max(LATE_FLOOR_MS, bucket.per_ms / 2, cost * bucket.per_token_ms / 2)


def needs_check(
    limit: str | None, paid_ms: int | None, entry_deliveries: int, now_ms: float | None = None, late_ms: float = 0.0
) -> bool:
    """Whether a task draws from its bucket before it runs: not when it has no limit, and not on the first
    delivery of the entry its paid reservation made, if it starts within ``late_ms`` of the reserved time (a
    retry draws again, and so does a task that waited behind busy slots past its reservation: reserved tasks that
    all come back late would otherwise run as one burst). ``now_ms``: the worker's clock; None skips the check."""
    if limit is None:
        return False
    if paid_ms is None or entry_deliveries > 1:
        return True
    return now_ms is not None and now_ms - paid_ms > late_ms


def claimed_reservation(
    limit: str | None, paid_ms: int | None, entry_deliveries: int, now_ms: float | None = None, late_ms: float = 0.0
) -> int | None:
    """The paid time a task asks the THROTTLE script to run on (its ``paid`` field, when :func:`needs_check` would
    let it skip its bucket), or None: it draws. A claim holds only when THROTTLE recorded that reservation
    itself, so a ``paid`` field a plain XADD wrote draws like a new task."""
    if limit is None or paid_ms is None or needs_check(limit, paid_ms, entry_deliveries, now_ms, late_ms):
        return None
    return paid_ms


def limit_refusal(name: str | None, defined: Iterable[str]) -> str | None:
    """The dead-letter reason of a task naming a rate limit its pool does not define (a plain XADD, or a limit
    removed from the spec since): it would otherwise run unlimited. None when it names none, or a defined one."""
    known = sorted(defined)
    if name is None or name in known:
        return None
    return f"bad envelope: rate_limit {name!r} is not one of spec.rateLimits ({', '.join(known) or 'none'})"


@dataclass(frozen=True)
class Gcra:
    """One bucket's state and the answer for one task: when it may start, and the state after charging it."""

    start: float
    tat: float
    tokens_tat: float


def gcra(bucket: Bucket, tat: float, tokens_tat: float, now: float, cost: int = 1) -> Gcra:
    """The THROTTLE script's arithmetic (times in ms)."""
    start = max(now, tat + bucket.per_ms - bucket.burst * bucket.per_ms)
    if bucket.per_token_ms > 0:
        drawn = min(cost, bucket.token_burst)  # a cost above the burst starts when the bucket is full
        start = max(start, tokens_tat + drawn * bucket.per_token_ms - bucket.token_burst * bucket.per_token_ms)
    start = float(math.ceil(start))
    new_tat = max(tat, start) + bucket.per_ms
    new_tokens = max(tokens_tat, start) + cost * bucket.per_token_ms if bucket.per_token_ms > 0 else tokens_tat
    return Gcra(start, new_tat, new_tokens)
