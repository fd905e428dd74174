"""The JSON Schemas (2020-12) of what tierpool stores, generated from the types that define it: the Envelope
(tierpool.protocol.envelope) and the records (tierpool.protocol.records). ``make docs-gen`` writes them to
``schemas/``; tests/unit/test_wire_schemas.py fails when a committed one differs from what this makes. Pure.

A stream entry's values are all text, so a field the Envelope reads as a whole number is, on the wire, a string of
decimal digits; JSON values (a payload, a progress event's data) are strings holding JSON.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from pydantic import TypeAdapter

from tierpool.model.field_docs import own_field_docs
from tierpool.protocol import records
from tierpool.protocol.envelope import MAX_TASK_ID_LENGTH, Envelope

DIALECT = "https://json-schema.org/draft/2020-12/schema"
BASE = "https://raw.githubusercontent.com/tierpool/tierpool/main/schemas/"
TEXT = {"type": "string"}
WHOLE = r"^(0|[1-9][0-9]*)$"
POSITIVE = r"^[1-9][0-9]*$"


def _tidy(node: Any) -> Any:
    """Pydantic's schema without titles, and ``X | None`` as X where None is never written."""
    if isinstance(node, list):
        return [_tidy(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _tidy(value) for key, value in node.items() if key != "title"}
    options = [option for option in out.get("anyOf", []) if option != {"type": "null"}]
    if "anyOf" in out and len(options) == 1:
        del out["anyOf"]
        out.update(options[0])
    return out


def _described(cls: type[Any], nullable: frozenset[str] = frozenset()) -> dict[str, Any]:
    """``cls``'s schema (tidied) with its docstring and each field's as descriptions; fields in ``nullable`` keep
    their null (a record writes them as null)."""
    raw = TypeAdapter(cls).json_schema()
    out: dict[str, Any] = _tidy(raw)
    for name in nullable:
        out["properties"][name] = {key: value for key, value in raw["properties"][name].items() if key != "title"}
    out["description"] = prose(cls.__doc__ or "")
    for name, doc in own_field_docs(cls).items():
        out["properties"][name] = {"description": prose(doc), **out["properties"][name]}
    return out


def prose(doc: str) -> str:
    """A docstring as one line of Markdown: lines joined, ````code```` as ```code```."""
    return " ".join(inspect.cleandoc(doc).split()).replace("``", "`")


def _as_text(prop: dict[str, Any]) -> dict[str, Any]:
    """A property the reader takes as a whole number, as the decimal text a stream entry holds."""
    if prop.get("type") != "integer":
        return prop
    rest = {key: value for key, value in prop.items() if key not in ("type", "minimum")}
    return {**rest, "type": "string", "pattern": POSITIVE if prop.get("minimum", 0) >= 1 else WHOLE}


def _document(name: str, title: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"$schema": DIALECT, "$id": BASE + name, "title": title, **body}


def envelope_schema() -> dict[str, Any]:
    schema = _described(Envelope)
    schema["description"] = (
        "The fields of a task's entry in a tier stream (XADD), all text. A worker dead-letters an entry that does "
        "not validate (reason `bad envelope: …`), or whose protocol is newer than its own. The worker also reads "
        "a whole number with surrounding spaces, a sign or a fraction of zero as pydantic's lax integers do; "
        "write plain decimal digits. tierpool's clients also refuse a task_id with whitespace, and at most "
        f"{MAX_TASK_ID_LENGTH} characters holds for every task_id. A tier that adopts a stream (`tiers[].stream`) "
        "also takes the seed formats (docs/how-to/adopt-streams.md). See docs/reference/producer-contract.md."
    )
    schema["properties"] = {name: _as_text(prop) for name, prop in schema["properties"].items()}
    schema["properties"]["payload"]["contentMediaType"] = "application/json"
    schema["additionalProperties"] = TEXT
    return _document("envelope.schema.json", "tierpool envelope", schema)


def _variant(cls: type[Any], every: set[str], nullable: frozenset[str] = frozenset()) -> dict[str, Any]:
    """One shape of a ``oneOf``: its fields, and every field of the other shapes that it never has as ``false``."""
    schema = _described(cls, nullable)
    for name in sorted(every - set(schema["properties"])):
        schema["properties"][name] = False
    return schema


def _one_of(*variants: tuple[type[Any], frozenset[str]], text: bool = False) -> list[dict[str, Any]]:
    every = {name for cls, _ in variants for name in TypeAdapter(cls).json_schema()["properties"]}
    shapes = [_variant(cls, every if not text else set(), nullable) for cls, nullable in variants]
    for shape in shapes if text else []:
        shape["additionalProperties"] = TEXT
    return shapes


def result_schema() -> dict[str, Any]:
    body = {
        "description": (
            "A task's result record, `…:result:<task_id>`, a JSON object (TTL `tasks.resultTTL`). Which fields it "
            "has depends on `status`: each shape below lists its own and forbids the others'. It is written once, "
            "with the ack, by the consumer that owned the entry (or by `CANCEL` for a task it took out of a set)."
        ),
        "type": "object",
        "required": ["task_id", "status"],
        "oneOf": _one_of(
            (records.SucceededRecord, frozenset({"escalated_from"})),
            (records.DeadLetteredRecord, frozenset()),
            (records.CancelledRecord, frozenset({"tier"})),
        ),
    }
    return _document("result.schema.json", "tierpool result record", body)


def dead_letter_schema() -> dict[str, Any]:
    body = {
        "description": (
            "An entry of the dead-letter stream `…:dlq`, all text: a dead task's own fields (any names and values, "
            "as it was written) plus those below, or a due-index member that did not decode."
        ),
        "type": "object",
        "oneOf": _one_of((records.DeadLetter, frozenset()), (records.UnscheduledDeadLetter, frozenset()), text=True),
    }
    return _document("dead-letter.schema.json", "tierpool dead letter", body)


def event_schema() -> dict[str, Any]:
    body = {
        "description": (
            "An entry of a task's event stream `…:events:<task_id>` (XADD MAXLEN ~ 256, TTL `tasks.resultTTL`), "
            "all text. A reader stops at the `outcome` event: the result record is there."
        ),
        "type": "object",
        "oneOf": _one_of(
            (records.ProgressEvent, frozenset()),
            (records.OutcomeEvent, frozenset()),
            (records.FollowEvent, frozenset()),
            text=True,
        ),
    }
    return _document("event.schema.json", "tierpool task event", body)


def due_member_schema() -> dict[str, Any]:
    body = _tidy(TypeAdapter(records.DueMember).json_schema())
    body["description"] = prose(
        """A member of the due-time index `…:due` (score: when it is due, ms since the epoch on Redis' clock), of
        `…:throttled` (score: its reserved start) or of `…:stranded` (score: its next try), as JSON. The second
        item holds the envelope's fields, name then value, an even count (envelope.schema.json describes them),
        with `due` (and `attempts`, `paid` for a task coming back) set by the script that scheduled it."""
    )
    return _document("due-member.schema.json", "tierpool due-index member", body)


SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "envelope.schema.json": envelope_schema,
    "result.schema.json": result_schema,
    "dead-letter.schema.json": dead_letter_schema,
    "event.schema.json": event_schema,
    "due-member.schema.json": due_member_schema,
}
"""Every schema by its file name under ``schemas/``."""


def closed(name: str) -> dict[str, Any]:
    """``schemas/<name>`` with every field it does not name forbidden: each object shape that lists its fields gets
    ``additionalProperties: false`` (a dead letter also takes the envelope's fields, the dead entry's own). The
    tests validate what the code writes against these, so that a field written but not documented fails them.

    The published schemas stay open on purpose: a protocol grows by adding fields (``escalated_from``,
    ``created_at`` and ``traceback`` were added so), and a reader that validates with them must keep accepting
    what a newer worker writes; an envelope may carry its producer's own fields (kept, and dead-lettered with
    it), and a dead letter is the dead entry's fields, whatever they are. Pure."""
    envelope = envelope_schema()["properties"]

    def close(node: Any, dead_letter: bool) -> Any:
        if isinstance(node, list):
            return [close(item, dead_letter) for item in node]
        if not isinstance(node, dict):
            return node
        out = {key: close(value, dead_letter) for key, value in node.items()}
        if isinstance(out.get("properties"), dict):
            if dead_letter and "source_id" in out["properties"]:
                out["properties"] = {**dict.fromkeys(envelope, TEXT), **out["properties"]}
            out["additionalProperties"] = False
        return out

    closed_schema: dict[str, Any] = close(SCHEMAS[name](), name == "dead-letter.schema.json")
    return closed_schema


def schema_text(name: str) -> str:
    """The file ``schemas/<name>`` as generated."""
    return json.dumps(SCHEMAS[name](), indent=2, ensure_ascii=False) + "\n"
