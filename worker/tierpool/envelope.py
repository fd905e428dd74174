"""The task envelope stored in each stream entry, and the Task handed to handlers. Pure."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

MAX_TASK_ID_LENGTH = 200


class Envelope(BaseModel):
    """The fields of a stream entry. Every value is stored as a string."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    task_id: str = Field(min_length=1, max_length=MAX_TASK_ID_LENGTH)
    tier: str = Field(min_length=1)
    payload: str
    created_at: int = Field(ge=0)
    escalated_from: str | None = None
    deadline: int | None = Field(default=None, ge=0)


@dataclass(frozen=True, slots=True)
class Task:
    """What a handler receives. Handlers must be idempotent by ``id``: a task can run more than once."""

    id: str
    tier: str
    payload: Any
    attempt: int
    created_at_ms: int
    stream_id: str
    escalated_from: str | None = None
    deadline_ms: int | None = None

    @property
    def created_at(self) -> datetime:
        return datetime.fromtimestamp(self.created_at_ms / 1000, tz=UTC)

    @property
    def deadline(self) -> datetime | None:
        return None if self.deadline_ms is None else datetime.fromtimestamp(self.deadline_ms / 1000, tz=UTC)


class MalformedEntry(ValueError):
    """A stream entry that cannot become a Task; the reason goes to the dead-letter stream."""


def encode(
    task_id: str,
    tier: str,
    payload_json: str,
    created_at_ms: int,
    escalated_from: str | None = None,
    deadline_ms: int | None = None,
) -> dict[str, str]:
    """Envelope fields for XADD."""
    fields = {"task_id": task_id, "tier": tier, "payload": payload_json, "created_at": str(created_at_ms)}
    if escalated_from is not None:
        fields["escalated_from"] = escalated_from
    if deadline_ms is not None:
        fields["deadline"] = str(deadline_ms)
    return fields


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def text_fields(raw: dict[Any, Any]) -> dict[str, str]:
    """Decode a redis-py entry dict with bytes keys and values into text."""
    return {_text(key): _text(value) for key, value in raw.items()}


def decode(stream_id: str, raw: dict[Any, Any], attempt: int) -> Task:
    """A Task from a stream entry's fields; MalformedEntry with the reason when it is not a valid envelope."""
    fields = text_fields(raw)
    try:
        envelope = Envelope.model_validate(fields)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "entry"
        raise MalformedEntry(f"bad envelope: {where}: {first['msg']}") from None
    try:
        payload = json.loads(envelope.payload)
    except json.JSONDecodeError as error:
        raise MalformedEntry(f"bad envelope: payload is not JSON ({error.msg} at {error.pos})") from None
    return Task(
        id=envelope.task_id,
        tier=envelope.tier,
        payload=payload,
        attempt=attempt,
        created_at_ms=envelope.created_at,
        stream_id=stream_id,
        escalated_from=envelope.escalated_from,
        deadline_ms=envelope.deadline,
    )
