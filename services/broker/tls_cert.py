"""The client port's certificate: the configured PEM files, or a self-signed one pyrmq makes.

RocketMQ 5's proxy serves TLS on its gRPC port out of the box with a self-signed certificate
(``tlsTestModeEnable``), because the Java, Go and C# clients turn TLS on by default and do not
check the server's certificate. pyrmq does the same with ``tls_mode = both`` (or ``tls``) and no
``tls_cert_path``: an ECDSA P-256 key and a certificate valid for ``localhost``, the loopback
addresses, this host's name and the broker's listen and advertised hosts, for 10 years.

With a ``data_dir`` the pair is written there once (``tls/broker.crt``, ``tls/broker.key``, mode
0600, the directory 0700) and reused after restarts, so a client that trusts the certificate
(``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=<data_dir>/tls/broker.crt``) keeps trusting it. Without one,
a new pair is made at each start and kept in memory only, as the proxy's test mode does.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CERT_FILE = "broker.crt"
KEY_FILE = "broker.key"
VALID_DAYS = 3650


@dataclass(frozen=True)
class ServerCertificate:
    cert_pem: bytes
    key_pem: bytes
    cert_path: str  # where a client can find it to trust it; "" when it lives in memory only
    generated: bool  # made by pyrmq (self-signed), not configured

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the certificate (DER), as ``openssl x509 -fingerprint -sha256`` prints it."""
        digest = x509.load_pem_x509_certificate(self.cert_pem).fingerprint(hashes.SHA256())
        return ":".join(f"{b:02X}" for b in digest)


def load_configured(cert_path: str, key_path: str) -> ServerCertificate:
    """The configured PEM files (OSError if they cannot be read)."""
    return ServerCertificate(Path(cert_path).read_bytes(), Path(key_path).read_bytes(), cert_path, False)


def certificate_hosts(*hosts: str) -> list[str]:
    """Names and addresses the generated certificate is valid for (wildcard and empty hosts skipped)."""
    names = ["localhost", "127.0.0.1", "::1", socket.gethostname(), *hosts]
    seen: list[str] = []
    for name in names:
        name = name.strip("[]")
        if name and name not in ("0.0.0.0", "::") and name not in seen:
            seen.append(name)
    return seen


def self_signed(hosts: Iterable[str], now_ms: int) -> tuple[bytes, bytes]:
    """(certificate PEM, PKCS#8 key PEM): self-signed, valid for ``hosts`` (names or IPs) from a
    day before ``now_ms``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.fromtimestamp(now_ms / 1000, datetime.UTC)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pyrmq"),
            x509.NameAttribute(NameOID.COMMON_NAME, "pyrmq broker"),
        ]
    )
    alt: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        # Its own trust anchor: a client trusts it by listing it as a root.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def load_or_create(data_dir: str, hosts: Iterable[str], now_ms: int) -> ServerCertificate:
    """The self-signed pair under ``data_dir/tls`` (made on first use), or a fresh in-memory one
    when ``data_dir`` is empty."""
    if not data_dir:
        cert_pem, key_pem = self_signed(hosts, now_ms)
        return ServerCertificate(cert_pem, key_pem, "", True)
    directory = Path(data_dir).expanduser() / "tls"
    cert_path, key_path = directory / CERT_FILE, directory / KEY_FILE
    if cert_path.exists() and key_path.exists():
        return ServerCertificate(cert_path.read_bytes(), key_path.read_bytes(), str(cert_path), True)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    cert_pem, key_pem = self_signed(hosts, now_ms)
    _write_private(key_path, key_pem)
    _write_private(cert_path, cert_pem)  # written last: its presence means the pair is complete
    return ServerCertificate(cert_pem, key_pem, str(cert_path), True)


def _write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` with mode 0600 from the start (a temporary file renamed in place)."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
