"""Where a Redis URL's credentials end, alone and inside free text (log lines, dumped bodies, tracebacks)."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tierpool.model.redis_url import redact_urls_in, split_url

PASSWORDS = st.text(
    st.sampled_from(list("/?#@:%='\" <>&a1")) | st.characters(blacklist_categories=("Cc", "Cs")),
    min_size=1,
    max_size=40,
)
"""Any printable text: quotes, spaces, ``/ ? # @ %``, letters of any script."""
AROUND = [("connecting to ", " failed"), ("{'url': '", "', 'mode': 'standalone'}"), ('"url": "', '", "db": 1')]


@pytest.mark.parametrize(
    ("url", "userinfo", "address"),
    [
        ("redis://:p/?#@x@host:6379/0", ":p/?#@x", "host:6379/0"),  # raw / ? # @ in a password
        ("redis://app:a/b?c#d@host/1?client_name=w", "app:a/b?c#d", "host/1?client_name=w"),
        ("redis://h:6379/0?client_name=a@b", None, "h:6379/0?client_name=a@b"),  # an @ in the query
        ("redis://h/0?socket_timeout=5&client_name=me@pod", None, "h/0?socket_timeout=5&client_name=me@pod"),
        ("redis://[::1]:6379?client_name=a@b", None, "[::1]:6379?client_name=a@b"),
        ("unix:///run/redis.sock?client_name=a@b", None, "/run/redis.sock?client_name=a@b"),
        ("redis://:pw@h:6379/0?client_name=a@b", ":pw@h:6379/0?client_name=a", "b"),  # both: the last @ wins
        ("redis://:a?b@host", ":a?b", "host"),  # no address before the ?: a password
        ("redis://app:pa?ss@host", "app:pa?ss", "host"),  # port "pa" is no port
        ("redis://h:6379/0?a@b", "h:6379/0?a", "b"),  # not name=value pairs: a password
    ],
)
def test_the_credentials_end_at_the_last_at_unless_it_is_in_a_query(
    url: str, userinfo: str | None, address: str
) -> None:
    parsed = split_url(url)
    assert (parsed.userinfo, parsed.address) == (userinfo, address)


def _reads_as_a_port(password: str) -> bool:
    """``redis://app:6379/0?a=b@host`` is ambiguous: it also reads as host ``app`` with a query holding an @."""
    return re.match(r"\d+(/\d*)?\?[A-Za-z_]\w*=", password) is not None


@given(PASSWORDS, st.sampled_from(["", "app"]))
@example("ab/c?d@e#f", "app")
def test_a_whole_url_never_shows_any_part_of_its_password(password: str, user: str) -> None:
    if user and _reads_as_a_port(password):
        return
    parsed = split_url(f"redis://{user}:{password}@host:6379/0")
    assert (parsed.userinfo, parsed.address) == (f"{user}:{password}", "host:6379/0")
    assert parsed.redacted() == f"redis://{user}:***@host:6379/0"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("url 'redis://:it's@r:6379/0' refused", "url 'redis://:***@r:6379/0' refused"),
        ('{"url": "redis://app:say \\"hi\\"@r/1"}', '{"url": "redis://app:***@r/1"}'),
        ("connect redis://:two words@r:6379 failed", "connect redis://:***@r:6379 failed"),
        ("redis://app:a<b>c@r/0?password=x&db=1", "redis://app:***@r/0?password=***&db=1"),
        ("redis://:%27q%20@r and redis://r/0", "redis://:***@r and redis://r/0"),
        ("unix://:p w@/run/redis.sock is down", "unix://:***@/run/redis.sock is down"),
        ("redis://h:6379/0?client_name=a@b up", "redis://h:6379/0?client_name=a@b up"),
        ("redis://r:6379/0 owner me@example.com", "redis://r:6379/0 owner me@example.com"),
        ("redis://:p w@r/0\nnext line me@example.com", "redis://:***@r/0\nnext line me@example.com"),
        ("image repo/w@sha256:0123abc redis://:p'q@r", "image repo/w@sha256:0123abc redis://:***@r"),
    ],
)
def test_urls_in_text_lose_passwords_with_quotes_and_spaces(text: str, expected: str) -> None:
    assert redact_urls_in(text) == expected


def _reads_as_a_whole_url(password: str, user: str) -> bool:
    """A password whose part before its first space or quote ends a URL by itself: ``redis://app:6379 x@host`` or
    ``redis://:a@b x@host``, which free text cannot tell from a URL followed by words."""
    head = re.split(r"[\s'\"<>]", password, maxsplit=1)[0]
    if head == password:
        return False
    if user and re.fullmatch(r"\d+(/\d*)?(\?[A-Za-z_]\w*=.*)?", head):
        return True
    return re.search(r"@[\w.~-]+(:\d+)?(/\d*)?(\?[A-Za-z_]\w*=.*)?$", head) is not None


@given(PASSWORDS, st.sampled_from(["", "app"]), st.sampled_from(AROUND))
@example("it's", "", AROUND[1])
@example('a "b" c', "app", AROUND[2])
@example("p/?#@x y", "", AROUND[0])
def test_text_never_shows_any_part_of_a_password(password: str, user: str, around: tuple[str, str]) -> None:
    if (user and _reads_as_a_port(password)) or _reads_as_a_whole_url(password, user):
        return
    before, after = around
    text = f"{before}redis://{user}:{password}@host:6379/0{after}"
    assert redact_urls_in(text) == f"{before}redis://{user}:***@host:6379/0{after}"
