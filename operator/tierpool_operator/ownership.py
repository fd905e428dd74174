"""Whether an object found under a child's name is the pool's to apply. Pure: no API calls.

Server-side apply with ``force`` takes every field it sends, so applying a child over an object someone else made
with that name (a ConfigMap, a ServiceAccount with more rights than a worker should have) would take it over, add
the pool's ownerReference, and let the garbage collector delete it along with the pool. The operator applies only
over what is already the pool's: an object with an ownerReference to the pool (its uid), or one labelled as this
pool's by the operator (a child left by an earlier pool of the same name, not yet collected). The object is read
before every apply anyway (``Kube.ensure``), so the check costs no request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MANAGED_BY = "app.kubernetes.io/managed-by"
POOL_LABEL = "tierpool.io/pool"


def _owner_uids(metadata: Mapping[str, Any]) -> set[str]:
    return {str(ref.get("uid")) for ref in metadata.get("ownerReferences") or [] if ref.get("uid")}


def name_taken(manifest: Mapping[str, Any], live: Mapping[str, Any] | None) -> bool:
    """True when ``live`` exists and is neither owned by the manifest's pool (an ownerReference with its uid) nor
    labelled managed-by the operator for that pool: applying the manifest would take someone else's object over."""
    if live is None:
        return False
    wanted, found = manifest.get("metadata") or {}, live.get("metadata") or {}
    if _owner_uids(wanted) & _owner_uids(found):
        return False
    wanted_labels, found_labels = wanted.get("labels") or {}, found.get("labels") or {}
    return not all(
        wanted_labels.get(key) is not None and found_labels.get(key) == wanted_labels[key]
        for key in (MANAGED_BY, POOL_LABEL)
    )
