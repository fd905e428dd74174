"""The operator's scale-in hint: pod-deletion-cost annotations from in-flight counts (pure)."""

from __future__ import annotations

import pytest

from tierpool_operator.deletion_cost import (
    MAX_COST,
    WorkerPod,
    annotation_patches,
    clear_patches,
    cost_value,
    in_flight_by_pod,
    needs_marking,
    pod_of,
    unmatched_busy,
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
    assert pod_of(consumer, set(PODS)) == pod


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
    ("in_flight", "unmatched"),
    [
        ({}, []),
        ({f"{A}-0001": 2, f"{B}-0002": 0}, []),
        ({"my-worker": 3, f"{A}-0001": 1, "laptop-1f2e": 0}, ["my-worker"]),  # TIERPOOL_CONSUMER overridden
        ({"w-7d9f-gone-0001": 1, "custom": 2}, ["custom", "w-7d9f-gone-0001"]),
    ],
)
def test_busy_consumers_without_a_pod(in_flight: dict[str, int], unmatched: list[str]) -> None:
    assert unmatched_busy(PODS, in_flight) == unmatched


@pytest.mark.parametrize(
    ("pods", "patches"),
    [
        ([WorkerPod(A), WorkerPod(B, "0")], {}),
        ([WorkerPod(A, "3"), WorkerPod(B), WorkerPod(C, "1")], {A: None, C: None}),
        ([WorkerPod(A, "3", terminating=True)], {}),
    ],
)
def test_counts_unknown_clear_every_old_cost(pods: list[WorkerPod], patches: dict[str, str | None]) -> None:
    assert clear_patches(pods) == patches


@pytest.mark.parametrize(
    ("current", "desired", "mark"),
    [(4, 2, True), (2, 1, True), (3, 0, False), (2, 2, False), (1, 3, False), (0, 0, False)],
)
def test_only_a_scale_in_that_keeps_pods_marks_them(current: int, desired: int, mark: bool) -> None:
    assert needs_marking(current, desired) is mark
