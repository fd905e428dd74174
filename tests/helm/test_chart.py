"""The Helm chart: lint, render over value sets, strict offline validation, key assertions, CRD drift."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.helm.chart import KUBE_VERSION, by_kind, render
from tests.helm.conftest import CHART

pytestmark = pytest.mark.helm

VALUE_SETS = [
    (),
    ("watchNamespaces={team-a,team-b}",),
    ("redis.enabled=true", "redis.password=dev"),
    ("metrics.serviceMonitor.enabled=true", "dashboard.enabled=true"),
    ("metrics.prometheusRule.enabled=true",),
    ("crds.install=false", "serviceAccount.create=false", "serviceAccount.name=existing"),
    ("peering=true", "replicas=2"),
    ("peering=true", "replicas=2", "watchNamespaces={team-a}", "peeringLifetimeSeconds=10"),
    ("peering=true", "crds.installPeering=false"),
    ("redis.enabled=true", "redis.password=x", "redis.storage=", "redis.nodePort=30379"),
    ("networkPolicy.enabled=true",),
    ("networkPolicy.enabled=true", "watchNamespaces={team-a,team-b}", "networkPolicy.metricsFrom=null"),
    (
        "security.allowedImagePrefixes={registry.example.com/agents/,ghcr.io/acme/}",
        "security.allowedSecretNames={redis}",
    ),
]


@pytest.mark.parametrize("sets", VALUE_SETS, ids=lambda s: ",".join(s) or "defaults")
def test_lint_and_render(helm: Path, sets: tuple[str, ...]) -> None:
    args = [str(helm), "lint", "--strict", "--kube-version", KUBE_VERSION, str(CHART)]
    args += [part for item in sets for part in ("--set", item)]
    lint = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert render(helm, *sets)


@pytest.mark.parametrize("sets", VALUE_SETS, ids=lambda s: ",".join(s) or "defaults")
def test_rendered_manifests_validate_strictly_offline(helm: Path, sets: tuple[str, ...], tmp_path: Path) -> None:
    import kubernetes_validate

    for doc in render(helm, *sets):
        if doc["apiVersion"].startswith(("monitoring.coreos.com", "apiextensions.k8s.io")):
            continue  # no bundled schema for third-party kinds; the CRD itself is checked on a real API server
        kubernetes_validate.validate(doc, "1.33.0", strict=True)


@pytest.mark.parametrize(
    "bad",
    [
        "bogus=1",
        "replicas=0",
        "logFormat=xml",
        "image.pullPolicy=Sometimes",
        "metrics.port=80",
        "watchNamespaces={Bad_Name}",
        "redis.unknown=1",
        "redis.nodePort=6379",
        "peeringLifetimeSeconds=2",
        "networkPolicy.metricsFrom[0].bogus=1",
        "networkPolicy.workerNamespaces={Bad_Name}",
        "security.allowedSecretNames={Bad_Name}",
        "security.allowedImagePrefixes=ghcr.io/acme/",
        "security.bogus=1",
    ],
)
def test_schema_rejects_bad_values(helm: Path, bad: str) -> None:
    with pytest.raises(RuntimeError, match=r"values don't meet the specifications|schema"):
        render(helm, bad)


def test_defaults_are_standalone_restricted_and_least_privilege(helm: Path) -> None:
    docs = render(helm)
    [deployment] = by_kind(docs, "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    pod = spec["template"]["spec"]
    container = pod["containers"][0]
    assert (
        pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    )
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["TIERPOOL_WATCH_NAMESPACES"] == "" and env["TIERPOOL_PEERING"] == "false"
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}, "names the operator to its kopf peers"
    rules = [rule for role in by_kind(docs, "ClusterRole") for rule in role["rules"]]
    resources = {res for rule in rules for res in rule["resources"]}
    verbs = {verb for rule in rules for verb in rule["verbs"]}
    assert "*" not in verbs and "*" not in resources and "delete" not in verbs
    assert not {"pods/exec", "pods/eviction", "nodes", "clusterroles"} & resources
    pod_verbs = {verb for rule in rules if "pods" in rule["resources"] for verb in rule["verbs"]}
    assert pod_verbs == {"list", "patch"}, "pods: only the deletion-cost annotation before a scale-in"
    [policy] = named(by_kind(docs, "ValidatingAdmissionPolicy"), "tp-tierpool-pod-patches")  # narrows that patch
    assert policy["spec"]["failurePolicy"] == "Fail"
    [match] = policy["spec"]["matchConditions"]
    assert match["expression"] == "request.userInfo.username == 'system:serviceaccount:tierpool-system:tp-tierpool'"
    [binding] = named(by_kind(docs, "ValidatingAdmissionPolicyBinding"), "tp-tierpool-pod-patches")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    secret_roles = [
        r["metadata"]["name"]
        for r in by_kind(docs, "ClusterRole")
        if any("secrets" in x["resources"] for x in r["rules"])
    ]
    assert secret_roles == ["tp-tierpool-secrets"]
    [secret_role] = [r for r in by_kind(docs, "ClusterRole") if r["metadata"]["name"] == "tp-tierpool-secrets"]
    assert secret_role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create", "patch"]}]
    bound = [b for b in by_kind(docs, "ClusterRoleBinding") if b["roleRef"]["name"] == "tp-tierpool-secrets"]
    assert not bound, "secrets must never be readable cluster-wide"
    [secret_binding] = [b for b in by_kind(docs, "RoleBinding") if b["roleRef"]["name"] == "tp-tierpool-secrets"]
    assert secret_binding["metadata"]["namespace"] == "tierpool-system"


def named(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["metadata"]["name"] == name]


def test_namespaced_mode_binds_per_namespace(helm: Path) -> None:
    docs = render(helm, "watchNamespaces={team-a,team-b}")
    role_bindings = {(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in by_kind(docs, "RoleBinding")}
    assert role_bindings == {
        ("team-a", "tp-tierpool"),
        ("team-b", "tp-tierpool"),
        ("team-a", "tp-tierpool-secrets"),
        ("team-b", "tp-tierpool-secrets"),
    }
    assert [b["roleRef"]["name"] for b in by_kind(docs, "ClusterRoleBinding")] == ["tp-tierpool-crds"]
    env = {
        e["name"]: e.get("value")
        for e in by_kind(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TIERPOOL_WATCH_NAMESPACES"] == "team-a,team-b"


def test_crd_template_matches_crds_folder(helm: Path) -> None:
    [crd] = by_kind(render(helm), "CustomResourceDefinition")
    assert crd["metadata"].pop("annotations") == {"helm.sh/resource-policy": "keep"}
    assert crd == yaml.safe_load((ROOT / "crds" / "agentpool.yaml").read_text())
    assert not by_kind(render(helm, "crds.install=false"), "CustomResourceDefinition")
    [unkept] = by_kind(render(helm, "crds.keep=false"), "CustomResourceDefinition")
    assert "annotations" not in unkept["metadata"]


def test_optional_parts(helm: Path) -> None:
    docs = render(
        helm, "metrics.serviceMonitor.enabled=true", "dashboard.enabled=true", "redis.enabled=true", "redis.password=pw"
    )
    assert {d["kind"] for d in docs} >= {"ServiceMonitor", "PodMonitor", "StatefulSet", "Secret", "ConfigMap"}
    [dashboard] = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("dashboard")]
    panels = [p["title"] for p in yaml.safe_load(dashboard["data"]["tierpool.json"])["panels"]]
    assert panels == [
        "Backlog by tier (waiting tasks)",
        "Head-of-line age vs SLA",
        "Queue wait p95 by tier",
        "Replicas: desired vs ready",
        "Reclaimed, escalated, dead-lettered (per second)",
    ]
    [secret] = [d for d in by_kind(docs, "Secret") if d["metadata"]["name"] == "tp-tierpool-redis"]
    assert secret["stringData"]["url"] == "redis://:pw@tp-tierpool-redis.tierpool-system.svc:6379/0"
    assert not {"ServiceMonitor", "StatefulSet"} & {d["kind"] for d in render(helm)}


def test_the_prometheus_rule_alerts_on_a_long_pending_task_and_piling_dead_letters(helm: Path) -> None:
    assert not by_kind(render(helm), "PrometheusRule")  # off by default
    sets = ("metrics.prometheusRule.enabled=true", "metrics.prometheusRule.oldestPendingSeconds=600")
    [rule] = by_kind(render(helm, *sets), "PrometheusRule")
    alerts = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert alerts["TierpoolTaskPendingTooLong"]["expr"] == "tierpool_pool_oldest_pending_age_seconds > 600"
    assert alerts["TierpoolDeadLettersPiling"]["expr"] == "tierpool_pool_dead_letters > 1000"
    assert {r["for"] for r in alerts.values()} == {"10m"}
    assert "{{ $labels.pool }}" in alerts["TierpoolDeadLettersPiling"]["annotations"]["summary"]


def test_every_value_has_a_comment() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    for index, line in enumerate(lines):
        if re.match(r"^\s*[A-Za-z_][\w-]*:", line):
            previous = lines[index - 1].strip() if index else ""
            assert previous.startswith("#"), f"values.yaml line {index + 1} has no comment: {line.strip()}"


def test_values_schema_lists_every_top_level_key() -> None:
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) == set(schema["properties"])


@pytest.mark.parametrize("command", ["lint", "template"])
def test_helm_works_without_kube_version_as_the_readme_says(helm: Path, command: str) -> None:
    """Our helm is stamped with its Kubernetes version, as helm's own build does; unstamped it assumes v1.20."""
    done = subprocess.run([str(helm), command, str(CHART)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    version = subprocess.run([str(helm), "version", "--template", "{{.Version}}"], capture_output=True, text=True)
    assert version.stdout.startswith("v3."), version.stdout


def peering_rules(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(role kind, resource) for every kopf.dev rule."""
    return {
        (role["kind"], res)
        for role in by_kind(docs, "ClusterRole") + by_kind(docs, "Role")
        for rule in role["rules"]
        if "kopf.dev" in rule["apiGroups"]
        for res in rule["resources"]
    }


@pytest.mark.parametrize(
    ("sets", "resources"),
    [
        ((), set()),
        (("peering=true",), {("ClusterRole", "clusterkopfpeerings")}),
        (("peering=true", "watchNamespaces={team-a}"), {("ClusterRole", "kopfpeerings")}),  # bound per namespace
    ],
)
def test_peering_ships_kopfs_crds_and_only_the_rbac_its_scope_needs(
    helm: Path, sets: tuple[str, ...], resources: set[tuple[str, str]]
) -> None:
    docs = render(helm, *sets)
    crds = {d["metadata"]["name"] for d in by_kind(docs, "CustomResourceDefinition")}
    peering_crds = {"kopfpeerings.kopf.dev", "clusterkopfpeerings.kopf.dev"}
    assert (peering_crds <= crds) == bool(sets)
    assert peering_rules(docs) == resources
    [deployment] = by_kind(docs, "Deployment")
    env = {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    if sets:
        assert env["TIERPOOL_PEERING_NAME"] == "tp-tierpool" and env["TIERPOOL_PEERING_LIFETIME_SECONDS"] == "30"
        assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    else:
        assert "TIERPOOL_PEERING_NAME" not in env


def test_peering_crds_can_be_left_to_another_release(helm: Path) -> None:
    docs = render(helm, "peering=true", "crds.installPeering=false")
    assert {d["metadata"]["name"] for d in by_kind(docs, "CustomResourceDefinition")} == {"agentpools.tierpool.io"}


PROMETHEUS_PODS = {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}


def network_policies(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(p["metadata"]["namespace"], p["metadata"]["name"]): p["spec"] for p in by_kind(docs, "NetworkPolicy")}


def a_pools_worker_pod() -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Labels and container ports of a worker pod as the operator makes it."""
    from tierpool.model.resource import parse_pool
    from tierpool_operator import manifests

    document = {"metadata": {"name": "agents", "namespace": "team-a"}, "spec": {"tiers": [{"name": "p0", "weight": 1}]}}
    pool = parse_pool({"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", **document})
    template = manifests.deployment(pool, "uid-1", 1)["spec"]["template"]
    return template["metadata"]["labels"], template["spec"]["containers"][0]["ports"]


def test_no_network_policy_unless_enabled(helm: Path) -> None:
    assert not by_kind(render(helm), "NetworkPolicy")


def test_network_policies_let_only_prometheus_reach_the_metrics_ports(helm: Path) -> None:
    docs = render(helm, "networkPolicy.enabled=true")
    policies = network_policies(docs)
    assert set(policies) == {("tierpool-system", "tp-tierpool"), ("tierpool-system", "tp-tierpool-workers")}
    only_metrics = [{"ports": [{"port": "metrics", "protocol": "TCP"}], "from": [PROMETHEUS_PODS]}]
    for spec in policies.values():
        assert spec["policyTypes"] == ["Ingress"] and spec["ingress"] == only_metrics
    [operator] = by_kind(docs, "Deployment")
    operator_pod = operator["spec"]["template"]
    assert (
        policies["tierpool-system", "tp-tierpool"]["podSelector"]["matchLabels"]
        == operator["spec"]["selector"]["matchLabels"]
    )
    assert "metrics" in {port["name"] for port in operator_pod["spec"]["containers"][0]["ports"]}
    worker_labels, worker_ports = a_pools_worker_pod()
    selector = policies["tierpool-system", "tp-tierpool-workers"]["podSelector"]["matchLabels"]
    assert selector == {
        "app.kubernetes.io/name": "tierpool-worker",
        "app.kubernetes.io/managed-by": "tierpool-operator",
    }
    assert selector.items() <= worker_labels.items(), "selects the pods the operator makes"
    assert not selector.items() <= operator_pod["metadata"]["labels"].items()
    assert [port["name"] for port in worker_ports] == ["metrics"], "the port the policy opens serves every endpoint"


@pytest.mark.parametrize(
    ("sets", "namespaces"),
    [
        (("watchNamespaces={team-a,team-b}",), {"team-a", "team-b"}),
        (("networkPolicy.workerNamespaces={apps}",), {"apps"}),
        (("watchNamespaces={team-a}", "networkPolicy.workerNamespaces={apps,ml}"), {"apps", "ml"}),
    ],
)
def test_worker_network_policies_go_where_the_pools_are(
    helm: Path, sets: tuple[str, ...], namespaces: set[str]
) -> None:
    policies = network_policies(render(helm, "networkPolicy.enabled=true", *sets))
    assert {ns for ns, name in policies if name == "tp-tierpool-workers"} == namespaces
    assert {ns for ns, name in policies if name == "tp-tierpool"} == {"tierpool-system"}


def test_network_policy_sources_are_configurable(helm: Path) -> None:
    peer = "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=observability"
    for spec in network_policies(render(helm, "networkPolicy.enabled=true", peer)).values():
        assert spec["ingress"][0]["from"] == [{"namespaceSelector": {"matchLabels": {"team": "observability"}}}]
    for spec in network_policies(render(helm, "networkPolicy.enabled=true", "networkPolicy.metricsFrom=null")).values():
        assert spec["ingress"] == [], "no sources: nobody, never everybody (a rule without `from` allows all)"


def child_kinds() -> set[tuple[str, str]]:
    """(API group, plural) of every child manifests.py makes, its own Secret included."""
    from tierpool.model.resource import parse_pool
    from tierpool_operator import manifests

    spec = {"tiers": [{"name": "p0", "weight": 1}], "redis": {"url": "redis://:pw@r:6379/0"}}
    meta = {"name": "p", "namespace": "n"}
    pool = parse_pool({"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": meta, "spec": spec})
    plural = {"ConfigMap": "configmaps", "ServiceAccount": "serviceaccounts", "Secret": "secrets"}
    plural |= {"PodDisruptionBudget": "poddisruptionbudgets", "Deployment": "deployments"}
    return {
        (child["apiVersion"].rpartition("/")[0], plural[child["kind"]]) for child in manifests.children(pool, "uid", 1)
    }


def policy_rules(policy: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, operation)
        for rule in policy["spec"]["matchConstraints"]["resourceRules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for operation in rule["operations"]
    }


def test_the_operators_child_writes_are_narrowed_by_admission(helm: Path) -> None:
    """Every kind the operator writes is matched (CREATE and UPDATE; /scale on UPDATE), only for the operator's
    ServiceAccount, denied when a rule fails; without allowlists, no image or Secret rule."""
    docs = render(helm)
    policies = {p["metadata"]["name"]: p for p in by_kind(docs, "ValidatingAdmissionPolicy")}
    operator = "request.userInfo.username == 'system:serviceaccount:tierpool-system:tp-tierpool'"
    for name in ("tp-tierpool-children", "tp-tierpool-workers", "tp-tierpool-scale"):
        policy = policies[name]
        assert policy["spec"]["failurePolicy"] == "Fail"
        assert [m["expression"] for m in policy["spec"]["matchConditions"]] == [operator]
        [binding] = named(by_kind(docs, "ValidatingAdmissionPolicyBinding"), name)
        assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    children = policy_rules(policies["tp-tierpool-children"])
    assert {(g, r, op) for g, r in child_kinds() for op in ("CREATE", "UPDATE")} <= children
    assert policy_rules(policies["tp-tierpool-workers"]) == {("apps", "deployments", op) for op in ("CREATE", "UPDATE")}
    assert policy_rules(policies["tp-tierpool-scale"]) == {("apps", "deployments/scale", "UPDATE")}
    workers = yaml.safe_dump(policies["tp-tierpool-workers"])
    assert "serviceAccountName" in workers and "hostNetwork" in workers
    hardened = ("capabilities", "allowPrivilegeEscalation", "runAsUser", "runAsNonRoot", "hostPort", "nodeName")
    assert set(hardened) | {"tolerations", "terminationGracePeriodSeconds", "initContainers"} <= set(
        re.findall(r"[A-Za-z]+", workers)
    )
    assert "object.?type.orValue('') == 'Opaque'" in yaml.safe_dump(policies["tp-tierpool-children"], width=1000)
    assert "allowedImagePrefixes" not in workers and "allowedSecretNames" not in workers
    rules = [rule for role in by_kind(docs, "ClusterRole") for rule in role["rules"]]
    assert all(rule["verbs"] == ["patch"] for rule in rules if "deployments/scale" in rule["resources"])


def test_allowlists_become_admission_rules(helm: Path) -> None:
    docs = render(
        helm,
        "security.allowedImagePrefixes={registry.example.com/agents/,ghcr.io/acme/}",
        "security.allowedSecretNames={redis,api-key}",
    )
    [policy] = named(by_kind(docs, "ValidatingAdmissionPolicy"), "tp-tierpool-workers")
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables["images"] == '["registry.example.com/agents/","ghcr.io/acme/"]'
    assert variables["secrets"] == "[\"redis\",\"api-key\"] + ['tierpool-' + variables.pool + '-redis']"
    messages = " ".join(v.get("messageExpression", "") for v in policy["spec"]["validations"])
    assert "security.allowedImagePrefixes" in messages and "security.allowedSecretNames" in messages
    assert {"secretKeyRef", "envFrom", "projected", "imagePullSecrets"} <= set(
        re.findall(r"[A-Za-z]+", yaml.safe_dump(policy["spec"]["validations"]))
    )
    [operator] = by_kind(docs, "Deployment")
    env = {e["name"]: e.get("value") for e in operator["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TIERPOOL_ALLOWED_SECRET_NAMES"] == "redis,api-key"  # the operator reads no other Secret either
    [plain] = by_kind(render(helm), "Deployment")
    assert "TIERPOOL_ALLOWED_SECRET_NAMES" not in str(plain)


@pytest.mark.parametrize(
    ("sets", "namespace", "secret"),
    [
        (("redis.enabled=true", "redis.password=pw"), "tierpool-system", "tp-tierpool-redis"),
        ((), "tierpool-system", "my-redis"),
        (("watchNamespaces={team-a,team-b}",), "team-a", "my-redis"),
        (("redis.enabled=true", "tests.redisUrlSecret=mine", "tests.pool=apps/minimal"), "tierpool-system", "mine"),
    ],
)
def test_the_printed_path_names_objects_the_chart_creates(
    helm: Path, sets: tuple[str, ...], namespace: str, secret: str
) -> None:
    """The NOTES' pool reaches Redis through a Secret that exists where the pool lives (the dev Redis' own, in the
    release namespace); the port-forward names the dev Redis' Service; submit, helm test and the pool agree."""
    from tests.helm.chart import notes, notes_pool
    from tierpool.model.resource import parse_pool

    text = notes(helm, *sets)
    pool = parse_pool(notes_pool(text))
    assert (pool.metadata.namespace, pool.metadata.name) == (namespace, "minimal")
    assert pool.spec.redis.url_secret_ref is not None and pool.spec.redis.url_secret_ref.name == secret
    assert f"tierpool submit --pool {namespace}/minimal --tier p0" in text and "helm test tp -n tierpool-system" in text
    assert "\nkubectl apply -f - <<'EOF'\n" in text and "\nEOF\n" in text  # pasted into bash, the heredoc ends
    rbac = render(helm, *sets)
    readable = {
        d["metadata"]["namespace"] for d in by_kind(rbac, "RoleBinding") if d["metadata"]["name"].endswith("-secrets")
    }
    assert namespace in readable  # the operator may read the pool's Secret there
    docs = render(helm, *sets)
    [test_pod] = [d for d in by_kind(docs, "Pod") if d["metadata"]["annotations"]["helm.sh/hook"] == "test"]
    [container] = test_pod["spec"]["containers"]
    target = "apps/minimal" if "tests.pool=apps/minimal" in sets else f"{namespace}/minimal"
    assert container["args"][:3] == ["submit", "--pool", target]
    assert test_pod["metadata"]["namespace"] == target.split("/", maxsplit=1)[0]
    assert container["env"][0]["valueFrom"]["secretKeyRef"] == {"name": secret, "key": "url"}
    assert test_pod["metadata"]["labels"]["app.kubernetes.io/name"] == "tierpool-test"  # not the operator's selector
    if "redis.enabled=true" in sets:
        secrets = {d["metadata"]["name"]: d for d in by_kind(docs, "Secret")}
        assert (
            secrets["tp-tierpool-redis"]["metadata"]["namespace"] == namespace
            and "url" in secrets["tp-tierpool-redis"]["stringData"]
        )
        [service] = [d for d in by_kind(docs, "Service") if d["metadata"]["name"] == "tp-tierpool-redis"]
        assert f"kubectl -n tierpool-system port-forward svc/{service['metadata']['name']} 16379:6379" in text
    else:
        assert f"create secret generic {secret}" in text


def test_the_example_pool_file_is_the_pool_the_notes_print(helm: Path) -> None:
    """README and the cluster guide apply examples/minimal.yaml; it must be what NOTES print for that install."""
    from tests.helm.chart import notes, notes_pool

    printed = notes_pool(notes(helm, "redis.enabled=true", release="tierpool"))
    assert yaml.safe_load((ROOT / "examples" / "minimal.yaml").read_text()) == printed
