"""Workers reach Redis over TLS: CA verification, hostname checks, the insecure switch and the TLS flag.

The embedded Valkey has no TLS, so a TLS-terminating proxy (tls_proxy.py) stands in front of it: the worker's
side of every handshake is real, configured only through the TIERPOOL_REDIS_* settings the operator sets.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tierpool.client.producer import Client

from .support import killed_on_exit, make_pool, spawn_worker, sync_redis, wait_until
from .tls_proxy import Certificates, TlsProxy, make_certificates

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def proxy(redis_url: str, certificates: Certificates) -> Iterator[TlsProxy]:
    port = urlparse(redis_url).port
    assert port is not None
    with TlsProxy(port, certificates) as running:
        yield running


def tls_env(proxy: TlsProxy, certificates: Certificates, case: str) -> dict[str, str]:
    """TIERPOOL_REDIS_* settings for each case; ``{ca}`` stands for the CA file."""
    base = f"localhost:{proxy.port}/0"
    return {
        "verified": {"TIERPOOL_REDIS_URL": f"rediss://{base}", "TIERPOOL_REDIS_TLS_CA_FILE": str(certificates.ca_file)},
        "flag on a redis:// url": {
            "TIERPOOL_REDIS_URL": f"redis://{base}",
            "TIERPOOL_REDIS_TLS": "true",
            "TIERPOOL_REDIS_TLS_CA_FILE": str(certificates.ca_file),
        },
        "insecure": {"TIERPOOL_REDIS_URL": f"rediss://{base}", "TIERPOOL_REDIS_TLS_INSECURE": "true"},
        "unknown CA": {"TIERPOOL_REDIS_URL": f"rediss://{base}"},
        "wrong hostname": {
            "TIERPOOL_REDIS_URL": f"rediss://127.0.0.1:{proxy.port}/0",
            "TIERPOOL_REDIS_TLS_CA_FILE": str(certificates.ca_file),
        },
    }[case]


@pytest.mark.parametrize("case", ["verified", "flag on a redis:// url", "insecure"])
def test_worker_serves_over_tls(
    case: str, redis_url: str, pool_name: str, proxy: TlsProxy, certificates: Certificates, tmp_path: Path
) -> None:
    pool = make_pool(pool_name)
    log = tmp_path / "worker.log"
    worker = spawn_worker(pool, redis_url, log=log, env=tls_env(proxy, certificates, case))
    with killed_on_exit(worker):
        producer = Client(sync_redis(redis_url), pool)  # the producer stays on the plain port
        assert producer.wait_result(producer.submit("p0", {"work_ms": 1}), 20).ok, log.read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    assert proxy.handshakes >= 1


@pytest.mark.parametrize(
    ("case", "why"), [("unknown CA", "unable to get local issuer certificate"), ("wrong hostname", "mismatch")]
)
def test_an_unverifiable_server_is_refused_and_retried(
    case: str, why: str, redis_url: str, pool_name: str, proxy: TlsProxy, certificates: Certificates, tmp_path: Path
) -> None:
    pool = make_pool(pool_name)
    log = tmp_path / "worker.log"
    worker = spawn_worker(pool, redis_url, log=log, env=tls_env(proxy, certificates, case))
    with killed_on_exit(worker):
        assert wait_until(lambda: log.read_text().count("redis unreachable, retrying") >= 2, 20), log.read_text()
        assert why in log.read_text()
        assert "serving pool" not in log.read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    assert "Traceback" not in log.read_text()
    assert proxy.handshakes == 0  # no handshake completed: nothing reached Valkey
