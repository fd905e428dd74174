"""``tierpool acl``: prints what tierpool.protocol.acl renders, the password only as its SHA-256."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tierpool.cli.main import main
from tierpool.model.keys import PoolKeys
from tierpool.protocol.acl import Role, aclfile_line, password_rule, setuser_command


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["acl", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_it_prints_the_setuser_command(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIERPOOL_ACL_PASSWORD", raising=False)
    code, out, err = run(capsys, "worker", "--pool", "ns/agents", "--user", "w")
    assert code == 0
    assert out == setuser_command("w", Role.WORKER, [PoolKeys("ns", "agents")]) + "\n"
    assert "no password" in err


def test_the_password_comes_from_the_environment_as_its_hash(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERPOOL_ACL_PASSWORD", "s3cret")
    code, out, err = run(capsys, "producer", "-p", "ns/a", "-p", "ns/b", "--format", "aclfile")
    assert code == 0
    pools = [PoolKeys("ns", "a"), PoolKeys("ns", "b")]
    assert out == aclfile_line("tierpool-producer", Role.PRODUCER, pools, password_rule("s3cret")) + "\n"
    assert "s3cret" not in out + err
    assert hashlib.sha256(b"s3cret").hexdigest() in out
    assert err == ""


def test_cluster_mode_adds_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "operator", "--pool", "ns/a", "--redis-mode", "cluster")
    assert "+cluster|slots" in out.split()


@pytest.mark.parametrize(
    ("argv", "message"), [(["--pool", "ns/"], "NAMESPACE/NAME"), (["-p", "a", "--user", "a b"], "user")]
)
def test_a_bad_pool_or_user_is_one_error_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, "worker", *argv)
    assert (code, out) == (1, "")
    assert message in err


def test_a_pool_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "worker")
    assert (code, out) == (1, "")
    assert "--pool NAMESPACE/NAME or --file pool.yaml" in err


POOL_FILE = """apiVersion: tierpool.io/v1alpha1
kind: AgentPool
metadata: {name: swarm, namespace: ns}
spec:
  consumerGroup: swarm_workers
  tiers: [{name: tasks, weight: 1, stream: "agent:tasks:stream"}]
"""


def test_a_pool_file_grants_its_adopted_streams(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(POOL_FILE)
    code, out, _ = run(capsys, "producer", "--file", str(path), "--user", "p")
    assert code == 0
    words = out.split()
    assert [w for w in words if w.startswith("%R~")] == ["%R~tierpool:{ns/swarm}:*", "%R~agent:tasks:stream"]
    assert "(~tierpool:{ns/swarm}:tier:* ~agent:tasks:stream ~tierpool:{ns/swarm}:events:* +xadd)" in out
