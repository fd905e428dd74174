"""Task control, the pure parts: what a cancel found, progress events, checkpoint encoding, limits. No I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tierpool.model.durations import ms_floor
from tierpool.model.keys import RETRY_CONSUMER

EVENTS_MAXLEN = 256
"""A task's event stream is trimmed to about this many events (XADD MAXLEN ~)."""
MAX_CHECKPOINT_BYTES = 64 * 1024
"""The largest checkpoint state, as JSON."""
MAX_PROGRESS_BYTES = 64 * 1024
"""The largest progress event, as JSON."""
MIN_MARKER_TTL = 86_400.0
"""Cancel markers and checkpoints are kept at least a day (longer with a longer resultTTL or dedupeWindow)."""
FINAL_STATUSES = frozenset({"succeeded", "dead_lettered", "cancelled"})


class CancelState(StrEnum):
    """What a cancel found."""

    WAITING = "waiting"
    """Not running: in a tier's backlog, or waiting out a retry backoff. It will never run."""
    RUNNING = "running"
    """Running (or finished with its outcome on the way): its worker stops it within about one heartbeat."""
    FINISHED = "finished"
    """It has a result already: nothing was changed."""
    UNKNOWN = "unknown"
    """No such task in the pool's streams and no result: nothing was changed."""


@dataclass(frozen=True)
class EntryState:
    """A stream entry carrying the task: who owns it in the group (None: not pending) and whether the group has
    delivered it."""

    owner: str | None
    delivered: bool


def classify(found: Sequence[EntryState], has_result: bool) -> CancelState:
    """The state of a task from the entries that carry it (over every tier) and whether it has a result."""
    if any(entry.owner is not None and entry.owner != RETRY_CONSUMER for entry in found):
        return CancelState.RUNNING
    if any(entry.owner == RETRY_CONSUMER or not entry.delivered for entry in found):
        return CancelState.WAITING
    if has_result or found:  # acked: finished (its result may have expired)
        return CancelState.FINISHED
    return CancelState.UNKNOWN


def is_delivered(entry_id: str, last_delivered_id: str) -> bool:
    """Whether a stream ID is at or below the group's last-delivered-id."""
    return _id(entry_id) <= _id(last_delivered_id)


def _id(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def marker_ttl_ms(result_ttl: float, dedupe_window: float) -> int:
    """How long a cancel marker and a checkpoint are kept: as long as a result record or a dedupe key, and at
    least a day, so that a task waiting in a backlog or a retry backoff still finds them."""
    return ms_floor(max(result_ttl, dedupe_window, MIN_MARKER_TTL))


class CheckpointTooLarge(ValueError):
    """A checkpoint (or progress event) larger than the limit."""


def encode_limited(value: Any, limit: int, what: str) -> str:
    """``value`` as compact JSON; ValueError when it is not JSON-able, CheckpointTooLarge above ``limit`` bytes."""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{what} is not JSON-serialisable: {error}") from None
    size = len(text.encode("utf-8"))
    if size > limit:
        raise CheckpointTooLarge(f"{what} is {size} bytes as JSON; at most {limit} are allowed")
    return text


@dataclass(frozen=True)
class TaskEvent:
    """One event of a task's event stream."""

    id: str
    type: str
    """``progress`` (from the handler) or ``outcome`` (the final one)."""
    at: int | None = None
    """ms since the epoch."""
    data: Any = None
    """A progress event's data."""
    status: str | None = None
    """An outcome's status: succeeded, dead_lettered or cancelled."""

    @property
    def final(self) -> bool:
        return self.type == "outcome"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": self.type, "at": self.at}
        if self.final:
            out["status"] = self.status
        else:
            out["data"] = self.data
        return out


def parse_event(entry_id: str, fields: Mapping[str, str]) -> TaskEvent:
    """An event from its stream entry; data that does not decode is kept as text."""
    raw = fields.get("data")
    data: Any = None
    if raw is not None:
        try:
            data = json.loads(raw)
        except ValueError:
            data = raw
    at = fields.get("at")
    return TaskEvent(
        entry_id,
        fields.get("type", ""),
        int(at) if at and at.isascii() and at.isdigit() else None,
        data,
        fields.get("status"),
    )
