"""The rules a worker enforces on every entry it takes, whatever wrote it: a tierpool client, a plain ``XADD``,
or a hostile producer. The producer-side checks (tierpool.protocol.submission) are a courtesy that a plain XADD
skips; these are the ones that hold. Pure, no I/O.

- **Size:** a payload over ``tasks.maxPayloadBytes``, or an entry over that plus :data:`ENTRY_ALLOWANCE_BYTES`
  (a huge field other than ``payload``), is dead-lettered before anything decodes it, its dead letter cut
  (:data:`DEAD_LETTER_CUT_BYTES`).
- **Tier:** a task's tier is the stream it was read from; the envelope's ``tier`` field is only logged when it
  differs. The stream is what the producer wrote to, what the group read by weight and what the scaler counted,
  so the task runs, and is recorded and measured, under that tier; dead-lettering it would refuse a runnable task
  over a redundant field.
- **created_at:** see :func:`created_at_ms`.
- **Tenant:** a task with a tenant on a tier with ``tenantConcurrency`` runs only once the gate admitted it (the
  ADMIT_ENTRIES script); its tenant must be a valid name (:func:`tenant_refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierpool.protocol import tenancy

ENTRY_ALLOWANCE_BYTES = 64 * 1024
"""Bytes an entry may hold beyond its payload limit: every other envelope field together (a task_id is at most
200 characters, a tenant 128) stays far below it."""
DEAD_LETTER_CUT_BYTES = 1024
"""An oversized entry's dead letter keeps each field value's first this many bytes (and no longer field name)."""
DEAD_LETTER_MOST_FIELDS = 32
"""... and at most this many fields, the entry's first: about 100 KiB at most, whatever the entry held."""
DEAD_LETTER_CUT = (DEAD_LETTER_CUT_BYTES, DEAD_LETTER_MOST_FIELDS)
"""How the DEAD_LETTER script cuts an oversized entry (its optional ARGV)."""
SECONDS_BELOW = 10**11
"""A ``created_at`` below this is read as seconds: as ms it would be before 1973-03-03, as seconds it is before
the year 5138, and a value in seconds read as ms gives a queue wait of some 55 years (1.8e12 ms)."""
EARLIEST_CREATED_AT_MS = 1_500_000_000_000
"""2017-07-14: no task of this protocol was created before. An older ``created_at`` (after the seconds rule) is
not a submit time."""
CLOCK_SKEW_MS = 60_000
"""How far in the future a producer's clock may put ``created_at`` before it is clamped to now."""


def _size(value: Any) -> int:
    """Bytes of a field as stored (text from a client that decodes with ``replace`` or ``surrogateescape``)."""
    if isinstance(value, bytes):
        return len(value)
    text = str(value)
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return len(text.encode("utf-8", "surrogatepass"))


def within_size_at_a_glance(fields: Mapping[Any, Any], max_payload_bytes: int) -> bool:
    """True when the entry is surely within every size limit, counted in C without encoding anything (4 bytes a
    character at most); False: ask :func:`size_refusal`."""
    return 4 * (sum(map(len, fields)) + sum(map(len, fields.values()))) <= max_payload_bytes


def _payload(fields: Mapping[Any, Any]) -> Any:
    return fields.get("payload", fields.get(b"payload", ""))


def size_refusal(fields: Mapping[Any, Any], max_payload_bytes: int) -> str | None:
    """The dead-letter reason of an entry over the pool's payload limit, naming the size and the limit; None when
    it is within it. O(1) a field while the entry is ASCII."""
    payload = _payload(fields)
    if 4 * len(payload) > max_payload_bytes:  # a UTF-8 character is at most 4 bytes: maybe over, count them
        size = _size(payload)
        if size > max_payload_bytes:
            return f"payload is {size} bytes, over tasks.maxPayloadBytes ({max_payload_bytes})"
    allowed = max_payload_bytes + ENTRY_ALLOWANCE_BYTES
    if sum(len(key) + len(value) for key, value in fields.items()) * 4 <= allowed:
        return None
    size = sum(_size(key) + _size(value) for key, value in fields.items())
    if size > allowed:
        return (
            f"entry is {size} bytes, over tasks.maxPayloadBytes ({max_payload_bytes}) plus {ENTRY_ALLOWANCE_BYTES}"
            " for its other fields"
        )
    return None


def dead_letter_task_id(fields: Mapping[Any, Any]) -> str:
    """The task_id an oversized entry's dead letter is recorded under: '' when it is too long to keep (the
    DEAD_LETTER script then drops it and writes no result record)."""
    task_id = fields.get("task_id", "")
    return task_id if isinstance(task_id, str) and _size(task_id) <= DEAD_LETTER_CUT_BYTES else ""


@dataclass(frozen=True)
class CreatedAt:
    ms: int
    """The ``created_at`` to count queue waits from and to record."""
    note: str | None = None
    """What was read differently, for the log; None when the value stood as it was."""


def created_at_stands(value: int, now_ms: int) -> bool:
    """Whether a ``created_at`` is taken as it is (the common case, checked first): :func:`created_at_ms` would
    return it unchanged, with no note."""
    return EARLIEST_CREATED_AT_MS <= value <= now_ms + CLOCK_SKEW_MS


def created_at_ms(value: int, now_ms: int) -> CreatedAt:
    """A task's ``created_at`` (ms since the epoch, a whole number >= 0: the envelope refuses anything else,
    negative or not a number, and the entry is dead-lettered) as the worker counts it:

    - below :data:`SECONDS_BELOW`: seconds, so times 1000;
    - then before :data:`EARLIEST_CREATED_AT_MS` (0, or 1 meaning 1970), or more than :data:`CLOCK_SKEW_MS` after
      ``now_ms``: not a submit time, clamped to now (the task runs; its queue wait counts as 0).

    So a queue wait or an SLA metric is never inflated by a wrong unit or a wrong clock."""
    read = value * 1000 if value < SECONDS_BELOW else value
    if read < EARLIEST_CREATED_AT_MS:
        return CreatedAt(now_ms, f"created_at {value} (read as {read} ms) is before 2017: counted from now")
    if read > now_ms + CLOCK_SKEW_MS:
        unit = " (seconds)" if read != value else ""
        return CreatedAt(now_ms, f"created_at {value}{unit} is {read - now_ms} ms in the future: counted from now")
    if read != value:
        return CreatedAt(read, f"created_at {value} is in seconds: read as {read} ms")
    return CreatedAt(value)


def tier_note(envelope_tier: str, stream_tier: str) -> str | None:
    """The log line for an envelope whose ``tier`` field names another tier than its stream; None when they agree."""
    if envelope_tier == stream_tier:
        return None
    return f"its tier field says {envelope_tier!r}; it runs, and is recorded, as {stream_tier!r}, its stream's tier"


def gated(tenant: str | None, limit: int | None) -> bool:
    """Whether a task must pass its tenant's gate before it runs: it has a tenant, and its tier a limit."""
    return tenant is not None and limit is not None


def tenant_refusal(tenant: str) -> str | None:
    """The dead-letter reason of a gated task whose tenant is not a valid tenant name (the held set stores it in
    its members, so a NUL in it would corrupt them); None for a valid one."""
    problem = tenancy.tenant_error(tenant)
    return None if problem is None else f"bad envelope: tenant: {problem}"
