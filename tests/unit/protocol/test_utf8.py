"""Entries whose bytes are not UTF-8 (issue #23): read as tierpool's clients decode them (surrogateescape), every
one is refused with a reason naming its fields, never raised on, never run, and its bytes are kept."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierpool.protocol import utf8
from tierpool.protocol.envelope import MalformedEntry, Task, decode, decode_many, encode, not_utf8_reason

ESCAPE = "surrogateescape"
VALID = {b"task_id": b"t1", b"tier": b"p0", b"payload": b"{}", b"created_at": b"1"}
LONG_NAME_SHOWN = b"\xff" * utf8.SHOWN_BYTES


def as_read(fields: dict[bytes, bytes]) -> dict[str, str]:
    """Fields as a tierpool client reads them (see tierpool.store.connection.DECODING)."""
    return {key.decode("utf-8", ESCAPE): value.decode("utf-8", ESCAPE) for key, value in fields.items()}


@pytest.mark.parametrize(
    ("text", "ok", "shown", "bad"),
    [
        ("plain", True, "plain", None),
        ("caf\u00e9 \U0001f600", True, "caf\u00e9 \U0001f600", None),
        ("\ufffd", True, "\ufffd", None),  # a producer's own U+FFFD is text like any other
        (b"\xff\xfe".decode("utf-8", ESCAPE), False, "\ufffd\ufffd", (0xFF, 0)),
        (b"ok\xc3".decode("utf-8", ESCAPE), False, "ok\ufffd", (0xC3, 2)),
        (b"\xed\xa0\x80".decode("utf-8", ESCAPE), False, "\ufffd\ufffd\ufffd", (0xED, 0)),  # an encoded surrogate
        ("\ud800", False, "\ufffd\ufffd\ufffd", (0xED, 0)),  # not from a decoder, still refused
    ],
)
def test_text_says_whether_its_bytes_were_utf8(text: str, ok: bool, shown: str, bad: tuple[int, int] | None) -> None:
    assert utf8.is_utf8(text) is ok
    assert utf8.readable(text) == shown
    assert utf8.first_bad_byte(text) == bad


@given(st.binary(max_size=64))
def test_decoding_as_tierpool_does_keeps_every_byte(raw: bytes) -> None:
    text = utf8.as_text(raw)
    assert utf8.original(text) == raw
    assert utf8.is_utf8(text) == _valid(raw)


def _valid(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ({b"payload": b"\xff\xfe"}, "bad envelope: not UTF-8: payload (byte 0xff at 0)"),
        ({b"task_id": b"bad-\xff"}, "bad envelope: not UTF-8: task_id (byte 0xff at 4)"),
        ({b"tier": b"p\xc3"}, "bad envelope: not UTF-8: tier (byte 0xc3 at 1)"),
        ({b"tenant": b"\x80"}, "bad envelope: not UTF-8: tenant (byte 0x80 at 0)"),
        ({b"note": b"\xff"}, "bad envelope: not UTF-8: note (byte 0xff at 0)"),  # a field no worker reads
        ({b"\xff\xfe": b"1"}, "bad envelope: not UTF-8: field name b'\\xff\\xfe'"),
        ({b"\xff" * 40: b"1"}, f"bad envelope: not UTF-8: field name {LONG_NAME_SHOWN!r}..."),
        (
            {b"payload": b"\xff", b"created_at": b"-5"},
            "bad envelope: not UTF-8: payload (byte 0xff at 0); created_at: Input should be greater than or equal to 0",
        ),
    ],
)
def test_an_entry_with_bytes_that_are_not_utf8_is_refused_naming_them(bad: dict[bytes, bytes], reason: str) -> None:
    fields = VALID | bad
    for read in (as_read(fields), fields):  # as tierpool's clients read it, and as a client that does not decode
        with pytest.raises(MalformedEntry) as refused:
            decode("1-0", read, attempt=1)
        assert str(refused.value) == reason
        assert not_utf8_reason(read) == reason.split("; ", maxsplit=1)[0]
        (outcome,) = decode_many([("1-0", read, 1)])
        assert isinstance(outcome, MalformedEntry) and str(outcome) == reason


def test_a_read_with_one_bad_entry_still_runs_the_others_as_they_are() -> None:
    """Validation lets an unconstrained text field (the payload) through as it is: the read's check must not."""
    good = encode("t1", "p0", '{"caf\u00e9": 1}', 5)
    read = [("1-0", good, 1), ("2-0", as_read(VALID | {b"payload": b'"\xff"'}), 1), ("3-0", good, 2)]
    first, bad, last = decode_many(read)
    assert isinstance(first, Task) and first.payload == {"caf\u00e9": 1}
    assert isinstance(bad, MalformedEntry) and "not UTF-8: payload" in str(bad)
    assert isinstance(last, Task) and last.attempt == 2
    assert not_utf8_reason(good) is None


FIELD_NAMES = st.sampled_from([b"task_id", b"tier", b"payload", b"created_at", b"tenant", b"deadline"]) | st.binary(
    max_size=6
)


@given(
    st.lists(
        st.dictionaries(FIELD_NAMES, st.binary(max_size=12), max_size=4).map(lambda extra: VALID | extra),
        min_size=1,
        max_size=6,
    )
)
def test_random_bytes_in_random_fields_never_crash_the_decoder_nor_lose_an_entry(
    entries: list[dict[bytes, bytes]],
) -> None:
    read: list[tuple[str, Any, int]] = [(f"{i}-0", as_read(fields), 1) for i, fields in enumerate(entries)]
    decoded = decode_many(read)
    assert len(decoded) == len(entries)
    for fields, (_, text, _), outcome in zip(entries, read, decoded, strict=True):
        assert {utf8.original(k): utf8.original(v) for k, v in text.items()} == fields  # the bytes, all of them
        clean = all(_valid(part) for item in fields.items() for part in item)
        if clean:
            assert not str(outcome).startswith("bad envelope: not UTF-8")
        else:
            assert isinstance(outcome, MalformedEntry) and str(outcome).startswith("bad envelope: not UTF-8: ")
        assert type(decode_many([("0-0", fields, 1)])[0]) is type(outcome)  # read undecoded: the same verdict


def test_a_reply_of_bytes_reads_as_text_all_the_way_down() -> None:
    from tierpool.protocol.utf8 import as_text_reply

    error = ValueError("kept")
    reply = [b"a", (b"1-0", {b"k": b"\xff"}), {b"s"}, 7, None, error, "text"]
    assert as_text_reply(reply) == ["a", ("1-0", {"k": "\udcff"}), {"s"}, 7, None, error, "text"]
    assert as_text_reply(b"x") == "x" and as_text_reply(3) == 3
