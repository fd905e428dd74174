"""The operator never logs a Redis password: kopf at DEBUG dumps bodies and diffs, and posts object logs as Events."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from tierpool.model.redis_url import redact_urls_in
from tierpool_operator import logfilter


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Patching with: {'url': 'redis://:hun/ter2@r:6379/0'}", "Patching with: {'url': 'redis://:***@r:6379/0'}"),
        (
            '{"url": "rediss://app:p?w@r/1", "mode": "standalone"}',
            '{"url": "rediss://app:***@r/1", "mode": "standalone"}',
        ),
        ("two: redis://:a@x and redis://r/0?password=b", "two: redis://:***@x and redis://r/0?password=***"),
        ("no secret in redis://r:6379/0", "no secret in redis://r:6379/0"),
    ],
)
def test_urls_in_text_lose_their_passwords(text: str, expected: str) -> None:
    assert redact_urls_in(text) == expected


@pytest.fixture
def installed() -> Iterator[tuple[Capture, Capture]]:
    root, objects = logging.getLogger(), logging.getLogger(logfilter.OBJECT_LOGGER)
    on_root, on_objects = Capture(), Capture()
    root.addHandler(on_root)
    objects.addHandler(on_objects)  # where kopf's Event poster sits
    saved = root.level, list(objects.filters), list(on_root.filters)
    root.setLevel(logging.DEBUG)
    logfilter.install(verbose=True)
    try:
        yield on_root, on_objects
    finally:
        root.removeHandler(on_root)
        objects.removeHandler(on_objects)
        root.setLevel(saved[0])
        objects.filters[:] = saved[1]
        for handler in root.handlers:
            handler.filters = [
                f for f in handler.filters if not isinstance(f, logfilter.RedactUrls | logfilter.RoutineSuccess)
            ]


def test_kopf_object_logs_and_others_are_redacted_before_any_handler(installed: tuple[Capture, Capture]) -> None:
    on_root, on_objects = installed
    body = {"spec": {"redis": {"url": "redis://app:hun/ter2@r:6379/0"}}}
    logging.getLogger("kopf.objects").warning("Invalid spec: %s", body)
    logging.getLogger("kopf.activities.startup").debug("Diff: %r", body)
    seen = on_objects.messages + on_root.messages
    assert len(seen) == 3 and all("hun/ter2" not in message for message in seen), seen
    assert "redis://app:***@r:6379/0" in on_objects.messages[0]


def test_a_traceback_loses_its_password_in_every_handler(installed: tuple[Capture, Capture]) -> None:
    """kopf's Event poster and the root handlers format the record with a plain ``logging.Formatter``."""
    on_root, on_objects = installed
    written: list[str] = []

    class Formatting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            written.append(logging.Formatter().format(record))

    objects = logging.getLogger(logfilter.OBJECT_LOGGER)
    formatting = Formatting(logging.DEBUG)
    objects.addHandler(formatting)
    try:
        try:
            raise ConnectionError("cannot reach redis://:hun'ter 2@r:6379/0")
        except ConnectionError:
            objects.exception("Handler 'reconcile' failed")
    finally:
        objects.removeHandler(formatting)
    assert len(written) == 1 and "ConnectionError: cannot reach redis://:***@r:6379/0" in written[0], written
    assert "Traceback (most recent call last)" in written[0]
    assert all("hun" not in text for text in written + on_objects.messages + on_root.messages)
