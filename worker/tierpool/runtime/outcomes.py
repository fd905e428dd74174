"""What a finished run writes: the result record of a success, or the retry mark or dead letter of a failure."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from traceback import format_exception
from typing import Any

from pydantic_core import to_json

from tierpool.model.durations import ms, ms_floor
from tierpool.model.spec import RecoverySpec
from tierpool.protocol import delays, errors, policy, tracebacks
from tierpool.protocol.envelope import Task
from tierpool.runtime.metrics import TierSeries
from tierpool.store.due import reschedule_call
from tierpool.store.script_registry import ScriptCall
from tierpool.store.streams import Completion, DeferPlan, Outcome, PoolStreams

log = logging.getLogger("tierpool.worker")


@dataclass
class Outcomes:
    streams: PoolStreams
    recovery: RecoverySpec
    consumer: str
    ttl_ms: int
    series: list[TierSeries]
    clock: Callable[[], float]
    rate_limited: Callable[[Task], bool] = lambda task: False
    """Whether a task draws from a pool rate limit: its retries and deferrals always go back through the due
    index, so that it draws again (its paid reservation was used)."""

    def started(self, index: int, task: Task, sla: float | None) -> tuple[float, float]:
        """A run starts: count it, and its queue wait (from its due time when it was scheduled). Returns (start
        time, queue wait in seconds)."""
        series, started = self.series[index], self.clock()
        wait = max(started - delays.visible_since_ms(task.created_at_ms, task.due_ms) / 1000, 0.0)
        series.started.inc()
        series.queue_wait.observe(wait)
        if policy.sla_missed(wait, sla):
            series.sla_missed.inc()
        return started, wait

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
            "queue_wait_ms": ms_floor(wait),
            "run_ms": ms_floor(finished - started),
            "created_at": task.created_at_ms,
            "finished_at": ms(finished),
        }
        if task.children:
            record["children"] = task.children
        return Completion(index, task.stream_id, task.id, encode_record(record, result_json), task.attempt > 1)

    def failure(self, index: int, task: Task, error: Exception, started: float | None = None) -> Outcome:
        """The outcome of a failed run: what the error means (see tierpool.protocol.errors and policy.plan_failure).
        Its traceback, bounded and redacted (tierpool.protocol.tracebacks), goes into the log line of a retry or a
        dead letter, and into the dead letter and the result record (none for a RetryAfter: a deferral is asked
        for, not a fault)."""
        if started is not None:
            self.series[index].run_time.observe(self.clock() - started)
        self.series[index].failed.inc()
        info = errors.describe(error)
        r = self.recovery
        plan = policy.plan_failure(
            info.kind, info.message, task.attempt, r.max_deliveries, r.max_deferrals, r.retry_backoff, r.claim_idle,
            info.retry_after,
        )  # fmt: skip
        route = delays.due_route(
            plan, info.kind, task.attempt, r.max_deliveries, r.retry_backoff, r.claim_idle, info.retry_after,
            self.rate_limited(task),
        )  # fmt: skip
        trace = {} if info.kind is errors.ErrorKind.DEFERRED else {"traceback": _traceback(error)}
        if route is not None:  # longer than claimIdle, or rate-limited: through the due-time index
            return Outcome(index, task.stream_id, self._reschedule(index, task, info, route, trace))
        if plan.action is policy.FailureAction.DEFER:
            return Outcome(index, task.stream_id, self._defer(index, task, info, plan))
        if plan.action is policy.FailureAction.RETRY:
            log.info("task %s failed on attempt %d, will retry: %s", task.id, task.attempt, info.text, extra=trace)
            call = self.streams.retry_later_call(index, self.consumer, task.stream_id, task.id, info.text, plan.idle_ms)
            return Outcome(index, task.stream_id, call)
        log.warning("task %s dead-lettered after %d attempt(s): %s", task.id, task.attempt, plan.reason, extra=trace)
        self.series[index].dead_lettered.inc()
        call = self.streams.dead_letter_call(
            index, self.consumer, task.stream_id, task.id, plan.reason, info.text, task.attempt, self.ttl_ms,
            traceback=trace.get("traceback", ""),
        )  # fmt: skip
        return Outcome(index, task.stream_id, call)

    def _reschedule(
        self, index: int, task: Task, info: errors.ErrorInfo, route: delays.DueRoute, trace: dict[str, str]
    ) -> ScriptCall:
        recovery = self.recovery
        log.info(
            "task %s: %s on attempt %d, due in %d ms: %s", task.id, route.mode, task.attempt, route.delay_ms, info.text,
            extra=trace,
        )  # fmt: skip
        memory = policy.deferral_memory_ms(recovery.max_deferrals, recovery.claim_idle, self.ttl_ms / 1000)
        memory = max(memory, 2 * (recovery.max_deferrals + 1) * route.delay_ms)  # a long deferral's count lasts
        return reschedule_call(
            self.streams, index, self.consumer, task, info.text, route, recovery.max_deferrals, memory
        )

    def _defer(self, index: int, task: Task, info: errors.ErrorInfo, plan: policy.FailurePlan) -> ScriptCall:
        recovery = self.recovery
        if plan.clamped:
            log.warning(
                "task %s asked to retry after %gs, longer than claimIdle: it may run again after %gs",
                task.id,
                info.retry_after,
                recovery.claim_idle,
            )
        log.info("task %s deferred on attempt %d: %s", task.id, task.attempt, info.text)
        memory = policy.deferral_memory_ms(recovery.max_deferrals, recovery.claim_idle, self.ttl_ms / 1000)
        defer = DeferPlan(plan.idle_ms, plan.fallback_idle_ms, recovery.max_deferrals, memory)
        return self.streams.defer_call(index, self.consumer, task.id, task.stream_id, info.text, defer)


def _traceback(error: BaseException) -> str:
    return tracebacks.recorded("".join(format_exception(error)))


def encode_record(record: dict[str, Any], result_json: str) -> bytes:
    """The result record as JSON; the handler's result, already encoded, is spliced in as it is."""
    body = to_json(record)
    return b'%s,"result":%s}' % (body[:-1], result_json.encode())
