"""Entries of the formats a pool takes, as they are, from a stream it adopts (``tiers[].stream``): what a
producer that knows nothing of tierpool writes, such as the seed articles' orchestrators. Pure, no I/O.

An entry that lacks an envelope field is completed before the envelope rules see it (:func:`adopt_fields`):

- **task_id:** the entry's own; else its payload's own (a JSON object whose ``task_id`` is a string of 1 to
  :data:`MAX_TASK_ID_BYTES` bytes, as seed 004's ``SwarmTaskPayload``); else ``<stream>/<entry id>``
  (:func:`derived_task_id`), the same on every redelivery and reclaim of the entry.

A script that moves the entry (escalation, a long retry, a throttle, the tenant gate's hold, a dead letter) writes
the completed fields into the copy (tierpool/scripts/helpers/adopted.lua's ``adopted_entry`` implements the same
rules), so the task keeps its id, payload and created_at wherever it lands, and its dead letter can be replayed.
- **tier:** the stream's tier (a task always runs as its stream's tier: tierpool.protocol.entry_rules).
- **payload:** an entry with no ``payload`` field carries its data in its fields: the payload is the JSON object
  of every field that is not an envelope field.
- **created_at:** the entry id's time when absent; a number with a fraction (``time.time()``) is read as seconds
  below :data:`tierpool.protocol.entry_rules.SECONDS_BELOW` (whole numbers are read by
  :func:`tierpool.protocol.entry_rules.created_at_ms`), as ms at or above it.
- **priority_ttl_s:** the task's own escalation time, in seconds, instead of its tier's ``escalateAfter``
  (:func:`escalation_ms`), counted from its ``created_at`` (:func:`escalation_due`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping

from pydantic_core import from_json

from tierpool.protocol.entry_rules import SECONDS_BELOW
from tierpool.protocol.envelope import Envelope

MAX_TASK_ID_BYTES = 200
"""A payload's own task_id is taken up to this many UTF-8 bytes (the envelope's limit is 200 characters)."""
PRIORITY_TTL_FIELD = "priority_ttl_s"
ENVELOPE_FIELDS = frozenset(Envelope.__required_keys__ | Envelope.__optional_keys__ | {"protocol", PRIORITY_TTL_FIELD})
"""The fields that are the envelope's, not a payload's (an entry without ``payload`` carries the others)."""
SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?")
"""A ``priority_ttl_s`` is taken when it is digits, or digits, a dot and digits (helpers/adopted.lua's rule)."""
FRACTION = re.compile(r"[0-9]+\.[0-9]*")
WHOLE = re.compile(r"[0-9]+")


def derived_task_id(stream: str, entry_id: str) -> str:
    """The task_id of an entry that carries none, nor its payload: its stream's key and its entry id."""
    return f"{stream}/{entry_id}"


def payload_task_id(payload: str) -> str | None:
    """The task_id a payload carries: a JSON object's ``task_id`` string of 1 to :data:`MAX_TASK_ID_BYTES` bytes;
    None for any other payload."""
    if "task_id" not in payload:  # most payloads: no parse
        return None
    try:
        value = from_json(payload)
    except ValueError:
        return None
    task_id = value.get("task_id") if isinstance(value, dict) else None
    if isinstance(task_id, str) and 1 <= len(task_id.encode("utf-8", "surrogatepass")) <= MAX_TASK_ID_BYTES:
        return task_id
    return None


def task_id_of(fields: Mapping[str, str], stream: str, entry_id: str) -> str:
    """The task_id of an entry: its own, its payload's own, or the derived one."""
    own = fields.get("task_id")
    if own is not None:
        return own
    payload = fields.get("payload")
    from_payload = payload_task_id(payload) if payload is not None else None
    return from_payload if from_payload is not None else derived_task_id(stream, entry_id)


def created_at_text(value: str) -> str:
    """A ``created_at`` with a fraction as whole ms: seconds below SECONDS_BELOW, ms from there; any other value
    as it is (the envelope reads whole numbers, and refuses what is not a number)."""
    if not FRACTION.fullmatch(value):
        return value
    number = float(value)
    return str(math.floor(number * 1000 if number < SECONDS_BELOW else number))


def entry_ms(entry_id: str) -> int:
    """The time part of a stream entry id (``<ms>-<seq>``)."""
    return int(entry_id.partition("-")[0])


def escalation_ms(own: str | None, default_ms: int | None) -> int | None:
    """How long an undelivered entry waits in its tier before it moves up one: its own ``priority_ttl_s`` in ms
    (floored) when that is a valid number of seconds, else the tier's ``escalateAfter`` (``default_ms``; None:
    the entry never escalates)."""
    if own is not None and SECONDS.fullmatch(own):
        return math.floor(float(own) * 1000)
    return default_ms


def escalation_due(
    entry_id: str, own: str | None, now_ms: int, default_ms: int | None, created_at: str | None = None
) -> bool:
    """Whether an undelivered entry is due to escalate at ``now_ms``: its escalation time (:func:`escalation_ms`) has
    passed since its ``created_at`` (read as :func:`created_at_text`, a whole number below SECONDS_BELOW as seconds;
    its id's time when absent or not a number) for
    its own ``priority_ttl_s``, counted once as the seed's sweeper counts it (a task past it moves up a tier on each
    pass), or since it entered its stream (its id's time) for the tier's ``escalateAfter``."""
    after = escalation_ms(own, default_ms)
    if after is None:
        return False
    since = entry_ms(entry_id)
    if own is not None and SECONDS.fullmatch(own) and created_at is not None:
        if WHOLE.fullmatch(created_at):  # a whole number below SECONDS_BELOW is seconds, as the envelope reads it
            since = int(created_at) * 1000 if int(created_at) < SECONDS_BELOW else int(created_at)
        elif FRACTION.fullmatch(created_at):
            since = int(created_at_text(created_at))
    return since + after <= now_ms


def complete(fields: Mapping[str, str]) -> bool:
    """Whether an entry has every field :func:`adopt_fields` completes (the common case, checked first)."""
    created_at = fields.get("created_at")
    return (
        "task_id" in fields
        and "tier" in fields
        and "payload" in fields
        and created_at is not None
        and ("." not in created_at)
    )


def adopt_fields(fields: Mapping[str, str], stream: str, entry_id: str, tier: str) -> Mapping[str, str]:
    """An entry's fields completed as the module docstring says; ``fields`` itself when nothing lacks."""
    if complete(fields) or not all(isinstance(key, str) for key in fields):
        return fields
    found = dict(fields)
    if "payload" not in found:
        data = {key: value for key, value in fields.items() if key not in ENVELOPE_FIELDS}
        found["payload"] = json.dumps(data, ensure_ascii=False)
    found.setdefault("task_id", task_id_of(found, stream, entry_id))
    found.setdefault("tier", tier)
    found["created_at"] = created_at_text(found.get("created_at", str(entry_ms(entry_id))))
    return found
