"""The protocol-version decisions (tierpool.protocol.compat): which entries a worker refuses, which published
specs a producer refuses."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tierpool.protocol.compat import newer_entry_reason, published_protocol
from tierpool.protocol.envelope import MalformedEntry, decode, decode_many, encode
from tierpool.protocol.version import PROTOCOL

NEWER = f"bad envelope: protocol {PROTOCOL + 1} is newer than this worker's ({PROTOCOL})"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, None),  # absent: a producer before protocol 10
        (str(PROTOCOL), None),
        ("1", None),
        (PROTOCOL, None),
        (str(PROTOCOL + 1), NEWER),
        (PROTOCOL + 1, NEWER),
        (str(PROTOCOL + 1).encode(), NEWER),
        (f" {PROTOCOL + 1} ", NEWER),
        (
            "99999999999999999999",
            f"bad envelope: protocol 99999999999999999999 is newer than this worker's ({PROTOCOL})",
        ),
        ("eleven", None),  # not a number: the envelope's validation names it
        ("-11", None),
        ("11.0", None),
        ("١١", None),  # Arabic-Indic digits: isdigit, but not a protocol
        (True, None),
    ],
)
def test_an_entry_of_a_newer_protocol_is_refused(value: object, reason: str | None) -> None:
    assert newer_entry_reason(value) == reason


def _entry(**extra: str) -> dict[str, Any]:
    return {**encode("t1", "p0", "{}", 1_700_000_000_000), **extra}


@pytest.mark.parametrize(
    ("protocol", "reason"),
    [
        (str(PROTOCOL + 1), NEWER),
        ("0", "bad envelope: protocol: Input should be greater than or equal to 1"),
        ("x", "bad envelope: protocol: Input should be a valid integer, unable to parse string as an integer"),
    ],
)
def test_the_worker_dead_letters_it_with_the_reason(protocol: str, reason: str) -> None:
    with pytest.raises(MalformedEntry, match=f"^{re.escape(reason)}$"):
        decode("1-0", _entry(protocol=protocol), 1)
    [refused] = decode_many([("1-0", _entry(protocol=protocol), 1)])
    assert isinstance(refused, MalformedEntry) and str(refused) == reason


def test_a_newer_protocol_is_named_before_any_other_fault() -> None:
    """A newer producer may have changed what another field means: its fault there is not the reason."""
    entry = _entry(protocol=str(PROTOCOL + 1), created_at="1.5e12", payload="not json")
    [refused] = decode_many([("1-0", entry, 1)])
    assert str(refused) == NEWER


def test_entries_of_this_protocol_and_older_ones_run() -> None:
    old = {key: value for key, value in _entry().items() if key != "protocol"}
    tasks = decode_many([("1-0", _entry(), 1), ("2-0", old, 1), ("3-0", _entry(protocol="9"), 1)])
    assert [type(task).__name__ for task in tasks] == ["Task"] * 3


def test_every_envelope_a_tierpool_client_writes_names_this_protocol() -> None:
    assert encode("t1", "p0", "{}", 1)["protocol"] == str(PROTOCOL)


@pytest.mark.parametrize(
    ("document", "expected"),
    [({"tiers": []}, None), ({"protocol": 10}, 10), ({"protocol": 11}, 11), ([], None), ("x", None)],
)
def test_the_published_protocol_is_read(document: object, expected: int | None) -> None:
    assert published_protocol(document) == expected


@pytest.mark.parametrize("value", [0, -1, "10", 10.0, True, None])
def test_a_published_protocol_that_is_not_a_whole_number_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match="not a whole number"):
        published_protocol({"protocol": value})
