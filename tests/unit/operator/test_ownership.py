"""Adoption refusal: a child is applied only over an object that is already the pool's, decided without a request."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tierpool.model.resource import AgentPool, parse_pool
from tierpool_operator import manifests
from tierpool_operator.kube import ChildForbidden, ChildNameTaken, Kind, Kube
from tierpool_operator.ownership import name_taken
from tierpool_operator.pool_writes import refusal

UID = "0a0a0a0a-1111-2222-3333-444444444444"
OTHER_UID = "0b0b0b0b-1111-2222-3333-444444444444"


def pool(name: str = "agents") -> AgentPool:
    spec = {"tiers": [{"name": "p0", "weight": 1}], "redis": {"url": "redis://r:6379/0"}}
    meta = {"name": name, "namespace": "team"}
    return parse_pool({"apiVersion": "tierpool.io/v1alpha1", "kind": "AgentPool", "metadata": meta, "spec": spec})


def live(labels: dict[str, str] | None = None, owners: list[str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "tierpool-agents-spec", "namespace": "team", "resourceVersion": "7"}
    if labels is not None:
        metadata["labels"] = labels
    if owners is not None:
        metadata["ownerReferences"] = [{"kind": "AgentPool", "name": "agents", "uid": uid} for uid in owners]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"x": "y"}}


OURS = {"app.kubernetes.io/managed-by": "tierpool-operator", "tierpool.io/pool": "agents"}
CASES = [
    ("missing: created", None, False),
    ("owned by the pool", live(owners=[UID]), False),
    ("owned by the pool among others", live(owners=[OTHER_UID, UID]), False),
    ("labelled as this pool's child (an earlier pool of the name)", live(OURS, owners=[OTHER_UID]), False),
    ("labelled as this pool's child, no owner", live(OURS), False),
    ("made by someone else: no labels, no owner", live(), True),
    ("someone else's labels", live({"app": "mine"}), True),
    ("owned by another object", live(owners=[OTHER_UID]), True),
    ("managed-by only", live({"app.kubernetes.io/managed-by": "tierpool-operator"}), True),
    ("another pool's child", live({**OURS, "tierpool.io/pool": "other"}, owners=[OTHER_UID]), True),
    ("managed by someone else, pool label copied", live({**OURS, "app.kubernetes.io/managed-by": "helm"}), True),
    ("empty metadata", {"metadata": {}}, True),
]


@pytest.mark.parametrize(("case", "found", "taken"), CASES, ids=[case for case, _, _ in CASES])
def test_name_taken(case: str, found: dict[str, Any] | None, taken: bool) -> None:
    assert name_taken(manifests.config_map(pool(), UID), found) is taken


def test_every_child_carries_what_the_check_looks_for() -> None:
    """Each child, as applied, is judged the pool's own when read back: no child ever refuses itself."""
    for child in manifests.children(pool(), UID, 1):
        assert not name_taken(child, child), child["kind"]
        assert name_taken(child, {"metadata": {"name": child["metadata"]["name"]}}), child["kind"]


class Response:
    def __init__(self, body: dict[str, Any]) -> None:
        self.data = json.dumps(body).encode()


class FakeKind:
    """One kind's read and patch, counted."""

    def __init__(self, found: dict[str, Any] | None) -> None:
        self.found, self.reads, self.patches = found, 0, 0

    def read(self, name: str, namespace: str, **_: Any) -> Response:
        self.reads += 1
        if self.found is None:
            raise ApiException(status=404)
        return Response(self.found)

    def patch(self, name: str, namespace: str, body: Any, **_: Any) -> Response:
        self.patches += 1
        return Response({**body, "metadata": {**body["metadata"], "resourceVersion": "8"}})


def kube_with(found: dict[str, Any] | None) -> tuple[Kube, FakeKind]:
    kube, fake = Kube(client.ApiClient()), FakeKind(found)
    kube.kinds["ConfigMap"] = Kind(fake.read, fake.patch)
    return kube, fake


def test_a_foreign_object_is_neither_applied_nor_read_twice() -> None:
    kube, fake = kube_with(live({"app": "mine"}))
    with pytest.raises(ChildNameTaken) as raised:
        kube.ensure(manifests.config_map(pool(), UID))
    assert (fake.reads, fake.patches) == (1, 0)
    assert (raised.value.kind, raised.value.name, raised.value.namespace) == (
        "ConfigMap",
        "tierpool-agents-spec",
        "team",
    )


def test_a_foreign_object_handed_in_is_refused_without_a_request() -> None:
    kube, fake = kube_with(None)
    with pytest.raises(ChildNameTaken):
        kube.ensure(manifests.config_map(pool(), UID), live())
    assert (fake.reads, fake.patches) == (0, 0)


@pytest.mark.parametrize("found", [None, live(owners=[UID])], ids=["missing", "owned"])
def test_the_pools_own_object_costs_one_read_and_one_apply(found: dict[str, Any] | None) -> None:
    kube, fake = kube_with(found)
    outcome, _ = kube.ensure(manifests.config_map(pool(), UID))
    assert outcome == ("created" if found is None else "patched")
    assert (fake.reads, fake.patches) == (1, 1)


def test_an_admission_refusal_keeps_the_servers_message() -> None:
    message = "configmaps \"x\" is forbidden: ValidatingAdmissionPolicy 'tp-tierpool-children' denied request: no"
    kube, fake = kube_with(None)

    def refuse(*_: Any, **__: Any) -> Response:
        error = ApiException(status=403)
        error.body = json.dumps({"kind": "Status", "message": message})
        raise error

    kube.kinds["ConfigMap"] = Kind(fake.read, refuse)
    with pytest.raises(ChildForbidden) as raised:
        kube.ensure(manifests.config_map(pool(), UID))
    assert raised.value.detail == message and raised.value.by_admission_policy


def test_refusals_are_reported_by_their_cause() -> None:
    reason, found = refusal(ChildNameTaken("ConfigMap", "tierpool-agents-spec", "team"), 0.0, 2)
    assert reason == "NameTaken"
    assert [(c["type"], c["status"], c["reason"]) for c in found] == [
        ("Ready", "False", "NameTaken"),
        ("ChildrenOwned", "False", "NameTaken"),
    ]
    assert "ConfigMap tierpool-agents-spec" in found[0]["message"] and "namespace team" in found[0]["message"]
    denied = ChildForbidden("Deployment", "tierpool-agents", "team", detail="ValidatingAdmissionPolicy 'p': image x")
    reason, [ready] = refusal(denied, 0.0, 2)
    assert (reason, ready["reason"]) == ("AdmissionDenied", "AdmissionDenied") and "image x" in ready["message"]
    reason, [ready] = refusal(ChildForbidden("Deployment", "tierpool-agents", "team"), 0.0, 2)
    assert (reason, ready["reason"]) == ("Forbidden", "Forbidden") and "RBAC" in ready["message"]
