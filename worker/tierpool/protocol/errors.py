"""Error classes a handler raises to say what its failure means, and how the worker reads any error. Pure.

- :class:`NonRetryable`: running the task again cannot help (a "context too long" 400): it goes to the
  dead-letter stream at once.
- :class:`RetryAfter`: not now, later (a provider's 429 with ``Retry-After``): the task runs again no earlier
  than that, and the deferral does not count as a failed delivery (up to ``recovery.maxDeferrals`` of them).
- Anything else is a failed attempt, retried with backoff until ``recovery.maxDeliveries``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from tierpool.model.redis_url import redact_urls_in

MAX_ERROR_TEXT = 2000


class NonRetryable(Exception):
    """Raise from a handler to dead-letter the task at once, with the reason ``non-retryable: <message>``."""


class RetryAfter(Exception):
    """Raise from a handler to run the task again no earlier than ``seconds`` from now, without counting a
    failed delivery. A delay longer than the pool's ``recovery.claimIdle`` waits in the due-time index."""

    def __init__(self, seconds: float, message: str = "") -> None:
        seconds = float(seconds)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"RetryAfter needs a finite number of seconds >= 0, not {seconds!r}")
        super().__init__(message or f"retry after {seconds:g}s")
        self.seconds = seconds


class TaskTimedOut(Exception):
    """Raised by the worker (never by handlers) when a run outlives its time limit."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"timed out after {seconds:g}s")
        self.seconds = seconds


class TaskLost(Exception):
    """Raised by ``task.checkpoint`` when this worker no longer owns the task's entry (another worker took it over,
    or it finished or was cancelled): nothing was saved, and this run's outcome will not be written."""


class ErrorKind(StrEnum):
    FAILED = "failed"
    """An ordinary failed attempt (backoff, then retry)."""
    NON_RETRYABLE = "non_retryable"
    DEFERRED = "deferred"
    """RetryAfter: run again later, without counting a failed delivery."""


@dataclass(frozen=True)
class ErrorInfo:
    kind: ErrorKind
    message: str
    """The exception's own message."""
    text: str
    """What the result record and the dead-letter entry show as the error."""
    retry_after: float | None = None


def describe(error: BaseException) -> ErrorInfo:
    """What a handler's exception means for its task, and how it is recorded: a Redis URL's password in the
    message is replaced (records are read by every producer of the pool), before the text is cut to length."""
    message = redact_urls_in(str(error))[:MAX_ERROR_TEXT]
    if isinstance(error, TaskTimedOut):
        return ErrorInfo(ErrorKind.FAILED, message, message)
    text = f"{type(error).__name__}: {redact_urls_in(str(error))}"[:MAX_ERROR_TEXT]
    if isinstance(error, NonRetryable):
        return ErrorInfo(ErrorKind.NON_RETRYABLE, message, text)
    if isinstance(error, RetryAfter):
        return ErrorInfo(ErrorKind.DEFERRED, message, text, error.seconds)
    return ErrorInfo(ErrorKind.FAILED, message, text)
