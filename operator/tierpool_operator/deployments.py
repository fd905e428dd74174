"""The worker Deployments as the operator last saw them, so a scaling pass does not GET its Deployment every time.

The operator already watches every worker Deployment (to repair drift); each event lands here, and so does every
object a GET, an apply or a /scale returns. A scaling pass reads its pool's Deployment from this cache and falls
back to a GET only when there is none (just started or resumed, deleted, or not yet seen after a /scale). At 1,000
pools on a 5 s interval those GETs were 12,000 requests a minute, and decoding them most of the operator's CPU.

Copies can arrive out of order: an event queued before a /scale can be handled after it, and a GET sent before it
can return after it. So each entry keeps its ``metadata.resourceVersion`` and an older copy never replaces a newer
one; a /scale raises the floor to the version it returned. Kubernetes calls resource versions opaque, but every
API server stores etcd revisions (integers that only grow); a version that does not parse as an integer is
taken in arrival order. A copy can also outlive its object when a watch misses a deletion (a re-list after
``410 Gone`` sends no DELETED): the scaler's periodic converge reads every child fresh, which bounds that.
No I/O here: the handlers feed it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Key = tuple[str, str]


def version(body: Mapping[str, Any]) -> int | None:
    """The object's resourceVersion as an integer, or None when it is not one."""
    found = (body.get("metadata") or {}).get("resourceVersion")
    if not isinstance(found, str | int):
        return None
    try:
        return int(found)
    except (TypeError, ValueError):
        return None


def _key(body: Mapping[str, Any]) -> Key:
    metadata = body.get("metadata") or {}
    return str(metadata.get("namespace")), str(metadata.get("name"))


class DeploymentCache:
    """Deployments by (namespace, name), fed by watch events, reads, applies and /scale; shared by all pools."""

    def __init__(self) -> None:
        self._objects: dict[Key, dict[str, Any]] = {}
        self._floors: dict[Key, int] = {}

    def _older(self, key: Key, body: Mapping[str, Any]) -> bool:
        found = version(body)
        if found is None:
            return False
        known = [v for v in (self._floors.get(key), version(self._objects.get(key) or {})) if v is not None]
        return bool(known) and found < max(known)

    def event(self, kind: str | None, body: dict[str, Any]) -> bool:
        """A watch event (``kind``: ADDED, MODIFIED, DELETED, or None for a listing). Returns False when the copy
        is older than what is known (its handler must not act on it either)."""
        key = _key(body)
        if self._older(key, body):
            return False
        if kind == "DELETED":
            self._drop(key, version(body))  # a GET from before the deletion is not stored after it
        else:
            self._objects[key] = body
        return True

    def read(self, body: dict[str, Any]) -> None:
        """The object as a GET or an apply returned it."""
        key = _key(body)
        if not self._older(key, body):
            self._objects[key] = body

    def wrote(self, namespace: str, name: str, resource_version: str | None) -> None:
        """A /scale returned ``resource_version``: copies older than that are stale from now on."""
        key = (namespace, name)
        floor = version({"metadata": {"resourceVersion": resource_version}})
        if floor is not None:
            self._floors[key] = max(floor, self._floors.get(key, floor))
        kept = self._objects.get(key)
        if kept is not None and (floor is None or self._older(key, kept)):
            self._objects.pop(key)  # the event of the /scale may have come first: that copy is kept

    def forget(self, namespace: str, name: str) -> None:
        """Found missing (a 404), or not to be trusted (a daemon starting after a pause): GET it next time."""
        self._drop((namespace, name))

    def _drop(self, key: Key, seen: int | None = None) -> None:
        """Drop the copy, keeping its version (or ``seen``, if newer) as the floor: nothing older is stored again."""
        dropped = self._objects.pop(key, None)
        known = [v for v in (version(dropped or {}), seen, self._floors.get(key)) if v is not None]
        if known:
            self._floors[key] = max(known)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The copy to use, or None: GET it (and hand the result to ``read``, or ``forget`` on a 404)."""
        return self._objects.get((namespace, name))

    def __len__(self) -> int:
        return len(self._objects)
