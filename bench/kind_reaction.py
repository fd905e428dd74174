"""Reaction time on a real kind cluster: from a burst's first task to the first new worker pod taking work.

Reproduce:  .venv/bin/python bench/kind_reaction.py     (creates the kind cluster and deploys as the README's
            kind quickstart does: `make kind-up kind-load deploy example`; about 10 minutes once images exist)

The example pool (examples/kind-pool.yaml: 1-6 replicas of 8 slots, the operator's `sla` policy, `interval: 2s`)
sits idle at one replica; the bench submits a burst of 400 tasks of 1.5 s over its three tiers and watches, every
0.2 s, the worker Deployment's replicas (the operator's decision), the worker pods, and the consumers the pool's
streams have delivered to (a consumer is its pod's name plus a per-process suffix). Per round it reports:
- ``decision``: burst to the Deployment asking for more replicas;
- ``first_new_take``: burst to the first entry delivered to a pod that did not exist before it;
- per new pod ``created_to_take`` (pod object to its first delivery: scheduling, container start, the worker's
  imports and connecting; the images are preloaded, so no pull), and ``created_to_running`` / ``running_to_take``
  where the container's start time is known to the second;
- ``drained``: burst to every task finished, ``back_to_min``: burst to the Deployment at one replica again.
A KEDA-style loop at its defaults reads the backlog when the HPA syncs (every 15 s; KEDA's 30 s polling interval
only governs waking from zero, which adds up to 30 s more) and then starts pods that take as long as ours. Its
reaction is computed from the measured pod start: the sync delay is uniform over 0-15 s for a burst arriving at a
random moment (mean 7.5 s, worst 15 s). JSON: bench/results/kind_reaction.json; PNG: bench/results/kind_reaction.png.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import redis
from kubernetes import client as kube
from kubernetes import config as kube_config

from tierpool.client.producer import Client
from tierpool.protocol.submission import TaskRequest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CONTEXT, NS, POOL = "kind-tierpool", "tierpool-system", "kind"
REDIS_URL = "redis://:dev@localhost:6379/0"
TIERS = ("p0", "p1", "p2")
HPA_SYNC, KEDA_POLL = 15.0, 30.0
TICK = 0.2


def sh(command: str, timeout: float = 3600) -> str:
    done = subprocess.run(
        ["bash", "-c", command], check=False, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise SystemExit(f"{command} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


def cluster_up() -> None:
    """The README's kind quickstart, idempotent: cluster, images loaded, chart and example pool applied."""
    bin_dir = sh("bash hack/kind-up.sh").strip().splitlines()[-1]
    os.environ["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    sh("make kind-load deploy example")


def wait(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, kube.ApiException):
            pass
        time.sleep(1)
    raise SystemExit(f"timed out waiting for {what}")


class Watch:
    """Samples of the pool, every TICK seconds, on this machine's clock (the kind node shares it)."""

    def __init__(self, apps: kube.AppsV1Api, core: kube.CoreV1Api, connection: redis.Redis) -> None:
        self.apps, self.core, self.redis = apps, core, connection
        self.prefix = f"tierpool:{{{NS}/{POOL}}}"

    def replicas(self) -> int:
        return int(self.apps.read_namespaced_deployment(f"tierpool-{POOL}", NS).spec.replicas)

    def pods(self) -> dict[str, dict[str, Any]]:
        found = self.core.list_namespaced_pod(NS, label_selector=f"app.kubernetes.io/instance={POOL}").items
        pods = {}
        for pod in found:
            if pod.metadata.deletion_timestamp is not None:
                continue
            started = None
            for status in pod.status.container_statuses or []:
                if status.state and status.state.running:
                    started = status.state.running.started_at.timestamp()
            ready = any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])
            pods[pod.metadata.name] = {
                "created": pod.metadata.creation_timestamp.timestamp(),
                "started": started,
                "ready": ready,
            }
        return pods

    def takers(self) -> set[str]:
        """Consumers that have been delivered at least one entry (their name starts with their pod's)."""
        names = set()
        for tier in TIERS:
            for consumer in self.redis.xinfo_consumers(f"{self.prefix}:tier:{tier}", "workers"):
                if int(consumer.get("inactive", -1)) >= 0 or int(consumer.get("pending", 0)) > 0:
                    names.add(str(consumer["name"]))
        return names

    def backlog(self) -> int:
        total = 0
        for tier in TIERS:
            groups = self.redis.xinfo_groups(f"{self.prefix}:tier:{tier}")
            total += sum(int(g.get("lag") or 0) + int(g.get("pending") or 0) for g in groups)
        return total


def owner(consumer: str, pods: set[str]) -> str | None:
    return next((pod for pod in pods if consumer.startswith(pod)), None)


def one_round(watch: Watch, tasks: int, work_ms: int) -> dict[str, Any]:
    wait("the pool idle at one Ready replica", lambda: watch.replicas() == 1 and watch.backlog() == 0, 600)
    wait("one Ready worker pod", lambda: [p["ready"] for p in watch.pods().values()] == [True], 300)
    old_pods = set(watch.pods())
    producer = Client(watch.redis, f"{NS}/{POOL}")  # the spec the operator published for the workers
    requests = [TaskRequest(TIERS[i % 3], {"work_ms": work_ms}) for i in range(tasks)]
    burst = time.time()
    producer.submit_many(requests)
    samples: list[dict[str, Any]] = []
    first_take: dict[str, float] = {}
    seen_pods: dict[str, dict[str, Any]] = {}
    decision = drained = back = None
    while time.time() - burst < 600 and back is None:
        now = time.time() - burst
        replicas, pods, backlog = watch.replicas(), watch.pods(), watch.backlog()
        seen_pods.update({name: pod for name, pod in pods.items() if name not in old_pods})
        for consumer in watch.takers():
            pod = owner(consumer, set(seen_pods))
            if pod is not None and pod not in first_take:
                first_take[pod] = now
        decision = decision if decision is not None or replicas <= 1 else now
        drained = drained if drained is not None or backlog > 0 else now
        back = now if drained is not None and replicas == 1 and now > drained else None
        samples.append({"t": round(now, 2), "replicas": replicas, "ready": sum(p["ready"] for p in pods.values())})
        samples[-1]["backlog"] = backlog
        time.sleep(TICK)
    starts = [pod_start(name, pod, first_take[name], burst) for name, pod in seen_pods.items() if name in first_take]
    return {
        "decision": decision,
        "first_new_take": min(first_take.values()) if first_take else None,
        "new_pods": len(seen_pods),
        "pod_starts": starts,
        "drained": drained,
        "back_to_min": back,
        "timeline": samples,
    }


def pod_start(name: str, pod: dict[str, Any], took: float, burst: float) -> dict[str, Any]:
    """One new pod's start: object created -> first delivery (seconds), split at the container's start."""
    created = pod["created"] - burst
    started = None if pod["started"] is None else pod["started"] - burst
    return {
        "pod": name,
        "created_to_take": round(took - created, 2),
        "created_to_running": None if started is None else round(started - created, 1),
        "running_to_take": None if started is None else round(took - started, 1),
    }


def keda_style(pod_start: float) -> dict[str, float]:
    """A KEDA-style loop at its defaults, from the same pod start: the backlog is seen at the next HPA sync."""
    return {
        "first_new_take_mean": round(HPA_SYNC / 2 + pod_start, 2),
        "first_new_take_worst": round(HPA_SYNC + pod_start, 2),
        "from_zero_mean": round(KEDA_POLL / 2 + pod_start, 2),
        "from_zero_worst": round(KEDA_POLL + pod_start, 2),
    }


def plot(rounds: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(rounds), 1, figsize=(9, 3.2 * len(rounds)), squeeze=False)
    for axis, result in zip(axes[:, 0], rounds, strict=True):
        t = [s["t"] for s in result["timeline"]]
        axis.step(t, [s["replicas"] for s in result["timeline"]], where="post", label="replicas asked")
        axis.step(t, [s["ready"] for s in result["timeline"]], where="post", label="pods Ready")
        if result["first_new_take"] is not None:
            axis.axvline(result["first_new_take"], color="green", linestyle=":", label="first new pod takes work")
        twin = axis.twinx()
        twin.plot(t, [s["backlog"] for s in result["timeline"]], color="grey", alpha=0.5, label="backlog")
        twin.set_ylabel("tasks")
        axis.set_xlabel("seconds after the burst")
        axis.set_ylabel("pods")
        axis.legend(loc="upper right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=400)
    parser.add_argument("--work-ms", type=int, default=1500)
    parser.add_argument("--no-setup", action="store_true", help="the cluster is up and deployed already")
    args = parser.parse_args()
    if not args.no_setup:
        cluster_up()
    kube_config.load_kube_config(context=CONTEXT)
    connection = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    watch = Watch(kube.AppsV1Api(), kube.CoreV1Api(), connection)
    rounds = [one_round(watch, args.tasks, args.work_ms) for _ in range(args.rounds)]
    pod_starts = [s["created_to_take"] for r in rounds for s in r["pod_starts"]]
    first_pod_start = statistics.median(
        min(s["created_to_take"] for s in r["pod_starts"]) for r in rounds if r["pod_starts"]
    )
    summary = {
        "command": ".venv/bin/python bench/kind_reaction.py",
        "load": f"{args.tasks} tasks of {args.work_ms} ms over p0/p1/p2, pool idle at 1 of 1-6 replicas (8 slots)",
        "tierpool": {
            "decision_s": [r["decision"] for r in rounds],
            "first_new_take_s": [r["first_new_take"] for r in rounds],
            "drained_s": [r["drained"] for r in rounds],
            "back_to_min_s": [r["back_to_min"] for r in rounds],
            "pod_created_to_take_s_median": round(statistics.median(pod_starts), 2) if pod_starts else None,
            "pod_created_to_take_s_max": max(pod_starts) if pod_starts else None,
        },
        "keda_style_computed": keda_style(first_pod_start),
        "rounds": [{k: v for k, v in r.items() if k != "timeline"} for r in rounds],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "kind_reaction.json").write_text(json.dumps({**summary, "timelines": [r["timeline"] for r in rounds]}))
    plot(rounds, RESULTS / "kind_reaction.png")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
