"""Spawn and gather on the worker (see tierpool.protocol.gather for the pure parts).

- **spawn** submits a child through the producer's submit plan (tierpool.store.submits) with the id
  ``<parent>.<n>``, deduplicated, so a re-run of the parent finds the children it spawned before; a child whose
  result record exists already is not submitted again. It carries the envelope field ``parent``.
- **gather** reads the children's result records in one MGET: all there, it returns their outputs; otherwise the
  run ends with ``Gathering`` and the worker queues a park as the run's outcome (the PARK script): the parent's
  entry is acked, its fields kept with the children it waits for, and its slot is free. PARK enqueues it again at
  once when every child has finished meanwhile.
- **resume**: once the outcome of a task with a ``parent`` is written, its worker reads the parent's parked
  children and runs GATHERED, which enqueues the parent again, exactly once, when every child has a result record.
  The lease holder's sweep does the same for every parked parent: the safety net for a crash between a child's
  outcome and that call, and for outcomes written by producers (a cancel of a queued child).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic_core import to_json

from tierpool.model.durations import ms, parse_duration
from tierpool.model.spec import PoolSpec
from tierpool.protocol import trace_context
from tierpool.protocol.apps import App, TaskDef, typed_request
from tierpool.protocol.envelope import Task
from tierpool.protocol.gather import Child, child_ancestors, child_id, gathered, inherited_deadline, inherited_tier
from tierpool.protocol.submission import TaskRequest, TaskResult
from tierpool.runtime.ledger import Key
from tierpool.store.drivers import run_async
from tierpool.store.replication import Wait, WaitGate
from tierpool.store.streams import Outcome, PoolStreams
from tierpool.store.submits import submit_plan

log = logging.getLogger("tierpool.worker")
SWEEP_PAGE = 500
"""Parked parents one sweep checks at most (the oldest first)."""
RESUMED, WAITING, NOT_PARKED, CHANGED = 1, 2, 0, -2
"""GATHERED's replies."""


class Gatherer:
    """Spawn, gather, park and resume for one worker. ``tier_of``: the tier index a run is running in, or None."""

    def __init__(
        self,
        streams: PoolStreams,
        spec: PoolSpec,
        app: App | None,
        consumer: str,
        tier_of: Callable[[Task], int | None],
        clock: Callable[[], float],
    ) -> None:
        self.streams, self.spec, self.app, self.consumer = streams, spec, app, consumer
        self.keys, self.tier_of, self.clock = streams.keys, tier_of, clock
        self.wait = WaitGate(Wait.of(spec.redis))
        self.parks: set[Key] = set()
        """Entries whose queued outcome is a park (not a final outcome: it resumes no parent)."""
        self.resuming: set[asyncio.Task[Any]] = set()
        self.keep_ms = ms(max(spec.tasks.result_ttl, 3 * spec.recovery.sweep_interval))
        """How long a finished child's record is kept at least, from each resume attempt while its parent waits."""

    # --- in the run ------------------------------------------------------------------------------------------

    async def spawn(self, task: Task, target: Any, inp: Any, options: Mapping[str, Any]) -> Child[Any]:
        """Submit the next child of this run (see ``Task.spawn``) and return its handle."""
        definition = self._definition(target)
        task_id = child_id(task.id, len(task.children))
        request = self._request(task, definition, target, inp, task_id, dict(options))
        if not await self.streams.client.exists(self.keys.result(task_id)):
            trace = {name: value for name, value in _trace_of(task).items() if value}
            plan = submit_plan(self.spec, self.keys, [request], self.wait, self.clock, trace)
            await run_async(self.streams.client, plan)
        task.children.append(task_id)
        return Child(task_id, definition)

    def _definition(self, target: Any) -> TaskDef[Any, Any] | None:
        if isinstance(target, TaskDef):
            return target
        if not isinstance(target, str):
            raise TypeError(f"spawn takes an App's task or its name, not {type(target).__name__}")
        if self.app is None:
            return None  # a plain handler: ``target`` is the child's tier, as in client.submit(tier, payload)
        found = self.app.tasks.get(target)
        if found is None:
            raise ValueError(f"spawn: this app has no task named {target!r}")
        return found

    def _request(
        self, task: Task, definition: TaskDef[Any, Any] | None, target: Any, inp: Any, task_id: str,
        options: dict[str, Any],
    ) -> TaskRequest:  # fmt: skip
        """The child's request: its tier raised to the parent's, the parent's deadline, tenant, id and lineage."""
        index = self.tier_of(task)
        parent_tier = self.streams.tiers[index] if index is not None else task.tier
        own_tier = options.pop("tier", None) or (definition.defaults.tier if definition else target)
        own_deadline = options.pop("deadline", None)
        if own_deadline is None and definition is not None and definition.defaults.deadline is not None:
            own_deadline = definition.defaults.deadline
        deadline = inherited_deadline(_as_datetime(own_deadline, self.clock()), task.deadline_ms)
        options.setdefault("tenant", task.tenant)
        tier = inherited_tier(self.spec.tier_names, own_tier or parent_tier, parent_tier)
        options["ancestors"] = child_ancestors(task.parent, task.ancestors)
        if definition is None:
            return TaskRequest(tier, inp, task_id, deadline, parent=task.id, **options)
        return typed_request(definition, inp, task_id, tier=tier, deadline=deadline, parent=task.id, **options)

    async def gather(self, task: Task, handles: Sequence[Any], return_exceptions: bool) -> list[Any]:
        """The children's outputs; ``Gathering`` (the run parks) while one has no outcome."""
        children = [h if isinstance(h, Child) else Child(h.id, getattr(h, "task", None)) for h in handles]
        if not children:
            return []
        raw = await self.streams.client.mget([self.keys.result(child.id) for child in children])
        records = [None if value is None else TaskResult.from_json(_text(value)) for value in raw]
        return gathered(children, records, return_exceptions)

    # --- the outcome -----------------------------------------------------------------------------------------

    def park(self, index: int, task: Task, children: Sequence[str]) -> Outcome:
        """The outcome of a run that gathers children without an outcome: the PARK script, owner-checked."""
        keys = [self.streams.streams[index], self.keys.parked(task.id), self.keys.gathering]
        keys += [self.keys.result(child) for child in children] + [self.keys.where]
        args = [self.keys.group, self.consumer, task.stream_id, task.id, to_json(list(children))]
        log.info("task %s parks, gathering %d child task(s)", task.id, len(children))
        self.parks.add((index, task.stream_id))
        return Outcome(index, task.stream_id, ("PARK", keys, args))

    def landed(self, key: Key, status: int | None, task: Any) -> None:
        """The writer's report on an entry: a child's final outcome written (1) resumes its parent, if parked."""
        if key in self.parks:
            self.parks.discard(key)
            return
        parent = getattr(task, "parent", None)
        if status != 1 or not parent:
            return
        resume = asyncio.get_running_loop().create_task(self.resume(parent))
        self.resuming.add(resume)
        resume.add_done_callback(self._resumed)

    def _resumed(self, done: asyncio.Task[Any]) -> None:
        self.resuming.discard(done)
        if not done.cancelled() and (error := done.exception()) is not None:
            log.warning("resuming a parked parent failed (the sweep will): %s", error)

    async def resume(self, parent: str) -> int:
        """Enqueue ``parent`` again if it is parked and every child it waits for has an outcome (GATHERED)."""
        for _ in range(3):  # the set read and the script are two steps: a park in between changes it
            stream, children = await self.streams.client.hmget(self.keys.parked(parent), ["stream", "children"])
            if stream is None or children is None:
                return NOT_PARKED
            ids = [str(child) for child in json.loads(children)]
            keys = [self.keys.parked(parent), self.keys.gathering, _text(stream)]
            keys += [self.keys.result(child) for child in ids] + [self.keys.where]
            reply = int(await self.streams.run("GATHERED", keys, [parent, _text(children), self.keep_ms]))
            if reply == RESUMED:
                log.info("task %s resumes: its %d child task(s) have an outcome", parent, len(ids))
            if reply != CHANGED:
                return reply
        return CHANGED

    async def sweep(self) -> int:
        """The lease holder's pass over the parked parents: resumes those whose children all finished."""
        parents: list[Any] = await self.streams.client.zrange(self.keys.gathering, 0, SWEEP_PAGE - 1)
        resumed = 0
        for parent in parents:
            resumed += await self.resume(_text(parent)) == RESUMED
        return resumed


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _trace_of(task: Task) -> dict[str, str | None]:
    return dict(zip(trace_context.FIELDS, (task.traceparent, task.tracestate), strict=True))


def _as_datetime(value: Any, now: float) -> datetime | None:
    """A deadline given as a datetime, a timedelta or a duration from now (seconds or text)."""
    if value is None or isinstance(value, datetime):
        return value
    if isinstance(value, timedelta):
        return datetime.fromtimestamp(now, tz=UTC) + value
    seconds = parse_duration(value) if isinstance(value, str) else float(value)
    return datetime.fromtimestamp(now + seconds, tz=UTC)
