"""Dead letters whose bytes are not UTF-8, as ``tierpool dlq list`` shows them: readable, and every byte kept."""

import base64
import json

from tierpool.store.dlq import _read

REPLY = [  # an undecoded XRANGE reply of the dead-letter stream, as redis-py parses it
    (
        b"1-0",
        {
            b"task_id": b"bad-\xff",
            b"payload": b"{}",
            b"\xfe": b"x",
            b"reason": b"bad envelope: not UTF-8: task_id (byte 0xff at 4), field name b'\\xfe'",
            b"deliveries": b"1",
            b"source_tier": b"p0",
        },
    ),
    (b"2-0", {b"task_id": b"fine", b"payload": b'{"caf\xc3\xa9": 1}', b"created_at": b"1", b"reason": b"r"}),
]


def test_a_dead_letter_that_is_not_utf8_lists_readably_with_its_exact_bytes() -> None:
    bad, fine = _read(REPLY)
    shown = bad.to_json()
    assert json.dumps(shown, ensure_ascii=False).encode()  # printable as it is
    assert (shown["id"], shown["task_id"], shown["source_tier"], shown["deliveries"]) == ("1-0", "bad-\ufffd", "p0", 1)
    assert shown["not_utf8"] == {
        "task_id": base64.b64encode(b"bad-\xff").decode(),
        "base64:" + base64.b64encode(b"\xfe").decode(): base64.b64encode(b"x").decode(),
    }
    assert not bad.is_envelope
    assert fine.to_json()["payload"] == {"caf\u00e9": 1} and fine.not_utf8 == {} and fine.is_envelope


def test_a_payload_lists_as_the_json_it_holds_or_as_its_text() -> None:
    [listed] = _read([(b"3-0", {b"task_id": b"t", b"payload": b'{"ticket": 42, "tags": ["a"]}'})])
    assert listed.to_json()["payload"] == {"ticket": 42, "tags": ["a"]}
    [plain] = _read([(b"4-0", {b"task_id": b"t", b"payload": b"not json {"})])
    assert plain.to_json()["payload"] == "not json {"
    [bad] = _read([(b"5-0", {b"task_id": b"t", b"payload": b'"\xff"'})])
    assert bad.to_json()["payload"] == '"\ufffd"'
