"""Stored records as the remoting door hands them out: concatenated, with STOREHOST naming the
door's own address (the byte layout is services/domain/format/commitlog_format.py's).

| field | offset (IPv4 born host) | offset (IPv6 born host) | size |
|---|---|---|---|
| SYSFLAG | 36 | 36 | 4 (0x10: born host IPv6, 0x20: store host IPv6) |
| STOREHOST | 64 | 76 | 4-byte IPv4 + int32 port (IPv6: 16 + 4) |

Clients treat a record's STOREHOST as the broker that holds it: the message id they compute
(the offsetMsgId) is STOREHOST + commit-log offset, and the C++ client sends
CONSUMER_SEND_MSG_BACK, mqadmin VIEW_MESSAGE_BY_ID, to that address. The store writes its own
address there (its gRPC port, which speaks no remoting), so the door rewrites it to the address
that serves the record's broker group. Only an IPv4 store host is rewritten to an IPv4 address
(the record's size cannot change); other records go as stored.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence

from services.domain.format.commitlog_format import host_from_string

SYSFLAG_POS = 36
BORN_HOST_V6 = 0x10
STORE_HOST_V6 = 0x20
STORE_HOST_POS_V4 = 64  # after an IPv4 born host
STORE_HOST_POS_BORN_V6 = 76  # after an IPv6 born host
_SIZE = struct.Struct(">i")
_SYSFLAG = struct.Struct(">i")
_HOST_V4 = struct.Struct(">4si")


def ipv4_host(address: str) -> tuple[bytes, int] | None:
    """``"1.2.3.4:port"`` as (4 address bytes, port); None for any other address."""
    host, _, port = address.rpartition(":")
    try:
        return socket.inet_pton(socket.AF_INET, host), int(port)
    except (OSError, ValueError):
        return None


LOOPBACK_HOST = (b"\x7f\x00\x00\x01", 0)


def record_host(address: str) -> tuple[bytes, int]:
    """``"ip:port"`` (or ``"[v6]:port"``) as a record's host field; 127.0.0.1:0 when blank or
    not an address (a record re-encoded from what the store reported)."""
    try:
        return host_from_string(address) if address else LOOPBACK_HOST
    except (ValueError, OSError):
        return LOOPBACK_HOST


def with_store_host(records: Sequence[bytes], store_host: tuple[bytes, int] | None) -> bytes:
    """The records concatenated, each IPv4 STOREHOST set to ``store_host`` (None: unchanged)."""
    if not records:
        return b""
    if store_host is None:
        return b"".join(records)
    body = bytearray(b"".join(records))
    ip, port = store_host
    pos = 0
    end = len(body)
    while pos + STORE_HOST_POS_BORN_V6 + 8 <= end:
        (size,) = _SIZE.unpack_from(body, pos)
        (sys_flag,) = _SYSFLAG.unpack_from(body, pos + SYSFLAG_POS)
        if size <= 0:
            break
        if not sys_flag & STORE_HOST_V6:
            at = STORE_HOST_POS_BORN_V6 if sys_flag & BORN_HOST_V6 else STORE_HOST_POS_V4
            _HOST_V4.pack_into(body, pos + at, ip, port)
        pos += size
    return bytes(body)
