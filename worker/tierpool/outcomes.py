"""What a finished run writes: the result record of a success, or the retry mark or dead letter of a failure."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic_core import to_json

from tierpool import policy
from tierpool.connection import ms
from tierpool.envelope import Task
from tierpool.metrics import TierSeries
from tierpool.spec import RecoverySpec
from tierpool.streams import Completion, Outcome, PoolStreams

log = logging.getLogger("tierpool.worker")
MAX_ERROR_TEXT = 2000


@dataclass
class Outcomes:
    streams: PoolStreams
    recovery: RecoverySpec
    consumer: str
    ttl_ms: int
    series: list[TierSeries]
    clock: Callable[[], float]

    def success(self, index: int, task: Task, started: float, wait: float, result_json: str) -> Completion:
        finished = self.clock()
        series = self.series[index]
        series.run_time.observe(finished - started)
        series.completed.inc()
        record = {
            "task_id": task.id,
            "status": "succeeded",
            "attempts": task.attempt,
            "tier": task.tier,
            "escalated_from": task.escalated_from,
            "worker": self.consumer,
            "queue_wait_ms": int(wait * 1000),
            "run_ms": int((finished - started) * 1000),
            "created_at": task.created_at_ms,
            "finished_at": ms(finished),
        }
        return Completion(index, task.stream_id, task.id, encode_record(record, result_json), task.attempt > 1)

    def failure(self, index: int, task: Task, error: Exception) -> Outcome:
        text = f"{type(error).__name__}: {error}"[:MAX_ERROR_TEXT]
        recovery = self.recovery
        action = policy.after_failure(task.attempt, recovery.max_deliveries)
        if action is policy.FailureAction.RETRY:
            log.info("task %s failed on attempt %d, will retry: %s", task.id, task.attempt, text)
            idle = policy.retry_idle_ms(task.attempt, recovery.retry_backoff, recovery.claim_idle)
            call = self.streams.retry_later_call(index, self.consumer, task.stream_id, task.id, text, idle)
            return Outcome(index, task.stream_id, call)
        log.warning("task %s failed %d time(s), dead-lettering: %s", task.id, task.attempt, text)
        self.series[index].dead_lettered.inc()
        reason = f"handler failed on all {recovery.max_deliveries} deliveries"
        call = self.streams.dead_letter_call(
            index, self.consumer, task.stream_id, task.id, reason, text, task.attempt, self.ttl_ms
        )
        return Outcome(index, task.stream_id, call)


def encode_record(record: dict[str, Any], result_json: str) -> bytes:
    """The result record as JSON; the handler's result, already encoded, is spliced in as it is."""
    body = to_json(record)
    return b'%s,"result":%s}' % (body[:-1], result_json.encode())
