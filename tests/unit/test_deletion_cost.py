"""The operator's scale-in hint: pod-deletion-cost annotations from in-flight counts (pure)."""

from __future__ import annotations

import pytest

from tierpool_operator.deletion_cost import (
    MAX_COST,
    WorkerPod,
    annotation_patches,
    cost_value,
    deletion_order,
    in_flight_by_pod,
    pod_of,
)

PODS = ["w-7d9f-aaaaa", "w-7d9f-bbbbb", "w-7d9f-ccccc"]


@pytest.mark.parametrize(
    ("consumer", "pod"),
    [
        ("w-7d9f-aaaaa-1f2e", "w-7d9f-aaaaa"),  # the worker's own naming: pod name, dash, four hex digits
        ("w-7d9f-aaaaa", "w-7d9f-aaaaa"),  # a consumer named exactly after its pod
        ("w-7d9f-aaaaa-BEEF", "w-7d9f-aaaaa"),
        ("w-7d9f-aaaaa-1f2", None),  # three digits: not a worker suffix
        ("w-7d9f-aaaaa-zzzz", None),  # not hex
        ("w-7d9f-ddddd-1f2e", None),  # a pod that is gone (or another pool's)
        ("laptop-4242-1f2e", None),  # a worker outside the cluster
        ("tierpool-retry", None),
    ],
)
def test_consumer_to_pod(consumer: str, pod: str | None) -> None:
    assert pod_of(consumer, PODS) == pod


@pytest.mark.parametrize(
    ("in_flight", "expected"),
    [
        ({}, {"w-7d9f-aaaaa": 0, "w-7d9f-bbbbb": 0, "w-7d9f-ccccc": 0}),
        ({"w-7d9f-bbbbb-0001": 3}, {"w-7d9f-aaaaa": 0, "w-7d9f-bbbbb": 3, "w-7d9f-ccccc": 0}),
        # a restarted container: two consumers of one pod add up (the caller has left out dead ones)
        ({"w-7d9f-ccccc-0001": 1, "w-7d9f-ccccc-0002": 2}, {"w-7d9f-aaaaa": 0, "w-7d9f-bbbbb": 0, "w-7d9f-ccccc": 3}),
        ({"elsewhere-0001": 9, "w-7d9f-aaaaa-0001": -1}, {"w-7d9f-aaaaa": 0, "w-7d9f-bbbbb": 0, "w-7d9f-ccccc": 0}),
    ],
)
def test_in_flight_by_pod(in_flight: dict[str, int], expected: dict[str, int]) -> None:
    assert in_flight_by_pod(PODS, in_flight) == expected


@pytest.mark.parametrize(("count", "value"), [(0, None), (1, "1"), (8, "8"), (MAX_COST + 5, str(MAX_COST)), (-1, None)])
def test_cost_value(count: int, value: str | None) -> None:
    assert cost_value(count) == value


A, B, C = PODS


@pytest.mark.parametrize(
    ("pods", "in_flight", "patches"),
    [
        # nothing marked yet, nothing running: no write at all (absent reads as 0)
        ([WorkerPod(A), WorkerPod(B), WorkerPod(C)], {}, {}),
        # busy pods get their count; idle ones stay unannotated
        ([WorkerPod(A), WorkerPod(B), WorkerPod(C)], {f"{B}-0001": 2, f"{C}-0002": 1}, {B: "2", C: "1"}),
        # patch-if-different: an annotation that already says the count is left alone
        ([WorkerPod(A), WorkerPod(B, "2"), WorkerPod(C)], {f"{B}-0001": 2, f"{C}-0002": 1}, {C: "1"}),
        # a pod that was busy at the last scale-in and is idle now loses its cost
        ([WorkerPod(A, "4"), WorkerPod(B), WorkerPod(C)], {}, {A: None}),
        # "0" and absent are the same to the controller
        ([WorkerPod(A, "0"), WorkerPod(B)], {}, {}),
        # a count that changed is rewritten
        ([WorkerPod(A, "4")], {f"{A}-0001": 1}, {A: "1"}),
        # a terminating pod is already going: no write
        ([WorkerPod(A, terminating=True), WorkerPod(B)], {f"{A}-0001": 5}, {}),
        # a value someone else wrote is replaced by the count
        ([WorkerPod(A, "-100")], {}, {A: None}),
        ([WorkerPod(A, "100")], {f"{A}-0001": 2}, {A: "2"}),
    ],
)
def test_annotation_patches(pods: list[WorkerPod], in_flight: dict[str, int], patches: dict[str, str | None]) -> None:
    assert annotation_patches(pods, in_flight) == patches


@pytest.mark.parametrize(
    ("in_flight", "order"),
    [
        ({f"{A}-0001": 2, f"{C}-0001": 1}, [B, C, A]),  # idle first, then the least busy
        ({}, [A, B, C]),  # equal costs: the controller's own tie-breaks decide (newest Ready first)
        ({f"{A}-0001": 1, f"{B}-0001": 1, f"{C}-0001": 1}, [A, B, C]),
    ],
)
def test_deletion_order_takes_idle_pods_first(in_flight: dict[str, int], order: list[str]) -> None:
    pods = [WorkerPod(A), WorkerPod(B), WorkerPod(C), WorkerPod("w-7d9f-going", terminating=True)]
    assert deletion_order(pods, in_flight) == order
