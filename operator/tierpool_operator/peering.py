"""kopf peering: the peering object the replicas meet in, created at start-up when missing.

kopf never creates it, and with mandatory peering a replica stays paused until it has seen its peers in it, so
without this every replica would wait for ever. Cluster-wide operators meet in a ClusterKopfPeering, namespaced
ones in a KopfPeering per watched namespace (as kopf's ``guess_selectors`` picks them).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

PEERING_GROUP, PEERING_VERSION = "kopf.dev", "v1"
log = logging.getLogger("tierpool.operator")


@dataclass(frozen=True)
class PeeringObject:
    plural: str
    namespace: str | None
    body: dict[str, Any]


def peering_objects(name: str, namespaces: tuple[str, ...]) -> list[PeeringObject]:
    """Pure: the objects kopf's peering of an operator watching ``namespaces`` (empty: cluster-wide) uses."""
    if not namespaces:
        kind, plural = "ClusterKopfPeering", "clusterkopfpeerings"
        return [PeeringObject(plural, None, {"apiVersion": "kopf.dev/v1", "kind": kind, "metadata": {"name": name}})]
    return [
        PeeringObject(
            "kopfpeerings",
            namespace,
            {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": name, "namespace": namespace}},
        )
        for namespace in namespaces
    ]


def ensure_peering(api: client.ApiClient, name: str, namespaces: tuple[str, ...]) -> None:
    """Create each peering object that does not exist yet (another replica may create it at the same moment)."""
    custom = client.CustomObjectsApi(api)
    for obj in peering_objects(name, namespaces):
        try:
            if obj.namespace is None:
                custom.create_cluster_custom_object(PEERING_GROUP, PEERING_VERSION, obj.plural, obj.body)
            else:
                custom.create_namespaced_custom_object(
                    PEERING_GROUP, PEERING_VERSION, obj.namespace, obj.plural, obj.body
                )
            log.info("created %s %s", obj.body["kind"], f"{obj.namespace}/{name}" if obj.namespace else name)
        except ApiException as error:
            if error.status == 409:
                continue  # there already, the usual case
            # 404: the peering CRDs are missing (kopf says so and stays paused); 403: RBAC. Either way kopf
            # cannot peer, and it reports that itself; this line says why.
            log.error("cannot create %s %s (HTTP %s): %s", obj.body["kind"], name, error.status, error.reason)
