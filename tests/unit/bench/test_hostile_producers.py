"""The hostile bench's accounting of a tenant's concurrency: distinct tasks at once, from run intervals."""

from __future__ import annotations

from typing import Any

import pytest
from bench.hostile_producers import peak_tasks


def run(task: str, start: float, end: float, stopped: bool = False) -> dict[str, Any]:
    return {"id": task, "start": start, "end": end, "stopped": stopped}


@pytest.mark.parametrize(
    ("runs", "peak", "with_stopped"),
    [
        ([], 0, 0),
        ([run("a", 0, 10), run("b", 10, 20)], 1, 1),  # one ends as the next starts: never two at once
        ([run("a", 0, 10), run("b", 5, 20)], 2, 2),
        ([run("a", 0, 10), run("a", 5, 20)], 1, 1),  # the same task twice at once is one task of the tenant
        ([run("a", 0, 10, stopped=True), run("a", 5, 8), run("b", 8, 20)], 1, 2),  # a stopped stale run apart
    ],
)
def test_peak_counts_distinct_tasks_running_at_once(runs: list[dict[str, Any]], peak: int, with_stopped: int) -> None:
    assert (peak_tasks(runs, False), peak_tasks(runs, True)) == (peak, with_stopped)
