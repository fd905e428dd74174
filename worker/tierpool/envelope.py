"""The task envelope stored in each stream entry, and the Task handed to handlers. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import from_json

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


def text_fields(raw: Mapping[Any, Any]) -> dict[str, str]:
    """Decode a redis-py entry dict with bytes keys and values into text."""
    return {_text(key): _text(value) for key, value in raw.items()}


def _validate(raw: Mapping[Any, Any]) -> Envelope:
    try:
        return Envelope.model_validate(raw)
    except ValidationError:
        if all(isinstance(key, str) for key in raw):
            raise
    return Envelope.model_validate(text_fields(raw))  # read by a client that does not decode responses


def decode(stream_id: str, raw: Mapping[Any, Any], attempt: int) -> Task:
    """A Task from a stream entry's fields; MalformedEntry with the reason when it is not a valid envelope."""
    try:
        envelope = _validate(raw)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "entry"
        raise MalformedEntry(f"bad envelope: {where}: {first['msg']}") from None
    try:
        payload = from_json(envelope.payload)  # pydantic-core's parser: several times faster than json.loads
    except ValueError as error:
        raise MalformedEntry(f"bad envelope: payload is not JSON ({error})") from None
    return Task(
        envelope.task_id,
        envelope.tier,
        payload,
        attempt,
        envelope.created_at,
        stream_id,
        envelope.escalated_from,
        envelope.deadline,
    )
