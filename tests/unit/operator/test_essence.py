"""The lean diff base (tierpool_operator.essence): the same essence as kopf's own, from a smaller copy. Pure."""

from __future__ import annotations

import copy
from typing import Any, cast

import kopf
import pytest

from tierpool_operator.essence import LeanDiffBaseStorage, lean_body, reads_status

GROUP = "tierpool.io"
KEY = "last-handled-configuration"


def pool(**extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "tierpool.io/v1alpha1",
        "kind": "AgentPool",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "generation": 3,
            "resourceVersion": "41",
            "uid": "u-1",
            "labels": {"team": "a"},
            "annotations": {
                "team.example/owner": "x",
                f"{GROUP}/{KEY}": '{"spec": {}}',
                f"{GROUP}/reconcile": '{"started": "now"}',
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
            },
            "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"],
            "managedFields": [{"manager": "kopf", "fieldsV1": {"f:status": {"f:scaler": {}}}}],
        },
        "spec": {"tiers": [{"name": "p0", "weight": 1}], "replicas": {"min": 1, "max": 5}},
        "status": {"scaler": {"arrivals": [1.0] * 64}, "conditions": [{"type": "Ready", "status": "True"}]},
    }
    body.update(extra)
    return body


BODIES = {
    "full": pool(),
    "no status": {k: v for k, v in pool().items() if k != "status"},
    "no metadata extras": pool(metadata={"name": "p", "namespace": "ns"}),
    "empty spec": pool(spec={}),
}
EXTRA_FIELDS: dict[str, list[Any] | None] = {
    "none": None,
    "a status field, dotted": ["status.conditions"],
    "a status field, as keys": [("status", "scaler")],
    "a metadata field": ["metadata.generation"],
}


@pytest.mark.parametrize("body", BODIES.values(), ids=list(BODIES))
@pytest.mark.parametrize("extra", EXTRA_FIELDS.values(), ids=list(EXTRA_FIELDS))
def test_the_essence_is_kopfs_own(body: dict[str, Any], extra: list[Any] | None) -> None:
    kopfs = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key=KEY)
    lean = LeanDiffBaseStorage(prefix=GROUP, key=KEY)
    before, wrapped = copy.deepcopy(body), kopf.Body(body)  # type: ignore[arg-type]
    assert lean.build(body=wrapped, extra_fields=extra) == kopfs.build(body=wrapped, extra_fields=extra)
    assert body == before  # the body kopf holds is not touched


@pytest.mark.parametrize(
    ("keep_status", "has_status"),
    [(False, False), (True, True)],
)
def test_the_copy_leaves_out_status_and_managed_fields(keep_status: bool, has_status: bool) -> None:
    lean = lean_body(pool(), keep_status=keep_status)
    assert ("status" in lean) is has_status
    assert "managedFields" not in lean["metadata"]
    assert lean["metadata"]["annotations"] == pool()["metadata"]["annotations"]
    assert lean["spec"] == pool()["spec"]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (None, False),
        ([], False),
        (["spec.replicas"], False),
        (["status"], True),
        (["status.scaler.at"], True),
        ([("status", "conditions")], True),
        ([("metadata", "labels"), "status.x"], True),
        (["statuses.x"], False),
    ],
)
def test_reads_status(fields: list[Any] | None, expected: bool) -> None:
    assert reads_status(fields) is expected


def test_status_and_managed_fields_are_not_copied(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of the lean build: kopf's deep copy never sees the status or the managed fields (kopf's own
    build copies both, which this spy would record)."""
    copied: list[Any] = []
    deepcopy = copy.deepcopy

    def spy(value: Any, memo: Any = None) -> Any:
        copied.append(value)
        return deepcopy(value, memo)

    monkeypatch.setattr(copy, "deepcopy", spy)
    body = kopf.Body(pool())  # type: ignore[arg-type]
    kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key=KEY).build(body=body)
    assert any(isinstance(v, dict) and "status" in v for v in copied)  # the spy sees kopf's copies
    copied.clear()
    LeanDiffBaseStorage(prefix=GROUP, key=KEY).build(body=body)
    assert copied
    assert not any(isinstance(v, dict) and "status" in v for v in copied)
    assert not any(isinstance(v, dict) and "managedFields" in v.get("metadata", {}) for v in copied)


def test_the_operator_uses_the_lean_diff_base_and_its_consistency_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from tierpool_operator import reconcile
    from tierpool_operator.config import OperatorConfig
    from tierpool_operator.kube import Kube
    from tierpool_operator.memo import OperatorContext, PoolMemo
    from tierpool_operator.metrics import OperatorMetrics
    from tierpool_operator.reconcile import startup

    monkeypatch.setattr(reconcile, "api_client", lambda connections: None)  # no cluster here
    monkeypatch.setattr(reconcile, "Kube", lambda api: object())

    settings = kopf.OperatorSettings()
    config = OperatorConfig(metrics_port=0, consistency_timeout=42.0)
    memo = PoolMemo(OperatorContext(config, kube=cast(Kube, object()), metrics=cast(OperatorMetrics, object())))
    asyncio.run(startup(settings=settings, memo=memo))  # type: ignore[call-arg, arg-type]
    assert isinstance(settings.persistence.diffbase_storage, LeanDiffBaseStorage)
    assert settings.persistence.consistency_timeout == 42.0
