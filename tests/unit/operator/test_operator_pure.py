"""Operator decisions without a cluster: manifests, the apply-if-different comparison, status conditions."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tierpool.model.resource import parse_pool
from tierpool.model.spec import RedisMode
from tierpool.scaling.decision import Decision, History
from tierpool.scaling.observation import PoolObservation, TierObservation
from tierpool_operator import conditions, manifests
from tierpool_operator.config import OperatorConfig, operator_identity, own_identity
from tierpool_operator.drift import (
    APPLIED,
    changed,
    folded_managed_fields,
    is_subset,
    needs_apply,
    repair_allowed,
    to_apply,
)


def pool(**spec: Any) -> Any:
    document = {"tiers": [{"name": "p0", "weight": 3, "sla": "30s"}, {"name": "p1", "weight": 1}], **spec}
    return parse_pool(
        {
            "apiVersion": "tierpool.io/v1alpha1",
            "kind": "AgentPool",
            "metadata": {"name": "agents", "namespace": "team"},
            "spec": document,
        }
    )


def env_of(deployment: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}


REDIS_ENV = [
    ({"url": "redis://r:6379/0"}, {"TIERPOOL_REDIS_URL": {"name": "TIERPOOL_REDIS_URL", "value": "redis://r:6379/0"}}),
    (
        {"url": "redis://app:hunter2@r:6379/0", "passwordSecretRef": {"name": "s", "key": "pw"}},
        {
            "TIERPOOL_REDIS_URL": {"name": "TIERPOOL_REDIS_URL", "value": "redis://app@r:6379/0"},
            "TIERPOOL_REDIS_PASSWORD": {
                "name": "TIERPOOL_REDIS_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}},
            },
        },
    ),
    (  # the workers keep their password: the URL reaches them from the operator's own Secret
        {"url": "redis://:hunter2@r/0"},
        {
            "TIERPOOL_REDIS_URL": {
                "name": "TIERPOOL_REDIS_URL",
                "valueFrom": {"secretKeyRef": {"name": "tierpool-agents-redis", "key": "url"}},
            }
        },
    ),
    (
        {"url": "redis://r/0?password=hunter2"},
        {
            "TIERPOOL_REDIS_URL": {
                "name": "TIERPOOL_REDIS_URL",
                "valueFrom": {"secretKeyRef": {"name": "tierpool-agents-redis", "key": "url"}},
            }
        },
    ),
    (
        {"urlSecretRef": {"name": "s", "key": "url"}},
        {
            "TIERPOOL_REDIS_URL": {
                "name": "TIERPOOL_REDIS_URL",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "url"}},
            }
        },
    ),
    (
        {"url": "redis://r", "passwordSecretRef": {"name": "s", "key": "pw"}},
        {
            "TIERPOOL_REDIS_PASSWORD": {
                "name": "TIERPOOL_REDIS_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "pw"}},
            }
        },
    ),
    (
        {"url": "redis://r", "tls": {"enabled": True, "caSecretRef": {"name": "ca", "key": "ca.crt"}}},
        {
            "TIERPOOL_REDIS_TLS": {"name": "TIERPOOL_REDIS_TLS", "value": "true"},
            "TIERPOOL_REDIS_TLS_CA_FILE": {
                "name": "TIERPOOL_REDIS_TLS_CA_FILE",
                "value": "/etc/tierpool/redis-ca/ca.crt",
            },
        },
    ),
    (
        {"url": "rediss://r", "tls": {"insecureSkipVerify": True}},
        {"TIERPOOL_REDIS_TLS_INSECURE": {"name": "TIERPOOL_REDIS_TLS_INSECURE", "value": "true"}},
    ),
    (
        {
            "mode": "sentinel",
            "sentinel": {"masterName": "m", "sentinels": ["s:26379"], "passwordSecretRef": {"name": "ss", "key": "p"}},
        },
        {
            "TIERPOOL_REDIS_SENTINEL_PASSWORD": {
                "name": "TIERPOOL_REDIS_SENTINEL_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "ss", "key": "p"}},
            }
        },
    ),
]


@pytest.mark.parametrize(("redis", "expected"), REDIS_ENV)
def test_redis_settings_reach_the_container(redis: dict[str, Any], expected: dict[str, Any]) -> None:
    env = env_of(manifests.deployment(pool(redis=redis), "uid-1", 1))
    for name, var in expected.items():
        assert env[name] == var


MUTUAL_TLS = {
    "url": "rediss://r",
    "tls": {
        "caSecretRef": {"name": "redis-tls", "key": "ca.crt"},
        "certSecretRef": {"name": "redis-tls", "key": "tls.crt"},
        "keySecretRef": {"name": "redis-tls", "key": "tls.key"},
    },
}


def test_the_client_certificate_and_key_are_mounted_alone_and_named_to_the_worker() -> None:
    """Each is a one-key Secret volume, so a kubernetes.io/tls Secret's key never sits beside the certificate, and
    the key is not world-readable; the CA stays the whole Secret it always was."""
    deployment = manifests.deployment(pool(redis=MUTUAL_TLS), "uid-1", 1)
    pod = deployment["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["redis-ca"] == {"name": "redis-ca", "secret": {"secretName": "redis-tls"}}
    assert volumes["redis-client-cert"]["secret"] == {
        "secretName": "redis-tls",
        "items": [{"key": "tls.crt", "path": "tls.crt"}],
    }
    assert volumes["redis-client-key"]["secret"] == {
        "secretName": "redis-tls",
        "items": [{"key": "tls.key", "path": "tls.key"}],
        "defaultMode": 0o440,
    }
    mounts = {mount["name"]: mount for mount in pod["containers"][0]["volumeMounts"]}
    assert mounts["redis-client-cert"] == {
        "name": "redis-client-cert",
        "mountPath": "/etc/tierpool/redis-client-cert",
        "readOnly": True,
    }
    assert mounts["redis-client-key"]["mountPath"] == "/etc/tierpool/redis-client-key"
    assert mounts["redis-client-key"]["readOnly"] is True
    env = env_of(deployment)
    assert env["TIERPOOL_REDIS_TLS_CERT_FILE"]["value"] == "/etc/tierpool/redis-client-cert/tls.crt"
    assert env["TIERPOOL_REDIS_TLS_KEY_FILE"]["value"] == "/etc/tierpool/redis-client-key/tls.key"
    assert env["TIERPOOL_REDIS_TLS_CA_FILE"]["value"] == "/etc/tierpool/redis-ca/ca.crt"


def test_without_client_certificates_the_pod_has_no_such_volumes() -> None:
    deployment = manifests.deployment(pool(redis={"url": "rediss://r"}), "uid-1", 1)
    pod = deployment["spec"]["template"]["spec"]
    assert [volume["name"] for volume in pod["volumes"]] == ["tmp"]
    assert [mount["name"] for mount in pod["containers"][0]["volumeMounts"]] == ["tmp"]
    assert not {"TIERPOOL_REDIS_TLS_CERT_FILE", "TIERPOOL_REDIS_TLS_KEY_FILE"} & set(env_of(deployment))


class UrlSecret:
    """Answers the operator's Secret reads: the URL only; any other read fails the test."""

    def __init__(self, url: str) -> None:
        self.url = url

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        assert key == "url", f"read {name}/{key} before refusing the spec"
        return self.url


@pytest.mark.parametrize(
    ("tls", "named"),
    [
        ({"caSecretRef": {"name": "c", "key": "ca.crt"}}, "spec.redis.tls.caSecretRef"),
        ({"insecureSkipVerify": True}, "spec.redis.tls.insecureSkipVerify"),
        (MUTUAL_TLS["tls"], "spec.redis.tls.caSecretRef, spec.redis.tls.certSecretRef, spec.redis.tls.keySecretRef"),
    ],
)
def test_tls_settings_meeting_a_plaintext_url_from_a_secret_are_refused(tls: dict[str, Any], named: str) -> None:
    """The model cannot see a URL in urlSecretRef: the operator refuses once it reads a redis:// one there, naming the
    fields (the scaler reports it as RedisReachable=False), instead of connecting in plaintext."""
    from tierpool.model.spec import RedisSpec
    from tierpool_operator.redis_access import RedisNotConfigured, SecretReader, resolve

    spec = RedisSpec.model_validate({"urlSecretRef": {"name": "u", "key": "url"}, "tls": tls})
    with pytest.raises(RedisNotConfigured, match="TLS, which is off") as raised:
        resolve(spec, SecretReader(UrlSecret("redis://r:6379/0"), "team"))  # type: ignore[arg-type]
    assert str(raised.value).startswith(named + ":")
    assert "urlSecretRef" in str(raised.value)
    enabled = RedisSpec.model_validate({"urlSecretRef": {"name": "u", "key": "url"}, "tls": {"enabled": True}})
    assert resolve(enabled, SecretReader(UrlSecret("redis://r:6379/0"), "team")).settings.tls  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "password", "stripped"),
    [
        ("redis://r:6379/0", None, "redis://r:6379/0"),
        ("redis://:hunter2@r:6379/0", "hunter2", "redis://r:6379/0"),
        ("rediss://app:p@ss:w@r/1", "p@ss:w", "rediss://app@r/1"),
        ("redis://app@r/0", None, "redis://app@r/0"),  # a user name alone is no secret
        ("redis://app:@r/0", None, "redis://app:@r/0"),
        ("redis://r/0?password=hunter2", "hunter2", "redis://r/0"),  # redis-py reads it from the query too
        ("redis://r/0?ssl_cert_reqs=none&password=p%40ss", "p@ss", "redis://r/0?ssl_cert_reqs=none"),
        ("redis://r/0?socket_timeout=5", None, "redis://r/0?socket_timeout=5"),
        ("redis://:hun?ter2@r/0", "hun?ter2", "redis://r/0"),  # base64 and generated secrets hold ? and /
        ("redis://app:hun/ter2@r:6379/0", "hun/ter2", "redis://app@r:6379/0"),
    ],
)
def test_a_password_in_the_url_is_found_and_left_out(url: str, password: str | None, stripped: str) -> None:
    assert manifests.url_password(url) == password
    assert manifests.without_password(url) == stripped


@pytest.mark.parametrize(
    "url", ["redis://app:hunter2@r:6379/0", "redis://r:6379/0?password=hunter2", "redis://:hun?ter2@r:6379/0"]
)
def test_a_password_in_the_url_goes_to_the_operators_secret_only(url: str) -> None:
    leaky = pool(redis={"url": url})
    children = manifests.children(leaky, "u", 1)
    [secret] = [child for child in children if child["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "tierpool-agents-redis" and secret["metadata"]["ownerReferences"]
    assert base64.b64decode(secret["data"]["url"]).decode() == url
    assert [child["kind"] for child in children][-2:] == ["Secret", "Deployment"]  # before the pods need it
    for child in children:
        if child["kind"] != "Secret":
            assert "hunter2" not in json.dumps(child), child["kind"]
    with_ref = pool(redis={"url": url, "passwordSecretRef": {"name": "s", "key": "pw"}})
    assert "Secret" not in [child["kind"] for child in manifests.children(with_ref, "u", 1)]


def test_a_password_in_the_url_reaches_neither_configmap_nor_pod_spec_and_is_reported() -> None:
    leaky = pool(redis={"url": "redis://app:hunter2@r:6379/0"})
    warned = conditions.credentials(leaky.spec, 0.0, 4)
    assert (warned["type"], warned["status"], warned["reason"]) == ("CredentialsInSecrets", "False", "PasswordInURL")
    assert "spec.redis.urlSecretRef" in warned["message"] and "hunter2" not in warned["message"]
    assert conditions.credentials(pool(redis={"url": "redis://r"}).spec, 0.0, 4)["status"] == "True"


def test_deployment_is_restricted_and_owned() -> None:
    deployment = manifests.deployment(pool(worker={"terminationGracePeriodSeconds": 90}), "uid-1", 3)
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert deployment["spec"]["replicas"] == 3 and pod["terminationGracePeriodSeconds"] == 90
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"] == {
        "type": "RuntimeDefault"
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert pod["automountServiceAccountToken"] is False


def test_an_empty_rate_limit_list_stays_out_of_the_pods_document_and_the_published_spec() -> None:
    """Protocol 5: pools without rate limits keep their document (and spec hash), so upgrading the operator rolls
    nothing for them and a worker image that predates rateLimits still parses it."""
    from tierpool.store.registry import spec_json

    plain, limited = pool(), pool(rateLimits=[{"name": "ai", "perMinute": 60}])
    assert "rateLimits" not in manifests.pool_document_json(plain) and "rateLimits" not in spec_json(plain.spec)
    assert json.loads(manifests.pool_document_json(limited))["spec"]["rateLimits"] == [{"name": "ai", "perMinute": 60}]
    assert parse_pool(json.loads(manifests.pool_document_json(limited))).spec.rate_limits == limited.spec.rate_limits
    assert '"rateLimits"' in spec_json(limited.spec)


def test_the_default_redis_mode_stays_out_of_the_pods_document_and_the_published_spec() -> None:
    """Pools in standalone mode keep their document and spec hash (upgrading rolls nothing, an older worker image
    still parses it); a cluster pool's workers learn the mode from the document."""
    from tierpool.store.registry import spec_json

    plain, clustered = pool(), pool(redis={"url": "redis://seed:7000", "mode": "cluster"})
    assert '"mode"' not in manifests.pool_document_json(plain) and '"mode"' not in spec_json(plain.spec)
    document = json.loads(manifests.pool_document_json(clustered))
    assert (document["spec"]["redis"]["url"], document["spec"]["redis"]["mode"]) == ("redis://seed:7000", "cluster")
    assert parse_pool(document).spec.redis.mode is RedisMode.CLUSTER
    assert json.loads(spec_json(clustered.spec))["redis"]["mode"] == "cluster"
    assert manifests.spec_hash(plain) != manifests.spec_hash(clustered)


def test_the_operators_own_redis_user_reaches_neither_pods_nor_producers() -> None:
    """``spec.redis.operatorAuth`` is the operator's alone: not in the pods' document (so not in the ConfigMap, and
    no roll when it changes), not in the published spec producers read, not in the workers' env."""
    from tierpool.store.registry import spec_json

    auth = {"username": "tierpool-operator", "passwordSecretRef": {"name": "redis-operator", "key": "password"}}
    plain, audited = pool(), pool(redis={"url": "redis://r:6379/0", "operatorAuth": auth})
    for text in (
        manifests.pool_document_json(audited),
        spec_json(audited.spec),
        json.dumps(manifests.redis_env(audited)),
    ):
        assert "operatorAuth" not in text and "redis-operator" not in text and "tierpool-operator" not in text
    assert manifests.spec_hash(audited) == manifests.spec_hash(pool(redis={"url": "redis://r:6379/0"}))
    assert manifests.spec_hash(plain) != manifests.spec_hash(audited)  # the URL differs, nothing else


def test_the_allowed_secret_names_are_read_from_the_environment() -> None:
    config = OperatorConfig.from_env({"TIERPOOL_ALLOWED_SECRET_NAMES": " redis-auth, ,redis-operator "})
    assert config.allowed_secret_names == {"redis-auth", "redis-operator"}
    assert OperatorConfig.from_env({}).allowed_secret_names == frozenset()


def test_default_dead_letter_retention_stays_out_of_the_pods_document_and_the_published_spec() -> None:
    """Pools that leave deadLetters alone keep their document and spec hash (upgrading rolls nothing, an older
    worker image or producer still parses it); a pool that sets it gets it to its workers."""
    from tierpool.store.registry import spec_json

    plain, kept = pool(), pool(deadLetters={"maxLength": 10, "maxAge": "1h"})
    assert "deadLetters" not in manifests.pool_document_json(plain) and "deadLetters" not in spec_json(plain.spec)
    document = json.loads(manifests.pool_document_json(kept))
    assert document["spec"]["deadLetters"] == {"maxLength": 10, "maxAge": "1h"}
    assert parse_pool(document).spec.dead_letters == kept.spec.dead_letters
    assert json.loads(spec_json(kept.spec))["deadLetters"]["maxLength"] == 10
    assert manifests.spec_hash(plain) != manifests.spec_hash(kept)


def test_default_preemption_fields_stay_out_of_the_pods_document_and_the_published_spec() -> None:
    """Tiers that leave preemption alone keep their document and spec hash (upgrading rolls nothing, an older
    worker image or producer still parses it); a preemptible tier's fields reach its workers."""
    from tierpool.store.registry import spec_json

    tiers = [{"name": "p0", "weight": 1}, {"name": "p2", "weight": 1}]
    plain = pool(tiers=tiers)
    preemptive = pool(tiers=[tiers[0], {**tiers[1], "preemptible": True, "maxPreemptions": 2}])
    for text in (manifests.pool_document_json(plain), spec_json(plain.spec)):
        assert "preemptible" not in text and "preemptAfter" not in text and "maxPreemptions" not in text
    document = json.loads(manifests.pool_document_json(preemptive))
    assert document["spec"]["tiers"][1] == {"name": "p2", "weight": 1, "reservedSlots": 0, "preemptible": True,
                                            "maxPreemptions": 2}  # fmt: skip
    assert parse_pool(document).spec.tiers[1].preemptible
    assert json.loads(spec_json(preemptive.spec))["tiers"][1]["maxPreemptions"] == 2
    assert manifests.spec_hash(plain) != manifests.spec_hash(preemptive)


def test_spec_hash_changes_with_the_spec_only() -> None:
    a, b = pool(), pool(worker={"concurrency": 3})
    assert manifests.spec_hash(a) == manifests.spec_hash(pool())
    assert manifests.spec_hash(a) != manifests.spec_hash(b)
    config = manifests.config_map(a, "u")
    assert json.loads(config["data"]["pool.json"])["metadata"] == {"name": "agents", "namespace": "team"}


@pytest.mark.parametrize(
    ("spec", "replicas"),
    [
        ({}, 1),
        ({"replicas": {"min": 2, "max": 4}}, 2),
        ({"scaling": {"policy": "external"}, "replicas": {"desired": 5}}, 5),
    ],
)
def test_initial_replicas(spec: dict[str, Any], replicas: int) -> None:
    assert manifests.initial_replicas(pool(**spec).spec) == replicas


def test_children_in_creation_order() -> None:
    kinds = [child["kind"] for child in manifests.children(pool(), "u", 1)]
    assert kinds == ["ServiceAccount", "ConfigMap", "PodDisruptionBudget", "Deployment"]


SUBSET = [
    ({"a": 1}, {"a": 1, "b": 2}, True),
    ({"a": 1}, {"a": 2}, False),
    ({"a": {"b": [1, 2]}}, {"a": {"b": [1, 2], "c": 3}}, True),
    ({"a": [{"n": 1}]}, {"a": [{"n": 1, "default": True}]}, True),
    ({"a": [1]}, {"a": [1, 2]}, False),
    ({"a": 1}, {}, False),
    ({"port": 80}, {"port": "80"}, True),
    # the API server canonicalizes quantities, drops empty values; other managers add list items
    (
        {"resources": {"requests": {"cpu": "0.5", "memory": "1024Mi"}}},
        {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        True,
    ),
    (
        {"resources": {"limits": {"cpu": 2, "memory": "1e3"}}},
        {"resources": {"limits": {"cpu": "2", "memory": "1k"}}},
        True,
    ),
    ({"resources": {"requests": {"cpu": "0.5"}}}, {"resources": {"requests": {"cpu": "600m"}}}, False),
    ({"image": "0.5"}, {"image": "500m"}, False),  # quantities only where the API has them
    ({"env": [{"name": "E", "value": ""}]}, {"env": [{"name": "E"}]}, True),
    ({"env": [{"name": "E", "value": ""}]}, {"env": [{"name": "E", "value": "x"}]}, False),
    ({"env": [{"name": "E", "value": ""}]}, {"env": []}, False),
    ({"annotations": {}}, {}, True),
    (
        {"env": [{"name": "A", "value": "1"}]},
        {"env": [{"name": "INJECTED", "value": "9"}, {"name": "A", "value": "1"}]},
        True,
    ),
    ({"env": [{"name": "A", "value": "1"}]}, {"env": [{"name": "A", "value": "2"}]}, False),
    ({"tolerations": [{"key": "k"}]}, {"tolerations": [{"key": "other"}, {"key": "k", "operator": "Equal"}]}, True),
    ({"args": ["a", "b"]}, {"args": ["b", "a"]}, False),
]


@pytest.mark.parametrize(("desired", "live", "expected"), SUBSET)
def test_is_subset(desired: Any, live: Any, expected: bool) -> None:
    assert is_subset(desired, live) is expected


def test_apply_keeps_the_live_replicas_and_leaves_the_manifest_alone() -> None:
    manifest = manifests.deployment(pool(), "u", 1)
    fresh = to_apply(manifest, None)
    assert fresh["spec"]["replicas"] == 1 and APPLIED in fresh["metadata"]["annotations"]
    live = {**fresh, "spec": {**fresh["spec"], "replicas": 4}}
    again = to_apply(manifest, live)
    assert again["spec"]["replicas"] == 4  # the scaler's value, not the initial one
    assert again["metadata"]["annotations"][APPLIED] == fresh["metadata"]["annotations"][APPLIED]
    assert APPLIED not in manifest["metadata"].get("annotations", {}) and manifest["spec"]["replicas"] == 1
    assert not needs_apply(again, live)


def test_apply_leaves_out_the_replicas_once_the_scaler_owns_them() -> None:
    """A /scale write between the read and the apply must not be reverted by a stale live count."""
    manifest = manifests.deployment(pool(), "u", 1)
    live = {**to_apply(manifest, None), "spec": {**manifest["spec"], "replicas": 4}}
    scaled = {"manager": "tierpool-scaler", "operation": "Update", "subresource": "scale"}
    scaled["fieldsV1"] = {"f:spec": {"f:replicas": {}}}
    owned = {**live, "metadata": {**live["metadata"], "managedFields": [scaled]}}
    desired = to_apply(manifest, owned)
    assert "replicas" not in desired["spec"] and desired["spec"]["template"] == manifest["spec"]["template"]
    assert not needs_apply(desired, owned)
    assert to_apply(manifest, live)["spec"]["replicas"] == 4  # not scaled yet: the live count, as before


def _edited(live: dict[str, Any], image: str) -> dict[str, Any]:
    template = live["spec"]["template"]
    container = {**template["spec"]["containers"][0], "image": image}
    spec = {**live["spec"], "template": {**template, "spec": {**template["spec"], "containers": [container]}}}
    return {**live, "spec": spec}


def _annotated(live: dict[str, Any], value: str) -> dict[str, Any]:
    return {**live, "metadata": {**live["metadata"], "annotations": {APPLIED: value}}}


NEEDS_APPLY = [
    ("missing", lambda live: None, True),
    ("as applied, with server defaults", lambda live: {**live, "status": {"replicas": 1}}, False),
    ("pod template edited by hand", lambda live: _edited(live, "someone/else:1"), True),
    ("applied from another manifest (a field since removed)", lambda live: _annotated(live, "0123"), True),
    (
        "being deleted: its DELETED event recreates it",
        lambda live: {**live, "metadata": {"deletionTimestamp": "x"}},
        False,
    ),
]


def _stored(live: dict[str, Any]) -> dict[str, Any]:
    """As the API server stores it: quantities canonical, the empty env value dropped, an injected sidecar var."""
    template = live["spec"]["template"]
    container = dict(template["spec"]["containers"][0])
    container["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
    env = [{k: v for k, v in var.items() if v != ""} for var in container["env"]]
    container["env"] = [{"name": "INJECTED", "value": "1"}, *env]
    spec = {**live["spec"], "template": {**template, "spec": {**template["spec"], "containers": [container]}}}
    return {**live, "spec": spec}


def test_a_canonicalized_object_needs_no_apply() -> None:
    worker = {"env": [{"name": "A", "value": "1"}, {"name": "EMPTY", "value": ""}]}
    worker["resources"] = {"requests": {"cpu": "0.5", "memory": "1024Mi"}}
    desired = to_apply(manifests.deployment(pool(worker=worker), "u", 1), None)
    assert desired["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "0.5"
    assert not needs_apply(desired, _stored(desired))


REPAIR = [
    ({"metadata": {"generation": 2}, "status": {"observedGeneration": 2}}, True),
    ({"metadata": {"generation": 3}, "status": {"observedGeneration": 2}}, False),  # reconcile's to apply
    ({"metadata": {"generation": 1}}, False),  # never reconciled yet
    ({"metadata": {}, "status": {"observedGeneration": None}}, False),
]


@pytest.mark.parametrize(("pool_body", "expected"), REPAIR)
def test_timer_and_watch_repair_only_the_reconciled_generation(pool_body: dict[str, Any], expected: bool) -> None:
    assert repair_allowed(pool_body) is expected


CHANGED = [
    (None, {"metadata": {"resourceVersion": "5"}}, True),
    ({"metadata": {"resourceVersion": "5"}}, {"metadata": {"resourceVersion": "5"}}, False),
    ({"metadata": {"resourceVersion": "5"}}, {"metadata": {"resourceVersion": "6"}}, True),
]


@pytest.mark.parametrize(("before", "after", "expected"), CHANGED)
def test_an_apply_changed_the_object_only_when_its_version_moved(before: Any, after: Any, expected: bool) -> None:
    assert changed(before, after) is expected


@pytest.mark.parametrize(("case", "live", "expected"), NEEDS_APPLY, ids=[c[0] for c in NEEDS_APPLY])
def test_needs_apply(case: str, live: Any, expected: bool) -> None:
    desired = to_apply(manifests.deployment(pool(worker={"env": [{"name": "A", "value": "1"}]}), "u", 1), None)
    assert needs_apply(desired, live(desired)) is expected


def test_a_removed_field_changes_the_applied_hash() -> None:
    with_env = to_apply(manifests.deployment(pool(worker={"env": [{"name": "A", "value": "1"}]}), "u", 1), None)
    without_env = to_apply(manifests.deployment(pool(), "u", 1), None)
    assert needs_apply(without_env, with_env)  # the live object still has every field of the new manifest


@pytest.mark.parametrize(
    "change",
    [
        {"replicas": {"min": 1, "max": 10, "desired": 3}},
        {"replicas": {"min": 0, "max": 50}},
        {"scaling": {"policy": "external", "interval": "9s"}},
    ],
)
def test_what_the_pods_never_read_does_not_roll_them(change: dict[str, Any]) -> None:
    """A /scale write (replicas.desired) or a scaling tweak changes neither the pods' document nor the hash."""
    before, after = pool(), pool(**change)
    assert manifests.spec_hash(before) == manifests.spec_hash(after)
    assert manifests.config_map(before, "u") == manifests.config_map(after, "u")
    assert (
        manifests.deployment(before, "u", 2)["spec"]["template"]
        == manifests.deployment(after, "u", 2)["spec"]["template"]
    )
    assert parse_pool(json.loads(manifests.pool_document_json(after))).spec.worker == after.spec.worker


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(1, 2.0), (2, 4.0), (5, 32.0), (8, 256.0), (9, 300.0), (1025, 300.0), (10**9, 300.0), (0, 2.0)],
)
def test_retry_delay_doubles_up_to_the_cap_and_never_overflows(failures: int, expected: float) -> None:
    assert conditions.retry_delay(failures, 2.0, 300.0) == expected


def _deployment(want: int, generation: int = 2, **status: int) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "spec": {"replicas": want}, "status": status}


READINESS = [
    ("missing", None, False, "DeploymentMissing"),
    ("being deleted", {"metadata": {"deletionTimestamp": "t"}, "spec": {}}, False, "DeploymentDeleting"),
    ("controller has not seen the template", _deployment(1, observedGeneration=1), False, "RolloutPending"),
    ("no status yet", _deployment(1), False, "RolloutPending"),
    ("rolling out", _deployment(2, observedGeneration=2, updatedReplicas=1, replicas=2), False, "RollingOut"),
    ("old pods left", _deployment(2, observedGeneration=2, updatedReplicas=2, replicas=3), False, "RollingOut"),
    (
        "pods not ready",
        _deployment(2, observedGeneration=2, updatedReplicas=2, replicas=2, readyReplicas=1),
        False,
        "WorkersNotReady",
    ),
    (
        "ready",
        _deployment(2, observedGeneration=2, updatedReplicas=2, replicas=2, readyReplicas=2),
        True,
        "WorkersReady",
    ),
    ("scaled to zero", _deployment(0, observedGeneration=2), True, "WorkersReady"),
]


@pytest.mark.parametrize(("case", "deployment", "ok", "reason"), READINESS, ids=[c[0] for c in READINESS])
def test_ready_means_the_deployment_is_current_and_ready(case: str, deployment: Any, ok: bool, reason: str) -> None:
    assert conditions.deployment_ready(deployment)[:2] == (ok, reason)


def test_condition_merge_keeps_other_types_and_sets_observed_generation() -> None:
    ready = conditions.ready_condition(None, 100.0, 3)
    merged = conditions.merge([{"type": "ThirdParty", "status": "True"}], [ready])
    assert [c["type"] for c in merged] == ["Ready", "ThirdParty"] and merged[0]["observedGeneration"] == 3
    assert conditions.same_conditions(merged, [conditions.ready_condition(None, 200.0, 3)])
    assert not conditions.same_conditions(merged, [conditions.ready_condition(None, 200.0, 4)])


def test_condition_merge_keeps_transition_time_when_status_is_unchanged() -> None:
    first = conditions.merge([], [conditions.condition("Ready", True, "Reconciled", "ok", 100.0)])
    again = conditions.merge(first, [conditions.condition("Ready", True, "Reconciled", "still ok", 200.0)])
    flipped = conditions.merge(again, [conditions.condition("Ready", False, "InvalidSpec", "bad", 300.0)])
    assert again[0]["lastTransitionTime"] == first[0]["lastTransitionTime"] and again[0]["message"] == "still ok"
    assert flipped[0]["lastTransitionTime"] == conditions.timestamp(300.0)
    ordered = conditions.merge(
        flipped,
        [
            conditions.condition("Scaling", False, "Steady", "", 1.0),
            conditions.condition("RedisReachable", True, "Observed", "", 1.0),
        ],
    )
    assert [c["type"] for c in ordered] == ["Ready", "RedisReachable", "Scaling"]


def test_invalid_spec_condition_names_every_field() -> None:
    found = conditions.invalid_spec(
        [("spec.tiers[0].escalateAfter", "not allowed"), ("spec.replicas.min", "<= max")], 1.0, 4
    )
    assert found["reason"] == "InvalidSpec" and found["observedGeneration"] == 4
    assert "spec.tiers[0].escalateAfter: not allowed" in found["message"] and "spec.replicas.min" in found["message"]


def tier(name: str, exists: bool = True, backlog: int = 0) -> TierObservation:
    return TierObservation(name, exists, backlog, backlog, True, 0, 0.0, 1, 0, 0)


@pytest.mark.parametrize(
    ("tiers", "desired", "current", "reachable_reason", "scaling"),
    [
        ((tier("p0"), tier("p1")), 1, 1, "Observed", ("False", "Steady")),
        ((tier("p0", backlog=9), tier("p1", exists=False)), 3, 1, "StreamsMissing", ("True", "up")),
        ((tier("p0"), tier("p1")), 1, 2, "Observed", ("True", "down")),
    ],
)
def test_observed_status(
    tiers: tuple[TierObservation, ...], desired: int, current: int, reachable_reason: str, scaling: tuple[str, str]
) -> None:
    decision = Decision(desired, desired, "because", History())
    obs = PoolObservation("team/agents", 1.0, tiers, 2, scheduled=7, throttled=3)
    status = conditions.observed_status(obs, decision, current, 1, 5.0)
    reachable, scaled = status["conditionUpdates"]
    assert reachable["status"] == "True" and reachable["reason"] == reachable_reason
    assert (scaled["status"], scaled["reason"]) == scaling
    assert status["deadLetters"] == 2 and [t["name"] for t in status["tiers"]] == ["p0", "p1"]
    assert (status["scheduled"], status["throttled"]) == (7, 3)  # protocol 5
    assert (status["lastScale"] is None) is (desired == current)


SAVED = {"backlog": 0, "tiers": [{"name": "p0", "lag": 0}], "scaler": {"at": 100.0, "recommendations": [[100.0, 1]]}}


@pytest.mark.parametrize(
    ("fields", "now", "due"),
    [
        ({"backlog": 0, "tiers": [{"name": "p0", "lag": 0}], "scaler": {"at": 105.0}}, 105.0, False),
        ({"backlog": 3, "tiers": [{"name": "p0", "lag": 0}], "scaler": {"at": 105.0}}, 105.0, True),
        ({"backlog": 0, "tiers": [{"name": "p0", "lag": 1}], "scaler": {"at": 105.0}}, 105.0, True),
        ({"backlog": 0, "lastScale": {"desired": 2}, "scaler": {"at": 105.0}}, 105.0, True),  # a new field
        ({"backlog": 0, "redisRetryAt": None, "scaler": {"at": 150.0}}, 150.0, False),  # None equals absent
        ({"backlog": 0, "scaler": {"at": 160.0}}, 160.0, True),  # the scaler's memory is 60 s old
    ],
)
def test_status_is_written_only_when_it_changed_or_the_memory_is_stale(
    fields: dict[str, Any], now: float, due: bool
) -> None:
    assert conditions.status_write_due(SAVED, fields, now, refresh=60.0) is due


WRITTEN = {"backlog": 0, "tiers": [{"name": "p0", "lag": 0}], "scaler": {"at": 200.0}}


@pytest.mark.parametrize(
    ("fields", "now", "due"),
    [
        ({**WRITTEN, "scaler": {"at": 205.0}}, 205.0, False),  # kopf's copy is older (SAVED): not written again
        ({**WRITTEN, "backlog": 2, "scaler": {"at": 205.0}}, 205.0, True),  # changed since the scaler's write
        ({**WRITTEN, "scaler": {"at": 259.0}}, 259.0, False),
        ({**WRITTEN, "scaler": {"at": 260.0}}, 260.0, True),  # its own write is 60 s old
    ],
)
def test_a_status_the_scaler_just_wrote_is_not_written_again_while_kopfs_copy_lags(
    fields: dict[str, Any], now: float, due: bool
) -> None:
    lagging = {**SAVED, "backlog": 5}  # kopf has not seen the scaler's last write (backlog 0 at t = 200) yet
    assert conditions.status_write_due(lagging, fields, now, refresh=60.0, written=(WRITTEN, 200.0)) is due


def _reachable(reason: str, at: str) -> dict[str, Any]:
    return {"type": "RedisReachable", "status": "True", "reason": reason, "message": "m", "lastTransitionTime": at}


@pytest.mark.parametrize(
    ("conditions_now", "due"),
    [
        ([_reachable("Observed", "2026-12-01T06:58:20Z")], False),  # the same condition, stamped anew
        ([_reachable("Observed", "2026-12-01T06:58:10Z")], False),
        ([_reachable("StreamsMissing", "2026-12-01T06:58:20Z")], True),  # its reason changed
        ([], True),
    ],
)
def test_a_condition_stamped_anew_against_kopfs_lagging_copy_is_not_a_change(
    conditions_now: list[dict[str, Any]], due: bool
) -> None:
    """At 1,000 pools kopf's copy lagged minutes behind (the API server had closed its watch as too slow), so the
    merge into it gave RedisReachable a new lastTransitionTime on every pass, and every pass wrote status."""
    written = {**WRITTEN, "conditions": [_reachable("Observed", "2026-12-01T06:58:10Z")]}
    fields = {**written, "conditions": conditions_now, "scaler": {"at": 210.0}}
    assert conditions.status_write_due(SAVED, fields, 210.0, refresh=60.0, written=(written, 200.0)) is due


def test_status_is_written_when_nothing_was_saved_yet() -> None:
    assert conditions.status_write_due({}, {"backlog": 0}, 5.0, refresh=60.0)


@pytest.mark.parametrize(
    ("pod", "host", "pid", "nonce", "expected"),
    [
        ("tierpool-7c9d-abcde", "node-1", 7, "a1b2c3", "tierpool-7c9d-abcde/7/a1b2c3"),
        ("", "laptop", 4242, "ffffff", "laptop/4242/ffffff"),
    ],
)
def test_operator_identity_needs_no_passwd_entry(pod: str, host: str, pid: int, nonce: str, expected: str) -> None:
    assert operator_identity(pod, host, pid, nonce) == expected


def test_own_identity_does_not_ask_getpass(monkeypatch: pytest.MonkeyPatch) -> None:
    """UID 10001 in our image has no passwd entry: getpass.getuser() raises KeyError there, and kopf's default
    identity calls it, so the operator crashed at start (issue #9)."""
    import getpass

    def no_user() -> str:
        raise KeyError("getpwuid(): uid not found: 10001")

    monkeypatch.setattr(getpass, "getuser", no_user)
    identity = own_identity(OperatorConfig(pod_name="tierpool-0"))
    assert identity.startswith("tierpool-0/")


def _entry(manager: str, operation: str, fields: dict[str, Any], **extra: str) -> dict[str, Any]:
    return {"manager": manager, "operation": operation, "fieldsType": "FieldsV1", "fieldsV1": fields, **extra}


def test_the_old_create_entry_is_folded_into_the_apply_entry() -> None:
    created = _entry("tierpool-operator", "Update", {"f:spec": {"f:env": {}, "f:replicas": {}}})
    applied = _entry("tierpool-operator", "Apply", {"f:spec": {"f:image": {}}})
    scaler = _entry("tierpool-scaler", "Update", {"f:spec": {"f:replicas": {}}}, subresource="scale")
    status = _entry("tierpool-operator", "Update", {"f:status": {}}, subresource="status")
    folded = folded_managed_fields([created, applied, scaler, status])
    assert folded is not None
    ours = [e for e in folded if e["manager"] == "tierpool-operator" and not e.get("subresource")]
    assert ours == [_entry("tierpool-operator", "Apply", {"f:spec": {"f:image": {}, "f:env": {}, "f:replicas": {}}})]
    assert scaler in folded and status in folded
    assert folded_managed_fields([applied, scaler, status]) is None
    only_created = folded_managed_fields([created])
    assert only_created == [{**created, "operation": "Apply"}]


@pytest.mark.parametrize(
    ("kind", "expected", "unexpected"),
    [
        ("Secret", ["Secret tierpool-x-redis", "namespace ns", "secretNamespaces", "spec.redis.urlSecretRef"], []),
        ("Deployment", ["Deployment tierpool-x", "namespace ns", "Forbidden"], ["secretNamespaces"]),
    ],
)
def test_a_forbidden_child_names_what_to_grant(kind: str, expected: list[str], unexpected: list[str]) -> None:
    name = "tierpool-x-redis" if kind == "Secret" else "tierpool-x"
    found = conditions.forbidden(kind, name, "ns", 0.0, 3)
    assert (found["type"], found["status"], found["reason"], found["observedGeneration"]) == (
        "Ready",
        "False",
        "Forbidden",
        3,
    )
    assert all(text in found["message"] for text in expected), found["message"]
    assert not any(text in found["message"] for text in unexpected), found["message"]


def test_a_sentinel_pool_reaches_its_workers_through_the_document() -> None:
    """The sentinel addresses and master name reach the pods in the pool document (their password does not); the
    WAIT opt-in too, and its defaults stay out like the default mode."""
    from tierpool.store.registry import spec_json

    sentinel = {"masterName": "m", "sentinels": ["s:26379"], "passwordSecretRef": {"name": "ss", "key": "p"}}
    watched = pool(redis={"mode": "sentinel", "sentinel": sentinel, "waitReplicas": 1})
    document = json.loads(manifests.pool_document_json(watched))["spec"]["redis"]
    assert document["sentinel"]["sentinels"] == ["s:26379"] and document["waitReplicas"] == 1
    assert "waitTimeout" not in document and "waitReplicas" not in spec_json(pool().spec)
    assert parse_pool(json.loads(manifests.pool_document_json(watched))).spec.redis == watched.spec.redis


@pytest.mark.parametrize(
    ("environ", "expected"),
    [({}, 30.0), ({"TIERPOOL_CONSISTENCY_TIMEOUT_SECONDS": "12.5"}, 12.5)],
)
def test_the_consistency_timeout_is_read_from_the_environment(environ: dict[str, str], expected: float) -> None:
    assert OperatorConfig.from_env(environ).consistency_timeout == expected


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, ("INFO", "json", False)),
        ({"TIERPOOL_LOG_LEVEL": "debug", "TIERPOOL_LOG_FORMAT": "text"}, ("debug", "text", True)),
        ({"TIERPOOL_LOG_LEVEL": "WARNING"}, ("WARNING", "json", False)),
    ],
)
def test_the_log_settings_are_read_from_the_environment(
    environ: dict[str, str], expected: tuple[str, str, bool]
) -> None:
    config = OperatorConfig.from_env(environ)
    assert (config.log_level, config.log_format, config.verbose) == expected
