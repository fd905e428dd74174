"""Redis URLs whose password holds the characters base64 and generated secrets use."""

from __future__ import annotations

import pytest

from tierpool.model.redis_url import RedisUrlError, parse_redis_url
from tierpool.store.connection import RedisSettings, redact_url


@pytest.mark.parametrize(
    ("url", "username", "password", "bare", "redacted"),
    [
        ("redis://:pa/ss@host:6379/0", None, "pa/ss", "redis://host:6379/0", "redis://:***@host:6379/0"),
        ("redis://app:pa?ss@host", "app", "pa?ss", "redis://host", "redis://app:***@host"),
        ("redis://:a+b/c==@host/2", None, "a+b/c==", "redis://host/2", "redis://:***@host/2"),
        ("redis://:a@b@host", None, "a@b", "redis://host", "redis://:***@host"),
        ("rediss://u:p%40ss@h:1/2", "u", "p@ss", "rediss://h:1/2", "rediss://u:***@h:1/2"),
        ("redis://host:6379/0?password=x&db=1", None, "x", "redis://host:6379/0?db=1", None),
        ("redis://host:6379", None, None, "redis://host:6379", "redis://host:6379"),
    ],
)
def test_credentials_are_read_up_to_the_last_at(
    url: str, username: str | None, password: str | None, bare: str, redacted: str | None
) -> None:
    parsed = parse_redis_url(url)
    assert (parsed.username, parsed.password, parsed.without_credentials()) == (username, password, bare)
    assert redact_url(url) == (redacted or "redis://host:6379/0?password=***&db=1")


@pytest.mark.parametrize(
    ("url", "part"),
    [
        ("redis://:s3cr/et@host:abc/0", "port"),
        ("redis://:s3cr/et@/0", "host"),
        ("redis://:s3cr/et@host/zero", "database"),
        ("http://:s3cr/et@host", "redis://"),
    ],
)
def test_an_unreadable_url_is_refused_without_repeating_it(url: str, part: str) -> None:
    with pytest.raises(RedisUrlError) as caught:
        parse_redis_url(url)
    assert part in str(caught.value)
    assert "s3cr" not in str(caught.value)


def test_the_client_gets_the_password_apart_from_the_url() -> None:
    """redis-py once read ``/`` as the end of the host: ``Port could not be cast to integer value as 'pa'``."""
    import redis

    settings = RedisSettings(url="redis://app:pa/ss?x@127.0.0.1:6380/3")
    client = redis.Redis.from_url(settings.url_for_client(), **settings.client_kwargs())
    kwargs = client.connection_pool.connection_kwargs
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("127.0.0.1", 6380, 3)
    assert (kwargs["username"], kwargs["password"]) == ("app", "pa/ss?x")
    assert "pa/ss" not in settings.url_for_client()


def test_a_password_in_the_url_still_wins_over_the_password_setting() -> None:
    settings = RedisSettings(url="redis://:from-url@host", password="from-secret")
    assert settings.client_kwargs()["password"] == "from-url"
    assert RedisSettings(url="redis://host", password="from-secret").client_kwargs()["password"] == "from-secret"
