"""What to apply to a child and whether the live object drifted from it. Pure: no API calls.

The API server rewrites what it stores: quantities are canonicalized (cpu ``"0.5"`` -> ``500m``, ``1024Mi`` ->
``1Gi``), empty values are dropped (``value: ""`` in an env var), defaults are filled in, and other field managers
may add list items. Drift is decided with that in mind, so an object that matches stays unchanged forever."""

from __future__ import annotations

import hashlib
import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

FIELD_MANAGER = "tierpool-operator"
"""The one field manager of every child: created and updated by server-side apply, so a field dropped from the
manifest is dropped from the object."""
SCALER_MANAGER = "tierpool-scaler"
"""Field manager of /scale writes: the scaler owns ``spec.replicas``, an apply keeps the live value."""
APPLIED = "tierpool.io/applied"
"""Annotation holding a hash of the last applied manifest: a change to the manifest (a field removed, say) is
applied even when the live object still has every field of the new one."""
QUANTITY_KEYS = frozenset({"limits", "requests", "overhead"})
"""Maps whose values are Kubernetes quantities (the API server stores them canonicalized)."""
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|n|u|m|k|M|G|T|P|E)?$")
_SUFFIX = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "k": Decimal("1e3"),
    "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40), "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}  # fmt: skip


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity's value (``"0.5"``, ``500m``, ``1Gi``, ``1e3``, 2), or None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return Decimal(number + suffix)
        return Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation:
        return None


def applied_hash(manifest: dict[str, Any]) -> str:
    """Hash of a manifest as the operator applies it, without the replicas the scaler owns."""
    spec = {k: v for k, v in (manifest.get("spec") or {}).items() if k != "replicas"}
    canonical = json.dumps({**manifest, "spec": spec}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def scaler_owns_replicas(live: dict[str, Any] | None) -> bool:
    """Whether the scaler's field manager (its /scale writes) owns the live object's ``spec.replicas``."""
    entries = ((live or {}).get("metadata") or {}).get("managedFields") or []
    return any(
        e.get("manager") == SCALER_MANAGER and "f:replicas" in ((e.get("fieldsV1") or {}).get("f:spec") or {})
        for e in entries
    )


def to_apply(manifest: dict[str, Any], live: dict[str, Any] | None) -> dict[str, Any]:
    """What to apply: the manifest and its hash annotation. ``spec.replicas``: the manifest's (initial) count on
    create; nothing once the scaler owns it (so an apply never reverts a concurrent /scale write with a stale
    count); the live count in between."""
    metadata = manifest["metadata"]
    out = {**manifest, "metadata": {**metadata, "annotations": {**metadata.get("annotations", {})}}}
    out["metadata"]["annotations"][APPLIED] = applied_hash(manifest)
    if "replicas" not in (manifest.get("spec") or {}) or live is None:
        return out
    live_replicas = (live.get("spec") or {}).get("replicas")
    if scaler_owns_replicas(live) or live_replicas is None:
        out["spec"] = {k: v for k, v in manifest["spec"].items() if k != "replicas"}
    else:
        out["spec"] = {**manifest["spec"], "replicas": live_replicas}
    return out


def needs_apply(desired: dict[str, Any], live: dict[str, Any] | None) -> bool:
    """True when the object is missing, was last applied from another manifest, or was edited away from it."""
    if live is None:
        return True
    if (live.get("metadata") or {}).get("deletionTimestamp"):
        return False  # being deleted: its DELETED event brings the recreate
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    return annotations.get(APPLIED) != desired["metadata"]["annotations"][APPLIED] or not is_subset(desired, live)


def _empty(value: Any) -> bool:
    return value is None or value in ("", {}, [])


def is_subset(desired: Any, live: Any, quantities: bool = False) -> bool:
    """True when every field of ``desired`` is present in ``live`` (which has server defaults, canonical
    quantities, no empty values, and maybe list items of other managers) with an equal value."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        return all(
            (_empty(value) and _empty(live.get(key)))
            or is_subset(value, live.get(key), quantities or key in QUANTITY_KEYS)
            for key, value in desired.items()
        )
    if isinstance(desired, list):
        return isinstance(live, list) and _list_subset(desired, live)
    if quantities and quantity(desired) is not None:
        return quantity(desired) == quantity(live)
    if isinstance(desired, int | float) and not isinstance(desired, bool) and isinstance(live, str):
        return str(desired) == live
    return bool(desired == live)


def _list_subset(desired: list[Any], live: list[Any]) -> bool:
    """Lists of objects: each desired item is in ``live`` (matched by name when it has one; other managers' items
    are theirs). Other lists (command, args): equal, in order."""
    if not all(isinstance(item, dict) for item in desired):
        return len(desired) == len(live) and all(map(is_subset, desired, live))
    for item in desired:
        candidates = [x for x in live if isinstance(x, dict) and ("name" not in item or x.get("name") == item["name"])]
        if not any(is_subset(item, candidate) for candidate in candidates):
            return False
    return True


def _union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        out[key] = _union(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


def folded_managed_fields(entries: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Managed fields with this operator's Update entry (left by the plain create of older versions) folded into
    its Apply entry, as client-go's csaupgrade does; None when there is nothing to fold. After this, an apply
    that drops a field removes it."""
    ours = [e for e in entries if e.get("manager") == FIELD_MANAGER and not e.get("subresource")]
    updates = [e for e in ours if e.get("operation") == "Update"]
    if not updates:
        return None
    applied = next((e for e in ours if e.get("operation") == "Apply"), None)
    fields: dict[str, Any] = dict((applied or {}).get("fieldsV1") or {})
    for entry in updates:
        fields = _union(fields, entry.get("fieldsV1") or {})
    base = applied or updates[0]
    merged = {**base, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields}
    rest = [e for e in entries if e not in updates and e is not applied]
    return [*rest, merged]


def repair_allowed(pool: dict[str, Any]) -> bool:
    """The scaler and the Deployment watch repair drift only once reconcile has handled the pool's current
    generation (``status.observedGeneration == metadata.generation``); a newer spec is reconcile's to apply."""
    generation = (pool.get("metadata") or {}).get("generation")
    return generation is not None and (pool.get("status") or {}).get("observedGeneration") == generation


def changed(before: dict[str, Any] | None, after: dict[str, Any]) -> bool:
    """Whether an apply changed the object: it did not exist, or its resourceVersion moved."""
    if before is None:
        return True
    version = (before.get("metadata") or {}).get("resourceVersion")
    return version is None or version != (after.get("metadata") or {}).get("resourceVersion")
