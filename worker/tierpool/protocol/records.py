"""What workers and clients store besides the envelope (tierpool.protocol.envelope), as types: the result record
of each status, the dead letter, a task's event and a due-index member. The JSON Schemas in ``schemas/`` are
generated from these and the Envelope (tierpool.protocol.wire_schemas); each names who writes it. Pure.

Several writers share each shape, in Python and in Lua, so these are the one place their fields are listed:
tests/integration/test_wire_schemas.py validates what each writer actually stores against the schemas.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

Ms = Annotated[int, Field(ge=0)]
"""A time in ms since the epoch (or a duration in ms)."""
Digits = Annotated[str, Field(pattern=r"^(0|[1-9][0-9]*)$")]
"""A whole number >= 0 as stream entries store it: decimal text."""
Name = Annotated[str, Field(min_length=1)]


class SucceededRecord(TypedDict):
    """``…:result:<task_id>`` of a task whose handler returned (tierpool.runtime.outcomes, ``COMPLETE_MANY``)."""

    task_id: Name
    status: Literal["succeeded"]
    result: Any
    """What the handler returned, as JSON."""
    attempts: Annotated[int, Field(ge=1)]
    """Deliveries, this run's included."""
    tier: Name
    """The tier it ran in: its stream's."""
    escalated_from: Name | None
    """The tier it was escalated from (null: it was not)."""
    worker: Name
    """The consumer that ran it."""
    queue_wait_ms: Ms
    """From its submit (or its due time, when scheduled) to the start of the run that succeeded."""
    run_ms: Ms
    created_at: Ms
    """The envelope's ``created_at`` as the worker read it (ms; a value in seconds times 1000)."""
    finished_at: Ms
    children: NotRequired[list[Name]]
    """The ids of the child tasks its run spawned (``task.spawn``), in order; absent when it spawned none."""


class DeadLetteredRecord(TypedDict):
    """``…:result:<task_id>`` of a dead-lettered task (the ``DEAD_LETTER`` script: helpers/stream.lua). None is
    written for an entry without a task_id, or one whose task_id had to be cut."""

    task_id: Name
    status: Literal["dead_lettered"]
    tier: Name
    """The tier of the stream it was dead-lettered from."""
    error: str
    """The last handler error, or the reason when it has none."""
    reason: str
    """Why: ``bad envelope: …``, ``exceeded maxDeliveries (N)``, ``deadline passed before the task started`` (or
    ``… before attempt N started``, ``… while the task waited for its children (gather); not resumed``),
    ``non-retryable: …``, ``handler failed on all N deliveries``, ``payload is N bytes, …``."""
    attempts: Ms
    """Runs attempted (0: dead-lettered before any run)."""
    finished_at: Ms
    traceback: NotRequired[str]
    """The failed run's traceback, its last 8 KiB, passwords redacted; only when a failed run dead-lettered it."""


class CancelledRecord(TypedDict):
    """``…:result:<task_id>`` of a cancelled task: by the worker that took or ran it (tierpool.runtime.task_control,
    ``CANCELLED``, or ``COMPLETE_MANY`` for a run that finished after its cancel) or by the producer's ``CANCEL``
    for a task it took out of a set."""

    task_id: Name
    status: Literal["cancelled"]
    tier: NotRequired[Name | None]
    """Absent when the run finished after its cancel (``COMPLETE_MANY``)."""
    attempts: Ms
    worker: NotRequired[Name]
    """The consumer that took or ran it; absent when the producer's ``CANCEL`` took it out of a set."""
    reason: str
    """``cancelled before it started``, ``cancelled while running``, or ``cancelled while running; its result
    was discarded``."""
    finished_at: Ms


class DeadLetter(TypedDict):
    """An entry of ``…:dlq``: the dead entry's own fields, byte for byte (any names and values: it may be the
    malformed entry that was refused), plus these (the ``DEAD_LETTER`` script: helpers/stream.lua)."""

    reason: str
    error: str
    """The last handler error ('' when it has none)."""
    deliveries: Digits
    """Runs attempted."""
    source_tier: Name
    source_id: Annotated[str, Field(pattern=r"^[0-9]+-[0-9]+$")]
    """The dead entry's id in its tier stream."""
    dead_lettered_at: Digits
    """ms since the epoch, Redis' clock."""
    traceback: NotRequired[str]
    """As the result record's."""
    truncated: NotRequired[str]
    """Set on the cut dead letter of an entry over the size limit: ``<field>=<bytes>`` for each value cut and
    ``other=<count>:<bytes>`` for the fields left out, space-separated."""


class UnscheduledDeadLetter(TypedDict):
    """An entry of ``…:dlq`` for a member of the due-time index that is not ``[tier, [field, value, …]]``
    (``MOVE_DUE``)."""

    reason: Literal["scheduled task is not an envelope"]
    scheduled: str
    """The member as it was."""
    dead_lettered_at: Digits


class ProgressEvent(TypedDict):
    """An entry of ``…:events:<task_id>`` that a running task's ``progress`` appended
    (tierpool.runtime.task_control)."""

    type: Literal["progress"]
    data: str
    """The progress data, JSON, at most 64 KiB."""
    at: Digits
    """ms since the epoch, the worker's clock."""


class OutcomeEvent(TypedDict):
    """The final entry of ``…:events:<task_id>`` (``COMPLETE_MANY``, ``DEAD_LETTER``, ``CANCELLED``, ``CANCEL``),
    appended only to an event stream that exists."""

    type: Literal["outcome"]
    status: Literal["succeeded", "dead_lettered", "cancelled"]
    at: Digits
    """ms since the epoch, Redis' clock."""


class FollowEvent(TypedDict):
    """The entry a follower (``wait_result``, ``follow``) appends before it reads the result record, which creates
    the event stream so that the outcome event is appended to it (tierpool.client.tracking)."""

    type: Literal["follow"]
    at: Digits
    """ms since the epoch, the follower's clock."""


DueMember = tuple[Name, list[str]]
"""A member of ``…:due``, ``…:throttled`` or ``…:stranded``, as JSON: ``[tier, [field, value, …]]``, the tier its
entry goes (back) to and the envelope's fields, names and values in turn (tierpool.protocol.members)."""
