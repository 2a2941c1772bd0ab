"""The offsetMsgId: the message id that names the broker holding a message and where in its
commit log the message starts (../shared/docs/remoting.md §2.2 "Response", §2.5
VIEW_MESSAGE_BY_ID; RocketMQ's ``MessageDecoder.createMessageId`` / ``decodeMessageId``).

| part | bytes | hex chars |
|---|---|---|
| store host IP | 4 (IPv4) or 16 (IPv6) | 8 or 32 |
| store host port | int32, big-endian | 8 |
| commit-log offset (phy_offset) | int64, big-endian | 16 |

Written as uppercase hex: 4 + 4 + 8 = 16 bytes = 32 chars for IPv4, 16 + 4 + 8 = 28 bytes =
56 chars for IPv6. A batch send answers the ids of its messages joined by ",".

The byte-level codec lives with the stored record (services/domain/format/commitlog_format.py
``offset_msg_id``, ``offset_msg_id_with_prefix``, ``decode_offset_msg_id``, which the store
uses); this module is its address-level face for the remoting door: hosts as text, and a
strict decode for ids that come from clients (VIEW_MESSAGE_BY_ID, END_TRANSACTION, mqadmin).
"""

from __future__ import annotations

import functools
import ipaddress
import re
import struct
from collections.abc import Iterable

from services.domain.format.commitlog_format import offset_msg_id_with_prefix

OFFSET_MSG_ID_V4_CHARS = 32  # (4 + 4 + 8) * 2
OFFSET_MSG_ID_V6_CHARS = 56  # (16 + 4 + 8) * 2
PORT_MAX = 65535
_PORT_OFFSET = struct.Struct(">iq")  # port(4) + phy_offset(8) = 12 bytes, after the IP
_HEX = re.compile(r"[0-9A-Fa-f]*")


@functools.lru_cache(maxsize=256)
def store_host_prefix(host: str, port: int) -> bytes:
    """The packed store IP + int32 port that starts every offsetMsgId of this broker address
    (computed once per address; ``host`` is an IPv4 or IPv6 literal, brackets allowed)."""
    if not 0 <= port <= PORT_MAX:
        raise ValueError(f"port {port} is outside 0..{PORT_MAX}")
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise ValueError(f"store host {host!r} is not an IPv4 or IPv6 address") from None
    return ip.packed + port.to_bytes(4, "big")


def encode_offset_msg_id(host: str, port: int, phy_offset: int) -> str:
    """The offsetMsgId of the message at ``phy_offset`` on the broker at ``host:port``."""
    if phy_offset < 0:
        raise ValueError(f"commit-log offset {phy_offset} is negative")
    return offset_msg_id_with_prefix(store_host_prefix(host, port), phy_offset)


def offset_msg_ids(prefix: bytes, phy_offsets: Iterable[int]) -> str:
    """The ``msgId`` of a batch send's response: each message's offsetMsgId, joined by ","
    (``prefix`` from :func:`store_host_prefix`)."""
    return ",".join([offset_msg_id_with_prefix(prefix, offset) for offset in phy_offsets])


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """``(host, port, phy_offset)`` of an offsetMsgId; host is the IP's text form (no brackets).

    Lower-case hex is accepted, as Java's ``UtilAll.string2bytes`` does. Raises ValueError for
    anything that is not 32 or 56 hex digits, a port outside 0..65535 (Java's
    ``InetSocketAddress`` refuses it too) or a negative offset. Unlike
    ``commitlog_format.decode_offset_msg_id`` it returns the host as text.
    """
    if not isinstance(msg_id, str):
        raise ValueError(f"offset message id must be a string, got {type(msg_id).__name__}")
    size = len(msg_id)
    if size != OFFSET_MSG_ID_V4_CHARS and size != OFFSET_MSG_ID_V6_CHARS:
        raise ValueError(f"offset message id must be 32 or 56 hex digits, got {size} characters: {msg_id[:64]!r}")
    if not _HEX.fullmatch(msg_id):
        raise ValueError(f"offset message id is not hex: {msg_id!r}")
    raw = bytes.fromhex(msg_id)
    ip_len = len(raw) - _PORT_OFFSET.size
    port, phy_offset = _PORT_OFFSET.unpack_from(raw, ip_len)
    if not 0 <= port <= PORT_MAX:
        raise ValueError(f"offset message id {msg_id} names port {port}, outside 0..{PORT_MAX}")
    if phy_offset < 0:
        raise ValueError(f"offset message id {msg_id} names a negative commit-log offset {phy_offset}")
    ip = ipaddress.IPv4Address(raw[:4]) if ip_len == 4 else ipaddress.IPv6Address(raw[:ip_len])
    return str(ip), port, phy_offset
