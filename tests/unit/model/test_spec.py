"""Spec validation: each rule names its field. The same table runs against the real API server (cluster tier)."""

from pathlib import Path
from typing import Any

import pytest

from tierpool.model.resource import SpecError, format_loc, load_pool_env, load_pool_file, parse_pool
from tierpool.model.spec import PoolSpec, RedisTLS, tls_fields_without_tls

TIERS = [{"name": "p0", "weight": 70, "sla": "30s"}, {"name": "p1", "weight": 25, "escalateAfter": "7m"}]


def pool(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": {"name": "x"}, "spec": spec}


CLIENT_CERT = {"name": "client", "key": "tls.crt"}
CLIENT_KEY = {"name": "client", "key": "tls.key"}


def with_spec(**overrides: Any) -> dict[str, Any]:
    return pool({"tiers": TIERS, **overrides})


BAD_SPECS = [
    ("min > max", with_spec(replicas={"min": 5, "max": 2}), "spec.replicas.min", "<= replicas.max"),
    ("zero weight", pool({"tiers": [{"name": "p0", "weight": 0}]}), "spec.tiers[0].weight", "greater than 0"),
    ("negative weight", pool({"tiers": [{"name": "p0", "weight": -3}]}), "spec.tiers[0].weight", "greater than 0"),
    (
        "zero tenantConcurrency",
        pool({"tiers": [{"name": "p0", "weight": 1, "tenantConcurrency": 0}]}),
        "spec.tiers[0].tenantConcurrency",
        "greater than 0",
    ),
    (
        "duplicate tiers",
        pool({"tiers": [{"name": "a", "weight": 1}, {"name": "a", "weight": 1}]}),
        "spec.tiers[1].name",
        "duplicate",
    ),
    (
        "escalate on top",
        pool({"tiers": [{"name": "p0", "weight": 1, "escalateAfter": "1m"}]}),
        "spec.tiers[0].escalateAfter",
        "not allowed on the top tier",
    ),
    (
        "preemptible on top",
        pool({"tiers": [{"name": "p0", "weight": 1, "preemptible": True}, {"name": "p1", "weight": 1}]}),
        "spec.tiers[0].preemptible",
        "not allowed on the top tier",
    ),
    (
        "zero maxPreemptions",
        pool({"tiers": [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "maxPreemptions": 0}]}),
        "spec.tiers[1].maxPreemptions",
        "greater than or equal to 1",
    ),
    ("bad duration", pool({"tiers": [{"name": "p0", "weight": 1, "sla": "soon"}]}), "spec.tiers[0].sla", "duration"),
    (
        "claimIdle <= heartbeat",
        with_spec(recovery={"claimIdle": "10s", "heartbeat": "10s"}),
        "spec.recovery.claimIdle",
        "greater than recovery.heartbeat",
    ),
    ("no tiers", pool({"tiers": []}), "spec.tiers", "at least 1"),
    ("tier name not DNS-safe", pool({"tiers": [{"name": "P_0", "weight": 1}]}), "spec.tiers[0].name", "pattern"),
    ("unknown field", with_spec(bogus=1), "spec.bogus", "unknown field"),
    ("unknown nested field", with_spec(worker={"handlr": "x:y"}), "spec.worker.handlr", "unknown field"),
    ("bad handler", with_spec(worker={"handler": "nocolon"}), "spec.worker.handler", "pattern"),
    ("zero concurrency", with_spec(worker={"concurrency": 0}), "spec.worker.concurrency", "greater than or equal"),
    ("bad redis url", with_spec(redis={"url": "http://x"}), "spec.redis.url", "pattern"),
    ("bad policy", with_spec(scaling={"policy": "magic"}), "spec.scaling.policy", "sla"),
    ("maxDeliveries 0", with_spec(recovery={"maxDeliveries": 0}), "spec.recovery.maxDeliveries", "greater"),
    ("negative maxDeferrals", with_spec(recovery={"maxDeferrals": -1}), "spec.recovery.maxDeferrals", "greater"),
    ("zero timeout", with_spec(tasks={"timeout": "0s"}), "spec.tasks.timeout", "greater than 0"),
    (
        "duplicate rate limits",
        with_spec(rateLimits=[{"name": "ai", "perMinute": 1}, {"name": "ai", "perMinute": 2}]),
        "spec.rateLimits[1].name",
        "duplicate rate limit name",
    ),
    (
        "zero perMinute",
        with_spec(rateLimits=[{"name": "ai", "perMinute": 0}]),
        "spec.rateLimits[0].perMinute",
        "greater",
    ),
    (
        "zero tokensPerMinute",
        with_spec(rateLimits=[{"name": "ai", "perMinute": 1, "tokensPerMinute": 0}]),
        "spec.rateLimits[0].tokensPerMinute",
        "greater",
    ),
    (
        "bad rate limit name",
        with_spec(rateLimits=[{"name": "A I", "perMinute": 1}]),
        "spec.rateLimits[0].name",
        "pattern",
    ),
    ("bad timeout", with_spec(tasks={"timeout": "forever"}), "spec.tasks.timeout", "duration"),
    ("bad kind", {**with_spec(), "kind": "Pool"}, "kind", "AgentPool"),
    ("bad apiVersion", {**with_spec(), "apiVersion": "v1"}, "apiVersion", "tierpool.io"),
    ("bad name", {**with_spec(), "metadata": {"name": "Bad_Name"}}, "metadata.name", "pattern"),
    ("negative min", with_spec(replicas={"min": -1, "max": 2}), "spec.replicas.min", "greater than or equal"),
    ("drainFraction > 1", with_spec(scaling={"drainFraction": 1.5}), "spec.scaling.drainFraction", "less than"),
    (
        "escalation cap without escalateAfter",
        pool({"tiers": [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "escalateMaxTargetBacklog": 3}]}),
        "spec.tiers[1].escalateMaxTargetBacklog",
        "needs escalateAfter",
    ),
    (
        "reservedSlots on the lowest tier",
        pool({"tiers": [{"name": "p0", "weight": 1}, {"name": "p1", "weight": 1, "reservedSlots": 1}]}),
        "spec.tiers[1].reservedSlots",
        "not allowed on the lowest tier",
    ),
    (
        "reservations leave the lowest tier no slot",
        pool(
            {
                "tiers": [{"name": "p0", "weight": 1, "reservedSlots": 2}, {"name": "p1", "weight": 1}],
                "worker": {"concurrency": 2},
            }
        ),
        "spec.tiers[].reservedSlots",
        "must be less than worker.concurrency (2)",
    ),
    (
        "reservations add up over tiers",
        pool(
            {
                "tiers": [
                    {"name": "p0", "weight": 1, "reservedSlots": 4},
                    {"name": "p1", "weight": 1, "reservedSlots": 4},
                    {"name": "p2", "weight": 1},
                ]
            }
        ),
        "spec.tiers[].reservedSlots",
        "reserve 8 slot(s) in all",
    ),
    ("sentinel mode without sentinels", with_spec(redis={"mode": "sentinel"}), "spec.redis.sentinel", "required"),
    (
        "sentinels outside sentinel mode",
        with_spec(redis={"sentinel": {"masterName": "m", "sentinels": ["s:26379"]}}),
        "spec.redis.sentinel",
        "only allowed",
    ),
    (
        "a sentinel address without a port",
        with_spec(redis={"mode": "sentinel", "sentinel": {"masterName": "m", "sentinels": ["s"]}}),
        "spec.redis.sentinel.sentinels[0]",
        "pattern",
    ),
    (
        "no sentinel addresses",
        with_spec(redis={"mode": "sentinel", "sentinel": {"masterName": "m", "sentinels": []}}),
        "spec.redis.sentinel.sentinels",
        "at least 1",
    ),
    (
        "waitReplicas on a cluster",
        with_spec(redis={"mode": "cluster", "url": "redis://x", "waitReplicas": 1}),
        "spec.redis.waitReplicas",
        "not supported with mode cluster",
    ),
    (
        "a zero waitTimeout",
        with_spec(redis={"waitReplicas": 1, "waitTimeout": "0s"}),
        "spec.redis.waitTimeout",
        "greater than 0",
    ),
    (
        "a CA with TLS off",
        with_spec(redis={"url": "redis://r", "tls": {"caSecretRef": {"name": "c", "key": "ca.crt"}}}),
        "spec.redis.tls.caSecretRef",
        "needs TLS",
    ),
    (
        "a CA with TLS off and no URL",
        with_spec(redis={"tls": {"enabled": False, "caSecretRef": {"name": "c", "key": "ca.crt"}}}),
        "spec.redis.tls.caSecretRef",
        "rediss://",
    ),
    (
        "insecureSkipVerify with TLS off",
        with_spec(redis={"url": "redis://r", "tls": {"insecureSkipVerify": True}}),
        "spec.redis.tls.insecureSkipVerify",
        "needs TLS",
    ),
    (
        "a client certificate with TLS off",
        with_spec(redis={"url": "redis://r", "tls": {"certSecretRef": CLIENT_CERT, "keySecretRef": CLIENT_KEY}}),
        "spec.redis.tls.certSecretRef",
        "needs TLS",
    ),
    (
        "a client key with TLS off",
        with_spec(redis={"url": "redis://r", "tls": {"certSecretRef": CLIENT_CERT, "keySecretRef": CLIENT_KEY}}),
        "spec.redis.tls.keySecretRef",
        "needs TLS",
    ),
    (
        "a sentinel master with a CA and TLS off",
        with_spec(
            redis={
                "mode": "sentinel",
                "sentinel": {"masterName": "m", "sentinels": ["s:26379"]},
                "tls": {"caSecretRef": {"name": "c", "key": "ca.crt"}},
            }
        ),
        "spec.redis.tls.caSecretRef",
        "needs TLS",
    ),
    (
        "a client certificate without its key",
        with_spec(redis={"url": "rediss://r", "tls": {"certSecretRef": CLIENT_CERT}}),
        "spec.redis.tls.certSecretRef",
        "needs keySecretRef",
    ),
    (
        "a client key without its certificate",
        with_spec(redis={"url": "rediss://r", "tls": {"keySecretRef": CLIENT_KEY}}),
        "spec.redis.tls.keySecretRef",
        "needs certSecretRef",
    ),
    (
        "negative reservedSlots",
        pool({"tiers": [{"name": "p0", "weight": 1, "reservedSlots": -1}]}),
        "spec.tiers[0].reservedSlots",
        "greater than or equal",
    ),
]


@pytest.mark.parametrize(("case", "document", "path", "fragment"), BAD_SPECS, ids=[c[0] for c in BAD_SPECS])
def test_bad_specs_name_the_field(case: str, document: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(SpecError) as raised:
        parse_pool(document)
    paths = dict(raised.value.violations)
    assert path in paths, raised.value.violations
    assert fragment.lower() in paths[path].lower()


def test_valid_spec_defaults() -> None:
    parsed = parse_pool(with_spec())
    assert parsed.ref == "default/x"
    assert parsed.spec.tiers[1].escalate_after == 420.0
    assert parsed.spec.recovery.max_deliveries == 5
    assert parsed.spec.recovery.max_deferrals == 10 and parsed.spec.tasks.timeout is None
    assert parsed.spec.scaling.policy.value == "sla"


def test_rate_limits_combine_with_tenant_limits() -> None:
    both = {
        "tiers": [{"name": "p0", "weight": 1, "tenantConcurrency": 2}],
        "rateLimits": [{"name": "ai", "perMinute": 60}],
    }
    parsed = parse_pool(pool(both))
    assert parsed.spec.tenant_limits == [2] and parsed.spec.rate_limits[0].name == "ai"


def test_dead_letter_retention_is_on_by_default_and_can_be_turned_off() -> None:
    """A DLQ nobody reads must not grow without bound: 100,000 entries and 7 days unless told otherwise."""
    default = parse_pool(with_spec()).spec.dead_letters
    assert (default.max_length, default.max_age) == (100_000, 7 * 24 * 3600)
    off = parse_pool(with_spec(deadLetters={"maxLength": 0, "maxAge": "0s"})).spec.dead_letters
    assert (off.max_length, off.max_age) == (0, 0)
    with pytest.raises(SpecError, match=r"spec\.deadLetters\.maxLength"):
        parse_pool(with_spec(deadLetters={"maxLength": -1}))


def test_all_rule_violations_reported_together() -> None:
    document = pool(
        {
            "tiers": [{"name": "a", "weight": 1, "escalateAfter": "1m"}, {"name": "a", "weight": 1}],
            "replicas": {"min": 3, "max": 1},
        }
    )
    with pytest.raises(SpecError) as raised:
        parse_pool(document)
    assert [p for p, _ in raised.value.violations] == [
        "spec.tiers[1].name",
        "spec.tiers[0].escalateAfter",
        "spec.replicas.min",
    ]


def test_round_trip_through_json_keeps_durations() -> None:
    spec = parse_pool(with_spec()).spec
    again = PoolSpec.model_validate_json(spec.model_dump_json(by_alias=True))
    assert again == spec


@pytest.mark.parametrize(
    ("loc", "text"), [(("spec", "tiers", 0, "weight"), "spec.tiers[0].weight"), (("kind",), "kind"), ((), "")]
)
def test_format_loc(loc: tuple[str | int, ...], text: str) -> None:
    assert format_loc(loc) == text


def test_load_file_and_env(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(
        "---\nkind: ConfigMap\n---\napiVersion: tierpool.io/v1alpha1\nkind: AgentPool\n"
        "metadata: {name: a, namespace: ns}\nspec:\n  tiers: [{name: p0, weight: 1}]\n"
    )
    loaded = load_pool_file(path)
    assert loaded.ref == "ns/a"
    from_env = load_pool_env({"TIERPOOL_POOL_SPEC": loaded.model_dump_json(by_alias=True)})
    assert from_env == loaded


@pytest.mark.parametrize(
    ("environ", "fragment"), [({}, "not set"), ({"TIERPOOL_POOL_SPEC": "{nope"}, "not valid JSON")]
)
def test_env_errors(environ: dict[str, str], fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment):
        load_pool_env(environ)


def test_file_without_agentpool(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("kind: Deployment\n")
    with pytest.raises(SpecError, match="no document with kind: AgentPool"):
        load_pool_file(path)


def test_a_sentinel_pool_parses() -> None:
    sentinel = {
        "masterName": "m",
        "sentinels": ["a:26379", "[::1]:26380"],
        "passwordSecretRef": {"name": "s", "key": "p"},
    }
    spec = parse_pool(with_spec(redis={"mode": "sentinel", "sentinel": sentinel, "waitReplicas": 1})).spec.redis
    assert spec.sentinel is not None and spec.sentinel.sentinels == ["a:26379", "[::1]:26380"]
    assert (spec.wait_replicas, spec.wait_timeout) == (1, 0.5)


TLS_ON = [
    ("a rediss:// URL", {"url": "rediss://r"}),
    ("tls.enabled", {"url": "redis://r", "tls": {"enabled": True}}),
    ("tls.enabled and no URL", {"tls": {"enabled": True}}),
    ("a URL the model cannot see", {"urlSecretRef": {"name": "u", "key": "url"}}),  # the operator checks it
]


@pytest.mark.parametrize(("case", "redis"), TLS_ON, ids=[case for case, _ in TLS_ON])
def test_tls_settings_are_accepted_with_tls_on(case: str, redis: dict[str, Any]) -> None:
    tls = {**redis.get("tls", {}), "caSecretRef": {"name": "c", "key": "ca.crt"}}
    tls |= {"certSecretRef": CLIENT_CERT, "keySecretRef": CLIENT_KEY}
    parsed = parse_pool(with_spec(redis={**redis, "tls": tls})).spec.redis.tls
    assert parsed.cert_secret_ref is not None and parsed.cert_secret_ref.key == "tls.crt"
    assert parsed.key_secret_ref is not None and parsed.key_secret_ref.key == "tls.key"
    insecure = {**redis, "tls": {**redis.get("tls", {}), "insecureSkipVerify": True}}
    assert parse_pool(with_spec(redis=insecure)).spec.redis.tls.insecure_skip_verify


def test_tls_fields_without_tls_lists_what_a_plaintext_connection_would_drop() -> None:
    tls = RedisTLS.model_validate(
        {"caSecretRef": {"name": "c", "key": "k"}, "certSecretRef": CLIENT_CERT, "keySecretRef": CLIENT_KEY}
    )
    assert tls_fields_without_tls(tls, "redis://r/0") == ["caSecretRef", "certSecretRef", "keySecretRef"]
    assert tls_fields_without_tls(tls, None) == ["caSecretRef", "certSecretRef", "keySecretRef"]
    assert tls_fields_without_tls(tls, "rediss://r/0") == []
    assert tls_fields_without_tls(tls.model_copy(update={"enabled": True}), "redis://r/0") == []
    assert tls_fields_without_tls(RedisTLS(insecure_skip_verify=True), "redis://r") == ["insecureSkipVerify"]
    assert tls_fields_without_tls(RedisTLS(), "redis://r") == []


def test_the_default_metrics_port_is_no_exporters() -> None:
    """9100-9999 is Prometheus's range of exporter ports (9100: node_exporter, often on the same host)."""
    port = PoolSpec.model_validate({"tiers": [{"name": "p0", "weight": 1}]}).worker.metrics_port
    assert not 9100 <= port <= 9999 and port not in (8000, 8080, 8081)
