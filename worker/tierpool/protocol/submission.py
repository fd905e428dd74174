"""Validating and encoding a task before it is enqueued, and decoding result records. Pure, no I/O."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tierpool.model.durations import ms_floor
from tierpool.model.keys import PoolKeys
from tierpool.model.spec import PoolSpec
from tierpool.protocol import delays, envelope, tenancy, utf8


class SubmitError(ValueError):
    """A task that cannot be enqueued: unknown tier, payload not JSON or too large, bad task_id."""


@dataclass(frozen=True)
class TaskRequest:
    """One task to submit. ``task_id`` defaults to a fresh UUID; a chosen one is deduplicated."""

    tier: str
    payload: Any
    task_id: str | None = None
    deadline: datetime | timedelta | None = None
    timeout: float | timedelta | None = None
    """Time limit of each run (seconds or a timedelta); None: the pool's ``tasks.timeout``."""
    delay: float | timedelta | None = None
    """Run no earlier than this long from now (seconds or a timedelta, on Redis' clock)."""
    not_before: datetime | str | None = None
    """Run no earlier than this time (timezone-aware datetime or ISO 8601 text)."""
    rate_limit: str | None = None
    """Draw from this ``spec.rateLimits`` entry before running (wins over the handler's)."""
    cost: int | None = None
    """Tokens drawn from the rate limit's ``tokensPerMinute`` bucket (default 1)."""
    tenant: str | None = None
    """Who the task is for: on a tier with ``tenantConcurrency`` it waits for its tenant's turn."""
    task: str | None = None
    """The App task to run (envelope field ``task``; see tierpool.protocol.apps); None for a plain handler."""
    parent: str | None = None
    """The task that spawned it (``task.spawn``, envelope field ``parent``); None for a producer's task."""
    ancestors: tuple[str, ...] = ()
    """The tasks above ``parent``, the parent's parent last (envelope field ``ancestors``)."""


@dataclass(frozen=True)
class Submission:
    """A validated task, ready for XADD (or for the dedupe script when ``dedupe_key`` is set)."""

    task_id: str
    stream: str
    fields: dict[str, str]
    dedupe_key: str | None
    delay_ms: int = 0
    """With ``not_before_ms``: when set, the task is scheduled in the due set (see the SCHEDULE script)."""
    not_before_ms: int = 0
    gate: tenancy.Gate | None = None
    """Set when the task goes through the tenant gate (the SUBMIT_GATED script) instead."""

    @property
    def scheduled(self) -> bool:
        return self.delay_ms > 0 or self.not_before_ms > 0


def _deadline_ms(deadline: datetime | timedelta | None, now_ms: int) -> int | None:
    if deadline is None:
        return None
    if isinstance(deadline, timedelta):
        return now_ms + ms_floor(deadline.total_seconds())
    if deadline.tzinfo is None:
        raise SubmitError("deadline must be timezone-aware (or a timedelta from now)")
    return ms_floor(deadline.timestamp())


def _timeout_ms(timeout: float | timedelta | None) -> int | None:
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if not seconds >= 0.001 or seconds == float("inf"):
        raise SubmitError(f"timeout must be a finite duration of at least 1ms, not {timeout!r}")
    return ms_floor(seconds)


def prepare(
    spec: PoolSpec, keys: PoolKeys, request: TaskRequest, now_ms: int, trace: Mapping[str, str] | None = None
) -> Submission:
    """Check a request against the pool's rules and encode it; SubmitError says what is wrong. ``trace``: the
    producer's trace context fields (tierpool.protocol.trace_context), written into the envelope as they are."""
    if request.tier not in spec.tier_names:
        raise SubmitError(f"unknown tier {request.tier!r}; this pool has {', '.join(spec.tier_names)}")
    try:
        payload_json = json.dumps(request.payload, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise SubmitError(f"payload is not JSON-serialisable: {error}") from None
    size = len(payload_json.encode("utf-8"))
    if size > spec.tasks.max_payload_bytes:
        raise SubmitError(f"payload is {size} bytes; this pool accepts at most {spec.tasks.max_payload_bytes}")
    task_id = request.task_id if request.task_id is not None else uuid.uuid4().hex
    _check_id(task_id, "task_id", envelope.MAX_TASK_ID_LENGTH)
    if request.tenant is not None and (problem := tenancy.tenant_error(request.tenant)):
        raise SubmitError(problem)
    if request.task is not None:
        _check_id(request.task, "task", envelope.MAX_TASK_NAME_LENGTH)
    deadline_ms, timeout_ms = _deadline_ms(request.deadline, now_ms), _timeout_ms(request.timeout)
    _check_rate_limit(spec, request)
    try:
        delay_ms, not_before_ms = delays.delay_ms(request.delay), delays.not_before_ms(request.not_before)
    except delays.DelayError as error:
        raise SubmitError(str(error)) from None
    fields = envelope.encode(
        task_id,
        request.tier,
        payload_json,
        now_ms,
        None,
        deadline_ms,
        timeout_ms,
        request.rate_limit,
        request.cost,
        request.tenant,
        request.task,
        request.parent,
        request.ancestors,
    )
    dedupe_key = keys.dedupe(task_id) if request.task_id is not None else None
    limit = spec.tier(request.tier).tenant_concurrency
    gate = tenancy.gate_for(keys, request.tier, request.tenant, limit, task_id)
    if trace:
        fields.update(trace)
    return Submission(task_id, keys.tier(request.tier), fields, dedupe_key, delay_ms, not_before_ms, gate)


def _check_id(value: object, what: str, longest: int) -> None:
    """A task_id or a task name: 1-``longest`` characters of UTF-8 text with no whitespace (the TypeScript client's
    rule too)."""
    if not isinstance(value, str) or not value or len(value) > longest or any(c.isspace() for c in value):
        raise SubmitError(f"{what} must be 1-{longest} characters with no whitespace")
    if not utf8.is_utf8(value):  # tierpool's clients would write it as the bytes it escapes, not refuse it
        raise SubmitError(f"{what} must be UTF-8 text; it holds a lone surrogate (an escaped byte that is not UTF-8)")


def _check_rate_limit(spec: PoolSpec, request: TaskRequest) -> None:
    if request.rate_limit is not None and spec.rate_limit(request.rate_limit) is None:
        known = ", ".join(limit.name for limit in spec.rate_limits) or "none"
        raise SubmitError(f"unknown rate limit {request.rate_limit!r}; this pool has {known}")
    if request.cost is not None and (isinstance(request.cost, bool) or not isinstance(request.cost, int)):
        raise SubmitError(f"cost must be a whole number of tokens, not {request.cost!r}")
    if request.cost is not None and request.cost < 1:
        raise SubmitError(f"cost must be at least 1, not {request.cost}")


@dataclass(frozen=True)
class TaskResult:
    """A task's result record, as written by the worker that finished it."""

    task_id: str
    status: str
    """``succeeded``, ``dead_lettered`` or ``cancelled``."""
    result: Any = None
    error: str | None = None
    attempts: int = 0
    tier: str | None = None
    worker: str | None = None
    queue_wait_ms: int | None = None
    run_ms: int | None = None
    finished_at: int | None = None
    reason: str | None = None
    """Why a dead-lettered task was dead-lettered (``non-retryable: ...``, ``handler failed on all N ...``), or
    when a cancelled one was cancelled (``cancelled before it started``, ``cancelled while running``)."""
    children: list[str] | None = None
    """The ids of the children the task spawned (``task.spawn``), in order; None when it spawned none."""
    traceback: str | None = None
    """The traceback of the run whose failure dead-lettered the task: its last 8 KiB, Redis passwords redacted
    (tierpool.protocol.tracebacks). None for other outcomes, for a task dead-lettered without a failed run (past
    ``maxDeliveries`` after its worker died, a bad envelope, a passed deadline) and in records of older workers."""

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    @classmethod
    def from_json(cls, text: str) -> TaskResult:
        data: Mapping[str, Any] = json.loads(text)
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)
