"""A TLS-terminating proxy in front of the embedded Valkey, whose build has no TLS.

The client side under test (redis-py configured by tierpool's settings) makes real TLS handshakes against a
certificate signed by a throwaway CA; the proxy forwards the decrypted bytes to the plain Valkey port. With
``require_client_cert`` it is a mutual-TLS server, as Valkey with ``tls-auth-clients yes``: a client without a
certificate signed by the same CA fails the handshake.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Certificates:
    ca_file: Path
    cert_file: Path
    key_file: Path
    client_cert_file: Path
    """A client certificate (extended key usage clientAuth) signed by the same CA, for mutual TLS."""
    client_key_file: Path


def _pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _key_usage(*, signs_certificates: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not signs_certificates,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=signs_certificates,
        crl_sign=signs_certificates,
        encipher_only=False,
        decipher_only=False,
    )


_CA_USAGE, _LEAF_USAGE = _key_usage(signs_certificates=True), _key_usage(signs_certificates=False)


def make_certificates(directory: Path, hostname: str = "localhost") -> Certificates:
    """A CA, a server certificate for ``hostname`` only (no IP SAN, so 127.0.0.1 fails hostname checks) and a
    client certificate.

    All carry the extensions RFC 5280 asks for (key usage, key identifiers): Python 3.13 verifies with
    VERIFY_X509_STRICT and refuses a chain without them."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    client_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tierpool test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_CA_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    names: list[x509.GeneralName] = [x509.DNSName(hostname)]
    if hostname != "localhost":
        names.append(x509.IPAddress(ipaddress.ip_address(hostname)))
    server = _leaf(ca_name, ca_key, key, hostname, now, ExtendedKeyUsageOID.SERVER_AUTH, names)
    client = _leaf(ca_name, ca_key, client_key, "tierpool worker", now, ExtendedKeyUsageOID.CLIENT_AUTH, [])
    certs = Certificates(
        directory / "ca.pem",
        directory / "server.pem",
        directory / "server.key",
        directory / "client.pem",
        directory / "client.key",
    )
    certs.ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    certs.cert_file.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    certs.key_file.write_bytes(_pem(key))
    certs.client_cert_file.write_bytes(client.public_bytes(serialization.Encoding.PEM))
    certs.client_key_file.write_bytes(_pem(client_key))
    return certs


def _leaf(
    ca_name: x509.Name,
    ca_key: ec.EllipticCurvePrivateKey,
    key: ec.EllipticCurvePrivateKey,
    common_name: str,
    now: datetime.datetime,
    usage: x509.ObjectIdentifier,
    names: list[x509.GeneralName],
) -> x509.Certificate:
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return (
        builder.add_extension(_LEAF_USAGE, critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


class TlsProxy:
    """Listens with TLS on 127.0.0.1 and pipes each connection to the plain target port. Runs in its own thread.
    With ``require_client_cert``, only clients presenting a certificate of the same CA get through."""

    def __init__(self, target_port: int, certificates: Certificates, *, require_client_cert: bool = False) -> None:
        self.target_port = target_port
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(certificates.cert_file, certificates.key_file)
        if require_client_cert:
            self.context.verify_mode = ssl.CERT_REQUIRED
            self.context.load_verify_locations(certificates.ca_file)
        self.handshakes = 0
        """Connections whose TLS handshake succeeded."""
        self.refusals: list[str] = []
        """Why each failed handshake failed, as the server's side saw it (``PEER_DID_NOT_RETURN_A_CERTIFICATE``)."""
        self.port = 0
        self._server: asyncio.Server | None = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tls-proxy", daemon=True)

    def __enter__(self) -> TlsProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the TLS proxy did not start")
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _run(self) -> None:
        self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _shutdown(self) -> None:
        """Stop listening and end every open connection, so nothing is left pending on a closed loop."""
        if self._server is not None:
            self._server.close()
        connections = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in connections:
            task.cancel()
        await asyncio.gather(*connections, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:  # the handshake here, not in start_server, so that a refused one is seen (asyncio drops the error)
            await writer.start_tls(self.context, ssl_handshake_timeout=5)
        except (ssl.SSLError, ConnectionError, TimeoutError) as error:
            self.refusals.append(str(error))
            writer.close()
            return
        self.handshakes += 1
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while chunk := await source.read(65536):
            sink.write(chunk)
            await sink.drain()
    except (ConnectionError, ssl.SSLError):
        pass
    finally:
        sink.close()
