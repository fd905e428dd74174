"""Fairness inside a tier (protocol 6), the pure parts: tenant names, which submits are gated, which outcome
entries are released, the repair call and its report, held-task members, the status additions."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tierpool.model.keys import GROUP, PoolKeys
from tierpool.model.spec import PoolSpec
from tierpool.protocol import tenancy
from tierpool.protocol.envelope import decode, encode
from tierpool.protocol.members import held_task_id
from tierpool.protocol.submission import SubmitError, TaskRequest, prepare
from tierpool.store.observe import add_held_counts

KEYS = PoolKeys.parse("ns/pool")
SPEC = PoolSpec.model_validate(
    {"tiers": [{"name": "p0", "weight": 1, "tenantConcurrency": 4}, {"name": "p1", "weight": 1}]}
)


@pytest.mark.parametrize(
    ("tenant", "ok"),
    [
        ("acme", True),
        ("acme-corp.eu:team/7", True),
        ("A", True),
        ("x" * 128, True),
        ("x" * 129, False),
        ("", False),
        ("-leading", False),
        ("has space", False),
        ("nul\0inside", False),
        ("tab\t", False),
        ("ünïcode", False),
    ],
)
def test_tenant_names(tenant: str, ok: bool) -> None:
    assert (tenancy.tenant_error(tenant) is None) is ok


@pytest.mark.parametrize(
    ("tier", "tenant", "gated"),
    [("p0", "acme", True), ("p0", None, False), ("p1", "acme", False), ("p1", None, False)],
)
def test_only_a_tenant_on_a_limited_tier_is_gated(tier: str, tenant: str | None, gated: bool) -> None:
    sub = prepare(SPEC, KEYS, TaskRequest(tier, {}, tenant=tenant), now_ms=5)
    assert (sub.gate is not None) is gated
    assert sub.fields.get("tenant") == tenant  # the envelope carries the tenant either way
    if sub.gate:
        assert sub.gate.limit == 4 and sub.gate.tenant == tenant
        assert sub.gate.keys[0] == sub.stream and sub.gate.keys[1] == KEYS.dedupe(sub.task_id)
        assert all("{ns/pool}" in key for key in sub.gate.keys)


def test_a_bad_tenant_is_refused_at_submit() -> None:
    with pytest.raises(SubmitError, match="tenant must be"):
        prepare(SPEC, KEYS, TaskRequest("p0", {}, tenant="no spaces please"), now_ms=0)


def test_submit_args_flatten_the_fields_after_ttl_limit_tenant_and_the_counts_key() -> None:
    gate = tenancy.gate_for(KEYS, "p0", "acme", 4, "t1")
    assert gate is not None
    # the counts are read by a name in ARGV: a key in KEYS would need write access, which producers lack
    assert KEYS.tenants("p0") not in gate.keys and KEYS.admitted("p0") not in gate.keys
    assert gate.keys[2] == KEYS.queued("p0")
    assert tenancy.submit_args(gate, 0, {"task_id": "t1", "tier": "p0"}) == [
        0,
        4,
        "acme",
        KEYS.tenants("p0"),
        "task_id",
        "t1",
        "tier",
        "p0",
    ]


def test_the_envelope_round_trips_the_tenant_and_older_entries_have_none() -> None:
    assert decode("1-0", encode("t", "p0", "{}", 1, tenant="acme"), 1).tenant == "acme"
    assert decode("1-0", encode("t", "p0", "{}", 1), 1).tenant is None


RELEASE_CASES: list[tuple[str, list[int | None], list[tuple[int, str]], list[tuple[str, list[Any]]]]] = [
    ("no limits: nothing", [None, None], [(0, "1-0"), (1, "2-0")], []),
    ("limited tier only", [3, None], [(1, "2-0"), (0, "1-0"), (0, "1-1")], [("p0", [GROUP, 3, "1-0", "1-1"])]),
    (
        "two tiers, in tier order",
        [2, 5],
        [(1, "9-0"), (0, "1-0")],
        [("p0", [GROUP, 2, "1-0"]), ("p1", [GROUP, 5, "9-0"])],
    ),
    ("empty batch", [2, 5], [], []),
    ("unknown tier index ignored", [2], [(3, "1-0")], []),
]


@pytest.mark.parametrize(("case", "limits", "entries", "expected"), RELEASE_CASES, ids=[c[0] for c in RELEASE_CASES])
def test_release_calls(
    case: str, limits: list[int | None], entries: list[tuple[int, str]], expected: list[tuple[str, list[Any]]]
) -> None:
    calls = tenancy.release_calls(KEYS, ["p0", "p1"], limits, entries)
    assert [(keys[0], list(args)) for _, keys, args in calls] == [(KEYS.tier(t), a) for t, a in expected]
    for name, keys, _ in calls:
        assert name == "RELEASE_TENANTS" and len(keys) == 6 and all("{ns/pool}" in k for k in keys)
        assert keys[3] == KEYS.queued(keys[0].rsplit(":", 1)[1]) and keys[-1] == KEYS.where


@pytest.mark.parametrize(("limit", "sent"), [(4, 4), (None, tenancy.NO_LIMIT)])
def test_repair_call(limit: int | None, sent: int) -> None:
    name, keys, args = tenancy.repair_call(KEYS, "p0", limit)
    release_keys = tenancy.tier_keys(KEYS, "p0")
    assert name == "REPAIR_TENANTS" and keys == [*release_keys[:-1], KEYS.throttled, KEYS.where]
    assert list(args) == [GROUP, sent, tenancy.REPAIR_CAP]


def test_repair_report() -> None:
    assert tenancy.repair_report([1, 2, 3]) == tenancy.RepairReport(released=1, drift=2, admitted=3)


@pytest.mark.parametrize(
    ("member", "task_id"),
    [
        ("acme\x000000000000000001\x00" + json.dumps(["task_id", "t/1", "tier", "p0"]), "t/1"),
        ("acme\x000000000000000001\x00" + '["task_id","a\\/b"]', "a/b"),  # Lua's cjson escapes slashes
        ("acme\x000000000000000001\x00not json", None),
        ("no separators", None),
        ("acme\x001\x00" + json.dumps({"task_id": "x"}), None),
    ],
)
def test_held_task_id(member: str, task_id: str | None) -> None:
    assert held_task_id(member) == task_id


def test_status_gains_held_and_admitted_per_tier() -> None:
    status = {"pool": "ns/pool", "tiers": [{"name": "p0"}, {"name": "p1"}], "dlq": 0}
    out = add_held_counts(status, {"p0": (7, 4)})
    assert out["tiers"] == [{"name": "p0", "held": 7, "admitted": 4}, {"name": "p1", "held": 0, "admitted": 0}]


def test_spec_tenant_limits_in_tier_order() -> None:
    assert SPEC.tenant_limits == [4, None]


def test_admit_call() -> None:
    name, names, args = tenancy.admit_call(KEYS, "p0", 2, "w1", ["1-0", "2-0"])
    assert name == "ADMIT_ENTRIES"
    assert names == [
        KEYS.tier("p0"),
        KEYS.tenants("p0"),
        KEYS.admitted("p0"),
        KEYS.queued("p0"),
        KEYS.held("p0"),
        KEYS.held_seq("p0"),
        KEYS.where,
    ]
    assert list(args) == [GROUP, "w1", 2, "", "1-0", "2-0"]
