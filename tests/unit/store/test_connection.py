"""The asyncio client's hiredis command packing must write exactly the bytes redis-py's own packing writes."""

from dataclasses import replace
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import DataError

from tierpool.model.spec import RedisMode, SentinelSpec
from tierpool.store.connection import RedisSettings, TlsSettingsError, async_client, parse_sentinels

COMMANDS: list[tuple[Any, ...]] = [
    ("PING",),
    ("SET", "key", "value"),
    ("EVALSHA", "abc", 2, "k1", "k2", b'{"a":1}', 86_400_000, -1, 0),
    ("SET", "k", 0.1),
    ("SET", "k", 1e20),
    ("SET", "k", "caf\u00e9 \u2603"),
    ("SET", "k", b"\x00\xff raw"),
    ("SET", "k", memoryview(b"view")),
    ("SET", "k", ""),
    ("CONFIG GET", "maxmemory"),
    (b"CONFIG GET", "maxmemory"),
    (b"GET", "k"),
    ("XADD", "s", "*", "f", "x" * 10_000),
]


def _ours(url: str) -> aioredis.Connection:
    client = async_client(RedisSettings(url=url))
    return client.connection_pool.make_connection()  # type: ignore[return-value]


@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "rediss://localhost:6380/0", "unix:///tmp/r.sock"])
@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: str(command[0]))
def test_hiredis_packing_matches_redis_py(url: str, command: tuple[Any, ...]) -> None:
    ours = _ours(url)
    assert type(ours).__name__.endswith("HiredisPacking")
    reference = aioredis.Connection()
    assert b"".join(ours.pack_command(*command)) == b"".join(reference.pack_command(*command))


@pytest.mark.parametrize("bad", [None, True])
def test_unpackable_arguments_still_raise_redis_py_errors(bad: object) -> None:
    with pytest.raises(DataError):
        _ours("redis://localhost:6379/0").pack_command("SET", "k", bad)


def test_the_pipeline_packs_through_the_same_path() -> None:
    ours, reference = _ours("redis://localhost:6379/0"), aioredis.Connection()
    commands = [(("SET", "a", 1), {}), (("GET", "a"), {})]
    packed = b"".join(ours.pack_commands([args for args, _ in commands]))
    assert packed == b"".join(reference.pack_commands([args for args, _ in commands]))


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://localhost:6379/0", "redis://localhost:6379/0"),
        ("redis://:hunter2@redis:6379/0", "redis://:***@redis:6379/0"),
        ("rediss://app:hunter2@redis:6380/1", "rediss://app:***@redis:6380/1"),
        ("redis://hunter2@redis/0", "redis://***@redis/0"),
        ("redis://redis:6379/0?password=hunter2", "redis://redis:6379/0?password=***"),
        (
            "redis://redis/0?socket_timeout=5&password=hunter2&db=1",
            "redis://redis/0?socket_timeout=5&password=***&db=1",
        ),
        ("redis://app:p%40ss@redis/0?Password=hunter2", "redis://app:***@redis/0?Password=***"),
    ],
)
def test_every_form_of_password_is_redacted(url: str, shown: str) -> None:
    assert RedisSettings(url=url).redacted_url() == shown
    assert "hunter2" not in shown


@pytest.mark.parametrize(
    ("flag", "environ", "pool_mode", "expected"),
    [
        (None, {}, RedisMode.STANDALONE, RedisMode.STANDALONE),
        (None, {}, RedisMode.CLUSTER, RedisMode.CLUSTER),
        (None, {"TIERPOOL_REDIS_MODE": "cluster"}, RedisMode.STANDALONE, RedisMode.CLUSTER),
        (None, {"TIERPOOL_REDIS_MODE": "standalone"}, RedisMode.CLUSTER, RedisMode.STANDALONE),
        ("standalone", {"TIERPOOL_REDIS_MODE": "cluster"}, RedisMode.CLUSTER, RedisMode.STANDALONE),
        ("cluster", {}, RedisMode.STANDALONE, RedisMode.CLUSTER),
    ],
)
def test_the_mode_comes_from_the_flag_then_the_environment_then_the_pool(
    flag: str | None, environ: dict[str, str], pool_mode: RedisMode, expected: RedisMode
) -> None:
    assert RedisSettings.from_env(environ, mode=flag, fallback_mode=pool_mode).mode is expected


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="replicated"):
        RedisSettings.from_env({"TIERPOOL_REDIS_MODE": "replicated"})


@pytest.mark.parametrize(
    ("mode", "kind"),
    [(RedisMode.STANDALONE, aioredis.Redis), (RedisMode.CLUSTER, AsyncRedisCluster)],
)
def test_the_mode_chooses_the_client(mode: RedisMode, kind: type) -> None:
    """(The sync cluster client reads the slot map when it is built, so it is checked on a real cluster.)"""
    assert isinstance(async_client(RedisSettings(url="redis://seed:7000/0", mode=mode)), kind)


@pytest.mark.parametrize(
    ("addresses", "pairs"),
    [
        (["a:26379"], (("a", 26379),)),
        ([" a:1 ", "", "b.example:2"], (("a", 1), ("b.example", 2))),
        (["[::1]:26379"], (("::1", 26379),)),
        ([], ()),
    ],
)
def test_sentinel_addresses_parse(addresses: list[str], pairs: tuple[tuple[str, int], ...]) -> None:
    assert parse_sentinels(addresses) == pairs


@pytest.mark.parametrize("bad", ["a", "a:", ":1", "a:b", "redis://a:1"])
def test_a_malformed_sentinel_address_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        parse_sentinels([bad])


SENTINEL = RedisSettings(mode=RedisMode.SENTINEL, sentinels=(("s", 26379),), master_name="m")


@pytest.mark.parametrize(
    ("settings", "master", "sentinel"),
    [
        (SENTINEL, {"db": 0}, {}),
        (replace(SENTINEL, url="redis://u:urlpw@x/3"), {"db": 3, "username": "u", "password": "urlpw"}, {}),
        (replace(SENTINEL, url="redis://u:urlpw@x/3", password="pw"), {"password": "pw", "username": "u"}, {}),
        (replace(SENTINEL, password="pw", sentinel_password="spw"), {"password": "pw"}, {"password": "spw"}),
        (replace(SENTINEL, tls=True), {"ssl": True, "ssl_check_hostname": True}, {"ssl": True}),
        (replace(SENTINEL, url="rediss://x/0", tls_insecure=True), {"ssl": True}, {"ssl_check_hostname": False}),
        (
            replace(SENTINEL, tls=True, tls_cert_file="c.pem", tls_key_file="k.pem"),
            {"ssl_certfile": "c.pem", "ssl_keyfile": "k.pem"},
            {"ssl_certfile": "c.pem", "ssl_keyfile": "k.pem"},
        ),
    ],
)
def test_sentinel_mode_carries_password_and_tls(
    settings: RedisSettings, master: dict[str, Any], sentinel: dict[str, Any]
) -> None:
    """The master's credentials and database come from the URL and the password Secret; the sentinels get their
    own password and the same TLS."""
    got_master, got_sentinel = settings.sentinel_kwargs()
    assert got_master.items() >= master.items()
    assert got_sentinel.items() >= sentinel.items()
    assert "password" not in got_sentinel or got_sentinel["password"] == settings.sentinel_password


@pytest.mark.parametrize("missing", [{"sentinels": ()}, {"master_name": None}])
def test_sentinel_mode_needs_addresses_and_a_master_name(missing: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="sentinel addresses"):
        async_client(replace(SENTINEL, **missing))


def test_sentinel_settings_come_from_flags_then_environment_then_the_pool() -> None:
    pool = SentinelSpec(master_name="pm", sentinels=["p:1"])
    env = {"TIERPOOL_REDIS_SENTINELS": "e:2,f:3", "TIERPOOL_REDIS_SENTINEL_PASSWORD": "spw"}
    from_pool = RedisSettings.from_env({}, fallback_mode=RedisMode.SENTINEL, fallback_sentinel=pool)
    assert (from_pool.sentinels, from_pool.master_name) == ((("p", 1),), "pm")
    from_env = RedisSettings.from_env(env, fallback_sentinel=pool)
    assert (from_env.sentinels, from_env.sentinel_password) == ((("e", 2), ("f", 3)), "spw")
    flagged = RedisSettings.from_env(env, sentinels="g:4", master_name="fm", fallback_sentinel=pool)
    assert (flagged.sentinels, flagged.master_name) == ((("g", 4),), "fm")


def test_sentinel_mode_builds_a_sentinel_managed_client() -> None:
    client = async_client(SENTINEL)
    assert isinstance(client.connection_pool, SentinelConnectionPool)


def test_the_published_spec_carries_no_env_value_and_no_url_password() -> None:
    """Every producer can read ``…:spec``: an API key in ``worker.env`` or a password in the URL must not be in it."""
    from tierpool.model.keys import PoolKeys
    from tierpool.model.spec import PoolSpec
    from tierpool.store.registry import parse_published, spec_json

    spec = PoolSpec.model_validate(
        {
            "tiers": [{"name": "p0", "weight": 1}],
            "redis": {"url": "redis://app:hun/ter2@r:6379/0"},
            "worker": {"env": [{"name": "OPENAI_API_KEY", "value": "sk-live-123"}]},
        }
    )
    published = spec_json(spec)
    assert "sk-live-123" not in published and "OPENAI_API_KEY" not in published
    assert "hun/ter2" not in published and "redis://app:***@r:6379/0" in published
    assert parse_published(PoolKeys("a", "b"), published).worker.env == []


CLIENT_CERT = {"tls_cert_file": "/certs/tls.crt", "tls_key_file": "/certs/tls.key"}


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"tls_ca_file": "/ca.pem"}, "TIERPOOL_REDIS_TLS_CA_FILE"),
        ({"tls_insecure": True}, "TIERPOOL_REDIS_TLS_INSECURE"),
        (CLIENT_CERT, "TIERPOOL_REDIS_TLS_CERT_FILE, TIERPOOL_REDIS_TLS_KEY_FILE"),
        ({"tls_cert_file": "/both.pem"}, "TIERPOOL_REDIS_TLS_CERT_FILE"),
    ],
)
@pytest.mark.parametrize("mode", list(RedisMode))
def test_tls_settings_with_tls_off_are_refused_not_dropped(
    settings: dict[str, Any], named: str, mode: RedisMode
) -> None:
    """A redis:// URL without the TLS flag would connect in plaintext and silently ignore them."""
    with pytest.raises(TlsSettingsError, match="TLS is off") as raised:
        RedisSettings(url="redis://r:6379/0", mode=mode, **settings)
    assert str(raised.value).startswith(f"{named} set")
    assert RedisSettings(url="rediss://r:6379/0", mode=mode, **settings).uses_tls
    assert RedisSettings(url="redis://r:6379/0", tls=True, mode=mode, **settings).uses_tls


def test_a_client_key_without_its_certificate_is_refused() -> None:
    with pytest.raises(TlsSettingsError, match="TIERPOOL_REDIS_TLS_KEY_FILE set without"):
        RedisSettings(url="rediss://r", tls_key_file="/k.pem")


def test_the_client_certificate_reaches_redis_py_in_every_mode() -> None:
    settings = RedisSettings.from_env(
        {
            "TIERPOOL_REDIS_URL": "rediss://seed:7000/0",
            "TIERPOOL_REDIS_TLS_CERT_FILE": "/certs/tls.crt",
            "TIERPOOL_REDIS_TLS_KEY_FILE": "/certs/tls.key",
        }
    )
    assert (settings.tls_cert_file, settings.tls_key_file) == ("/certs/tls.crt", "/certs/tls.key")
    expected = {"ssl_certfile": "/certs/tls.crt", "ssl_keyfile": "/certs/tls.key"}
    assert settings.client_kwargs().items() >= expected.items()
    standalone = async_client(settings).connection_pool.connection_kwargs
    assert standalone.items() >= expected.items()
    cluster = async_client(replace(settings, mode=RedisMode.CLUSTER))
    assert isinstance(cluster, AsyncRedisCluster)
    assert cluster.connection_kwargs.items() >= expected.items()
    assert not RedisSettings.from_env({"TIERPOOL_REDIS_URL": "rediss://r"}).client_kwargs().keys() & expected.keys()


def test_text_holding_escaped_bytes_packs_to_those_bytes() -> None:
    """A worker writes back what it read (a key made from a task_id that was not UTF-8): hiredis refuses lone
    surrogates, so such a command packs the Python way, through the encoder, to the original bytes."""
    command = ("EVALSHA", "abc", 1, "tierpool:{ns/p}:result:bad-\udcff", "a\udcc3", 5)
    packed = b"".join(_ours("redis://localhost:6379/0").pack_command(*command))
    reference = aioredis.Connection(encoding_errors="surrogateescape")
    assert packed == b"".join(reference.pack_command(*command))
    assert b"\r\ntierpool:{ns/p}:result:bad-\xff\r\n" in packed and b"\r\na\xc3\r\n" in packed


@pytest.mark.parametrize(
    "settings",
    [RedisSettings(), RedisSettings(url="redis://seed:7000/0", mode=RedisMode.CLUSTER), SENTINEL],
    ids=["standalone", "cluster", "sentinel"],
)
def test_every_client_decodes_without_raising_and_encodes_back_the_same_bytes(settings: RedisSettings) -> None:
    encoder = async_client(settings).get_encoder()
    assert (encoder.decode_responses, encoder.encoding_errors) == (True, "surrogateescape")
    assert encoder.decode(b"bad-\xff\xfe") == "bad-\udcff\udcfe"
    assert encoder.encode(encoder.decode(b"bad-\xff\xfe")) == b"bad-\xff\xfe"


def test_the_settings_repr_shows_no_password() -> None:
    """A repr lands in logs and tracebacks (a failed start-up prints its locals in some runners)."""
    settings = RedisSettings(url="redis://app:s3cr/t@h:6379/0", password="pw-two", sentinel_password="pw-three")
    shown = repr(settings)
    assert "s3cr/t" not in shown and "pw-two" not in shown and "pw-three" not in shown
    assert "redis://app:***@h:6379/0" in shown and "mode=" in shown
