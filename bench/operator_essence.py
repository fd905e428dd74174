"""kopf's per-event diff-base copy of an AgentPool: kopf's own ``build`` against tierpool's lean one, side by side.

On every watch event of a pool (each status write is one), kopf builds the pool's essence to see whether a change
handler must run. Its own ``build`` deep-copies the whole body first; ``LeanDiffBaseStorage`` (tierpool_operator.
essence) copies only what the essence keeps. The body is a real one: ``bench/control_plane.py`` saves one pool as
the API server holds it at rest (``bench/results/agentpool_at_rest.json``).

Reproduce:  .venv/bin/python bench/operator_essence.py      (a few seconds; bench/results/operator_essence.json)
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import kopf

from tierpool.model.resource import GROUP
from tierpool_operator.essence import LeanDiffBaseStorage

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
KEY = "last-handled-configuration"
CALLS = 2000
ROUNDS = 7


def per_call_microseconds(storage: kopf.AnnotationsDiffBaseStorage, body: kopf.Body) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        storage.build(body=body, extra_fields=None)
    return (time.perf_counter() - started) / CALLS * 1e6


def main() -> None:
    raw: dict[str, Any] = json.loads((RESULTS / "agentpool_at_rest.json").read_text())
    body = kopf.Body(raw)  # type: ignore[arg-type]
    kopfs = kopf.AnnotationsDiffBaseStorage(prefix=GROUP, key=KEY)
    lean = LeanDiffBaseStorage(prefix=GROUP, key=KEY)
    assert lean.build(body=body) == kopfs.build(body=body), "the essences differ"
    rounds: dict[str, list[float]] = {"kopf": [], "lean": []}
    for _ in range(ROUNDS):  # alternating, so that a slower stretch of the machine hits both
        rounds["kopf"].append(per_call_microseconds(kopfs, body))
        rounds["lean"].append(per_call_microseconds(lean, body))
    median = {name: round(statistics.median(values), 1) for name, values in rounds.items()}
    report = {
        "command": ".venv/bin/python bench/operator_essence.py",
        "body_json_bytes": len(json.dumps(raw)),
        "status_json_bytes": len(json.dumps(raw.get("status") or {})),
        "managed_fields_json_bytes": len(json.dumps(raw["metadata"].get("managedFields") or [])),
        "calls_per_round": CALLS,
        "median_microseconds_per_event": median,
        "lean_over_kopf": round(median["lean"] / median["kopf"], 3),
        "rounds_microseconds": {name: [round(v, 1) for v in values] for name, values in rounds.items()},
    }
    (RESULTS / "operator_essence.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
