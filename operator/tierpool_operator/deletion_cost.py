"""Which worker pods a scale-in should take: pod-deletion-cost annotations from in-flight counts. Pure.

When it scales a ReplicaSet in, the ReplicaSet controller deletes unassigned, then pending, then not-ready pods first;
among the rest, those with the lowest ``controller.kubernetes.io/pod-deletion-cost`` (the PodDeletionCost feature
gate, beta and on by default since 1.22), then its own tie-breaks: pods on nodes with more Ready pods of the same
workload, then the more recently Ready (in logarithmic buckets of Ready time), then more restarts, then the newer.
Before the operator lowers a pool's replicas it gives each worker pod the number of tasks its worker runs as that
cost, so idle pods go first and, among busy ones, the least busy. An idle pod carries no annotation, which the
controller reads as 0. Any value someone else wrote (Karpenter, for one, may write this annotation) is overwritten.

A worker's consumer name is its pod name plus ``-`` and four hex digits (``tierpool.runtime.startup.consumer_name``), so
a container restarted in the same pod joins under a new consumer; only live consumers are counted (the caller
leaves out those whose heartbeat stopped), so a dead one's entries do not protect its pod.
"""

from __future__ import annotations

import string
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
MAX_COST = 2**31 - 1
"""The controller parses the value as an int32."""
SUFFIX_LENGTH = 4


@dataclass(frozen=True)
class WorkerPod:
    name: str
    cost: str | None = None
    """The pod's deletion-cost annotation as it is now (None: absent)."""
    terminating: bool = False
    """Already being deleted (deletionTimestamp set): the controller no longer counts it, nothing to write."""


def pod_of(consumer: str, names: Collection[str]) -> str | None:
    """The pod whose worker uses this consumer name: the name itself, or the name plus ``-`` and four hex digits."""
    if consumer in names:
        return consumer
    base, dash, suffix = consumer.rpartition("-")
    if dash and len(suffix) == SUFFIX_LENGTH and all(c in string.hexdigits for c in suffix) and base in names:
        return base
    return None


def in_flight_by_pod(pods: Iterable[str], in_flight: Mapping[str, int]) -> dict[str, int]:
    """Tasks in flight per pod, summed over its consumers; a pod without a consumer entry runs nothing (0)."""
    found = dict.fromkeys(pods, 0)
    for consumer, count in in_flight.items():
        pod = pod_of(consumer, found.keys())
        if pod is not None:
            found[pod] += max(int(count), 0)
    return found


def cost_value(count: int) -> str | None:
    """The annotation value for a pod running ``count`` tasks: None (no annotation, read as 0) when idle."""
    return str(min(count, MAX_COST)) if count > 0 else None


def _same(current: str | None, wanted: str | None) -> bool:
    """Absent and "0" mean the same to the controller, so an idle pod with either needs no write."""
    return (current or "0").strip() == (wanted or "0")


def annotation_patches(pods: Sequence[WorkerPod], in_flight: Mapping[str, int]) -> dict[str, str | None]:
    """The pods whose annotation must change before a scale-in, with the value to write (None: remove it).
    Patch-if-different: a pod whose annotation already says its count is left alone, and terminating pods too."""
    live = [pod for pod in pods if not pod.terminating]
    counts = in_flight_by_pod((pod.name for pod in live), in_flight)
    wanted = {pod.name: cost_value(counts[pod.name]) for pod in live}
    return {pod.name: wanted[pod.name] for pod in live if not _same(pod.cost, wanted[pod.name])}


def unmatched_busy(pods: Iterable[str], in_flight: Mapping[str, int]) -> list[str]:
    """Consumers running tasks that belong to none of the pods (a worker outside the cluster, or one whose
    TIERPOOL_CONSUMER was overridden): their pods cannot be marked."""
    names = set(pods)
    return sorted(c for c, count in in_flight.items() if count > 0 and pod_of(c, names) is None)


def clear_patches(pods: Sequence[WorkerPod]) -> dict[str, str | None]:
    """When the counts cannot be read: remove every cost still on a live pod, so old costs cannot reverse the order
    (a pod busy at the last scale-in and idle now would be kept over one busy now); the controller's own order
    decides."""
    return {pod.name: None for pod in pods if not pod.terminating and not _same(pod.cost, None)}


def needs_marking(current: int, desired: int) -> bool:
    """Costs matter only when some pods stay: a scale-in to zero stops every pod anyway."""
    return 0 < desired < current
