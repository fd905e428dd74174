"""Workers reach Redis over TLS: CA verification, hostname checks, the insecure switch, the TLS flag and mutual TLS
(a client certificate), and refuse TLS settings that a plaintext connection would drop.

The embedded Valkey has no TLS, so a TLS-terminating proxy (tls_proxy.py) stands in front of it: the worker's
side of every handshake is real, configured only through the TIERPOOL_REDIS_* settings the operator sets.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar
from urllib.parse import urlparse

import pytest
import redis

from tierpool.client.producer import Client
from tierpool.model.spec import RedisSpec
from tierpool.store.connection import RedisSettings, sync_client
from tierpool_operator.redis_access import SecretReader, resolve

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


@pytest.fixture
def mutual_proxy(redis_url: str, certificates: Certificates) -> Iterator[TlsProxy]:
    """A server that requires a client certificate of the test CA, as Valkey with ``tls-auth-clients yes``."""
    port = urlparse(redis_url).port
    assert port is not None
    with TlsProxy(port, certificates, require_client_cert=True) as running:
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


def client_certificate_env(certificates: Certificates) -> dict[str, str]:
    return {
        "TIERPOOL_REDIS_TLS_CERT_FILE": str(certificates.client_cert_file),
        "TIERPOOL_REDIS_TLS_KEY_FILE": str(certificates.client_key_file),
    }


def test_mutual_tls_refuses_a_client_without_a_certificate_and_admits_one_with_it(
    mutual_proxy: TlsProxy, certificates: Certificates
) -> None:
    url = f"rediss://localhost:{mutual_proxy.port}/0"
    without = sync_client(RedisSettings(url=url, tls_ca_file=str(certificates.ca_file)))
    with pytest.raises(redis.ConnectionError):
        without.ping()
    assert mutual_proxy.handshakes == 0
    assert mutual_proxy.refusals and all("PEER_DID_NOT_RETURN_A_CERTIFICATE" in why for why in mutual_proxy.refusals)
    with_cert = RedisSettings(
        url=url,
        tls_ca_file=str(certificates.ca_file),
        tls_cert_file=str(certificates.client_cert_file),
        tls_key_file=str(certificates.client_key_file),
    )
    assert sync_client(with_cert).ping()
    assert mutual_proxy.handshakes == 1


def test_a_worker_without_a_client_certificate_is_refused_and_retries(
    redis_url: str, pool_name: str, mutual_proxy: TlsProxy, certificates: Certificates, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    env = tls_env(mutual_proxy, certificates, "verified")
    worker = spawn_worker(make_pool(pool_name), redis_url, log=log, env=env)
    with killed_on_exit(worker):
        assert wait_until(lambda: log.read_text().count("redis unreachable, retrying") >= 2, 20), log.read_text()
        assert "serving pool" not in log.read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    assert "Traceback" not in log.read_text()
    assert mutual_proxy.handshakes == 0  # nothing reached Valkey
    assert any("PEER_DID_NOT_RETURN_A_CERTIFICATE" in why for why in mutual_proxy.refusals)


def test_a_worker_with_a_client_certificate_serves_over_mutual_tls(
    redis_url: str, pool_name: str, mutual_proxy: TlsProxy, certificates: Certificates, tmp_path: Path
) -> None:
    pool = make_pool(pool_name)
    log = tmp_path / "worker.log"
    env = tls_env(mutual_proxy, certificates, "verified") | client_certificate_env(certificates)
    worker = spawn_worker(pool, redis_url, log=log, env=env)
    with killed_on_exit(worker):
        producer = Client(sync_redis(redis_url), pool)
        assert producer.wait_result(producer.submit("p0", {"work_ms": 1}), 20).ok, log.read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    assert mutual_proxy.handshakes >= 1


class SecretsOnDisk:
    """The operator's Secret reads (Kube.secret_value), answered from the test's certificate files."""

    files: ClassVar[dict[str, str]] = {"ca.crt": "ca_file", "tls.crt": "client_cert_file", "tls.key": "client_key_file"}

    def __init__(self, certificates: Certificates, url: str) -> None:
        self.certificates, self.url = certificates, url

    def secret_value(self, namespace: str, name: str, key: str) -> str:
        if key == "url":
            return self.url
        return Path(getattr(self.certificates, self.files[key])).read_text()


async def test_the_operator_reads_over_mutual_tls_with_the_client_certificate_from_secrets(
    mutual_proxy: TlsProxy, certificates: Certificates
) -> None:
    spec = RedisSpec.model_validate(
        {
            "urlSecretRef": {"name": "redis", "key": "url"},
            "tls": {
                "caSecretRef": {"name": "redis-tls", "key": "ca.crt"},
                "certSecretRef": {"name": "redis-tls", "key": "tls.crt"},
                "keySecretRef": {"name": "redis-tls", "key": "tls.key"},
            },
        }
    )
    secrets = SecretsOnDisk(certificates, f"rediss://localhost:{mutual_proxy.port}/0")
    resolved = resolve(spec, SecretReader(secrets, "test"))  # type: ignore[arg-type]
    assert resolved.settings.tls_key_file is not None
    assert Path(resolved.settings.tls_key_file).stat().st_mode & 0o077 == 0  # the key stays the operator's own
    client = resolved.client()
    try:
        assert await client.ping()
    finally:
        await client.aclose()
    assert mutual_proxy.handshakes == 1


def test_tls_settings_with_tls_off_stop_the_worker_before_it_connects(
    redis_url: str, pool_name: str, proxy: TlsProxy, certificates: Certificates, tmp_path: Path
) -> None:
    """A CA file with a redis:// URL and no TLS flag (a urlSecretRef's URL the model could not check): the worker
    exits naming the setting instead of talking plaintext to the server."""
    log = tmp_path / "worker.log"
    env = {"TIERPOOL_REDIS_URL": f"redis://localhost:{proxy.port}/0", "TIERPOOL_REDIS_TLS_CA_FILE": "/ca.pem"}
    worker = spawn_worker(make_pool(pool_name), redis_url, log=log, env=env)
    with killed_on_exit(worker):
        assert worker.wait(20) == 1
    assert "TIERPOOL_REDIS_TLS_CA_FILE set, but TLS is off" in log.read_text()
    assert "Traceback" not in log.read_text()
    assert "serving pool" not in log.read_text()
