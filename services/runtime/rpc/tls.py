"""TLS for the links between pyrmq's own services (store <- broker, scheduler, txcheck), an
option: off by default, like RocketMQ's; on, it is TLS only on that port (RocketMQ's proxy also
offers a "permissive" mode, TLS and plaintext on one port; pyrmq does not).

Server side (``add_port``): ``cert_path`` + ``key_path`` serve TLS; with ``ca_path`` too, clients
must present a certificate signed by that CA (mutual TLS), so only pyrmq's own services connect.
Client side (``open_channel``): ``ca_path`` turns TLS on and is the CA the server's certificate
must chain to (and name the address's host); ``cert_path`` + ``key_path`` are the client's
certificate for mutual TLS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import grpc

# Reconnect quickly: a restarted store is back within seconds, and gRPC's default backoff (1 s,
# x1.6 per failed attempt, up to 120 s) would leave its clients idle long after it serves again.
DEFAULT_OPTIONS = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)


@dataclass(frozen=True)
class TlsFiles:
    ca_path: str = ""
    cert_path: str = ""
    key_path: str = ""

    def __post_init__(self) -> None:
        if bool(self.cert_path) != bool(self.key_path):
            raise ValueError("a TLS certificate and its key go together")


class TlsFileError(OSError):
    """A certificate, key or CA file that cannot be read (its path and why in the message)."""


def read_tls_file(path: str) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise TlsFileError(exc.errno, f"cannot read TLS file {path}: {exc.strerror}") from exc


def add_port(server: grpc.Server, address: str, tls: TlsFiles | None = None) -> int:
    """Bind ``address`` (TLS when ``tls`` has a certificate); the port, 0 if it could not bind."""
    if tls is None or not tls.cert_path:
        return server.add_insecure_port(address)
    credentials = grpc.ssl_server_credentials(
        [(read_tls_file(tls.key_path), read_tls_file(tls.cert_path))],
        root_certificates=read_tls_file(tls.ca_path),
        require_client_auth=bool(tls.ca_path),
    )
    return server.add_secure_port(address, credentials)


def open_channel(
    address: str, tls: TlsFiles | None = None, options: Sequence[tuple[str, Any]] = DEFAULT_OPTIONS
) -> grpc.Channel:
    """A channel to ``address``: TLS when ``tls`` names a CA, plaintext otherwise."""
    if tls is None or not tls.ca_path:
        return grpc.insecure_channel(address, options=list(options))
    credentials = grpc.ssl_channel_credentials(
        read_tls_file(tls.ca_path), read_tls_file(tls.key_path), read_tls_file(tls.cert_path)
    )
    return grpc.secure_channel(address, credentials, options=list(options))
