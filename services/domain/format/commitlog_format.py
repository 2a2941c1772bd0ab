"""CommitLog message record (RocketMQ "v1" and "v2"), big-endian.

Offsets are for IPv4 born host and store host (each 4-byte IP + 4-byte port). A v6 host
(SYSFLAG 0x10 born, 0x20 store) is 16-byte IP + 4-byte port and shifts later fields by 12.

| # | offset | size | field | notes |
|---|---|---|---|---|
| 1 | 0 | 4 | TOTALSIZE | whole record length, this field included |
| 2 | 4 | 4 | MAGICCODE | v1 0xDAA320A7, v2 0xDAA320AB, blank 0xCBD43194 |
| 3 | 8 | 4 | BODYCRC | zlib crc32(body) & 0x7FFFFFFF |
| 4 | 12 | 4 | QUEUEID | |
| 5 | 16 | 4 | FLAG | client's opaque int |
| 6 | 20 | 8 | QUEUEOFFSET | ConsumeQueue unit index; 0 for PREPARED/ROLLBACK |
| 7 | 28 | 8 | PHYSICALOFFSET | phy_offset of this record's first byte |
| 8 | 36 | 4 | SYSFLAG | see SYSFLAG_* below |
| 9 | 40 | 8 | BORNTIMESTAMP | producer's send time, ms |
| 10 | 48 | 8/20 | BORNHOST | IP + int32 port |
| 11 | 56 | 8 | STORETIMESTAMP | set inside the put lock |
| 12 | 64 | 8/20 | STOREHOSTADDRESS | IP + int32 port |
| 13 | 72 | 4 | RECONSUMETIMES | |
| 14 | 76 | 8 | PREPARED TRANSACTION OFFSET | half message phy_offset for committed tx |
| 15 | 84 | 4+B | BODY | int32 length, then bytes |
| 16 | 88+B | 1/2+T | TOPIC | v1: signed int8 length; v2: int16 length; UTF-8 |
| 17 | .. | 2+P | PROPERTIES | int16 length (<= 32767), see properties_format |

TOTALSIZE = 4+4+4+4+4+8+8+4+8+BH+8+SH+4+8 + 4+B + TL+T + 2+P, BH/SH in {8, 20}, TL in {1, 2};
for IPv4/IPv4/v1 that is 91 + B + T + P.

Optional whole-record CRC (RocketMQ 5 ``enabledAppendPropCRC``; on by default in pyrmq): the
last 20 bytes of PROPERTIES are ``"__CRC32#" 0x01 <10 ASCII digits> 0x02``, the digits being
``crc32(record[0:TOTALSIZE-20]) & 0x7FFFFFFF`` in decimal, least-significant digit first,
padded with "0". It covers the whole record after offsets and store time are filled, so a torn
or flipped byte anywhere is caught, not only in the body.

Blank record (end of segment): int32 TOTALSIZE = bytes left in the file, int32 0xCBD43194.
It is written when a record of length L does not fit with 8 bytes to spare (L + 8 > left).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from services.domain.contracts.delay import level_delay_ms
from services.domain.format.buffer import Buffer, WritableBuffer
from services.domain.format.crc32 import crc32
from services.domain.format.java_compat import java_string_hash_repeated
from services.domain.format.properties_format import (
    CRC32,
    KEY_SEPARATOR,
    KEYS,
    NAME_VALUE_SEPARATOR,
    TAGS,
    UNIQ_KEY,
    decode_properties,
    encode_properties,
)
from services.domain.names import SCHEDULE_TOPIC

MAGIC_V1 = 0xDAA320A7  # -626843481 as a Java int
MAGIC_V2 = 0xDAA320AB  # -626843477
MAGIC_BLANK = 0xCBD43194  # -875286124
BLANK_RECORD_SIZE_BYTES = 8
BLANK_RECORD = struct.Struct(">iI")  # TOTALSIZE(4) MAGICCODE(4) = 8 bytes
assert BLANK_RECORD.size == BLANK_RECORD_SIZE_BYTES

SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_NOT_TYPE = 0x0
SYSFLAG_TRANSACTION_PREPARED_TYPE = 0x4
SYSFLAG_TRANSACTION_COMMIT_TYPE = 0x8
SYSFLAG_TRANSACTION_ROLLBACK_TYPE = 0xC
SYSFLAG_TRANSACTION_MASK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

TOPIC_V1_LENGTH_MAX_BYTES = 127
TOPIC_LENGTH_MAX_BYTES = 255  # reject above (v2 is only needed for %RETRY% topics > 127)
BODY_SIZE_MAX_BYTES = 4 * 1024 * 1024  # maxMessageSize: a *body* limit
PROPERTIES_SIZE_MAX_BYTES = 32767

PROP_CRC_PREFIX = (CRC32 + NAME_VALUE_SEPARATOR).encode("ascii")
PROP_CRC_RESERVED_LEN = 20  # 8 + 1 + 10 + 1
assert len(PROP_CRC_PREFIX) + 10 + 1 == PROP_CRC_RESERVED_LEN

QUEUE_OFFSET_POS = 20
PHY_OFFSET_POS = 28
SYSFLAG_POS = 36
BORN_TIMESTAMP_POS = 40


def _header(born_v6: bool, store_v6: bool) -> struct.Struct:
    born = "16si" if born_v6 else "4si"
    store = "16si" if store_v6 else "4si"
    return struct.Struct(
        ">"
        "i"  # TOTALSIZE
        "I"  # MAGICCODE
        "i"  # BODYCRC
        "i"  # QUEUEID
        "i"  # FLAG
        "q"  # QUEUEOFFSET
        "q"  # PHYSICALOFFSET
        "i"  # SYSFLAG
        "q"  # BORNTIMESTAMP
        + born  # BORNHOST ip, port
        + "q"  # STORETIMESTAMP
        + store  # STOREHOSTADDRESS ip, port
        + "i"  # RECONSUMETIMES
        "q"  # PREPARED TRANSACTION OFFSET
        "i"  # BODY length
    )


# HEADERS[sys_flag >> 4 & 3] -> fixed part up to and including the body length.
HEADERS = [_header(False, False), _header(True, False), _header(False, True), _header(True, True)]
HEADER_V4 = HEADERS[0]
assert HEADER_V4.size == 88
assert struct.calcsize(">iIiii") == QUEUE_OFFSET_POS and struct.calcsize(">iIiiiq") == PHY_OFFSET_POS
# STORETIMESTAMP position with an IPv4 born host (RocketMQ reads it at 56 for dispatch).
STORE_TIMESTAMP_POS_V4 = struct.calcsize(">iIiiiqqiq4si")
assert STORE_TIMESTAMP_POS_V4 == 56
_SIZE_MAGIC = struct.Struct(">iI")
_INT16 = struct.Struct(">h")
_INT8 = struct.Struct(">b")


def host_from_string(text: str) -> tuple[bytes, int]:
    """``"1.2.3.4:10911"`` or ``"[::1]:10911"`` -> (ip bytes, port)."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    try:
        return socket.inet_pton(socket.AF_INET, host), int(port)
    except OSError:
        return socket.inet_pton(socket.AF_INET6, host), int(port)


def host_to_string(host: tuple[bytes, int]) -> str:
    ip, port = host
    if len(ip) == 4:
        return f"{socket.inet_ntop(socket.AF_INET, ip)}:{port}"
    return f"[{socket.inet_ntop(socket.AF_INET6, ip)}]:{port}"


def body_crc(body: bytes) -> int:
    """RocketMQ's body CRC: java.util.zip.CRC32 masked to 31 bits (0 for an empty body)."""
    return crc32(body) & 0x7FFFFFFF if body else 0


@dataclass(slots=True)
class MessageRecord:
    """One CommitLog record, decoded or about to be encoded."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp_ms: int = 0
    born_host: tuple[bytes, int] = (b"\x7f\x00\x00\x01", 0)
    store_timestamp_ms: int = 0
    store_host: tuple[bytes, int] = (b"\x7f\x00\x00\x01", 10911)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0
    queue_offset: int = 0
    phy_offset: int = 0
    body_crc: int = 0
    total_size: int = 0
    magic: int = MAGIC_V1

    @property
    def tags(self) -> str | None:
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(KEYS, "").split(KEY_SEPARATOR) if k]

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(UNIQ_KEY)

    @property
    def transaction_type(self) -> int:
        return self.sys_flag & SYSFLAG_TRANSACTION_MASK

    @property
    def offset_msg_id(self) -> str:
        return offset_msg_id(self.store_host, self.phy_offset)


def host_flags(born_host: tuple[bytes, int], store_host: tuple[bytes, int]) -> int:
    """The SYSFLAG v6 bits implied by the two host addresses."""
    return (SYSFLAG_BORNHOST_V6 if len(born_host[0]) == 16 else 0) | (
        SYSFLAG_STOREHOST_V6 if len(store_host[0]) == 16 else 0
    )


def record_size(sys_flag: int, body_len: int, topic_len: int, properties_len: int, magic: int) -> int:
    """TOTALSIZE for the given field lengths (the length formula)."""
    header = HEADERS[(sys_flag >> 4) & 3].size
    return header + body_len + (2 if magic == MAGIC_V2 else 1) + topic_len + 2 + properties_len


def choose_magic(topic_bytes: bytes) -> int:
    """v1 unless the topic is longer than 127 (v1's signed-byte length cannot hold it)."""
    return MAGIC_V2 if len(topic_bytes) > TOPIC_V1_LENGTH_MAX_BYTES else MAGIC_V1


def encode_into(buf: WritableBuffer, pos: int, rec: MessageRecord, topic_bytes: bytes, properties_bytes: bytes) -> int:
    """Write ``rec`` at ``buf[pos:]`` (``rec.total_size`` must be set); return the size written.

    ``rec.body_crc``, ``rec.sys_flag`` (v6 bits) and ``rec.magic`` must already be set.
    """
    body = rec.body
    size = rec.total_size
    HEADERS[(rec.sys_flag >> 4) & 3].pack_into(
        buf,
        pos,
        size,
        rec.magic,
        rec.body_crc,
        rec.queue_id,
        rec.flag,
        rec.queue_offset,
        rec.phy_offset,
        rec.sys_flag,
        rec.born_timestamp_ms,
        rec.born_host[0],
        rec.born_host[1],
        rec.store_timestamp_ms,
        rec.store_host[0],
        rec.store_host[1],
        rec.reconsume_times,
        rec.prepared_transaction_offset,
        len(body),
    )
    p = pos + HEADERS[(rec.sys_flag >> 4) & 3].size
    buf[p : p + len(body)] = body
    p += len(body)
    if rec.magic == MAGIC_V2:
        _INT16.pack_into(buf, p, len(topic_bytes))
        p += 2
    else:
        buf[p] = len(topic_bytes)
        p += 1
    buf[p : p + len(topic_bytes)] = topic_bytes
    p += len(topic_bytes)
    _INT16.pack_into(buf, p, len(properties_bytes))
    p += 2
    buf[p : p + len(properties_bytes)] = properties_bytes
    p += len(properties_bytes)
    assert p - pos == size, (p - pos, size)
    return size


def prop_crc_digits(crc: int) -> bytes:
    """The 10 digits of the CRC trailer: decimal, least-significant digit first, "0"-padded."""
    return str(crc)[::-1].ljust(10, "0").encode("ascii")


def fill_prop_crc(buf: WritableBuffer, pos: int, total_size: int) -> None:
    """Compute and write the whole-record CRC of the record at ``buf[pos:]`` (reserved trailer)."""
    crc = crc32(buf[pos : pos + total_size - PROP_CRC_RESERVED_LEN]) & 0x7FFFFFFF
    digits_pos = pos + total_size - 11
    buf[digits_pos : digits_pos + 10] = prop_crc_digits(crc)


def prepare(rec: MessageRecord, java_order: bool = True, prop_crc: bool = False) -> tuple[bytes, bytes]:
    """Fill the derived fields of ``rec`` (crc, v6 flags, magic, total size).

    Returns (topic bytes, properties bytes) ready for :func:`encode_into`. With ``prop_crc`` the
    properties end with the reserved CRC trailer; call :func:`fill_prop_crc` after encoding.
    """
    topic_bytes = rec.topic.encode("utf-8")
    properties_bytes = encode_properties(rec.properties, java_order=java_order)
    if prop_crc:
        if properties_bytes and not properties_bytes.endswith(b"\x02"):
            properties_bytes += b"\x02"
        properties_bytes += PROP_CRC_PREFIX + b"0000000000\x02"
    rec.body_crc = body_crc(rec.body)
    rec.sys_flag = (rec.sys_flag & ~(SYSFLAG_BORNHOST_V6 | SYSFLAG_STOREHOST_V6)) | host_flags(
        rec.born_host, rec.store_host
    )
    rec.magic = choose_magic(topic_bytes)
    rec.total_size = record_size(rec.sys_flag, len(rec.body), len(topic_bytes), len(properties_bytes), rec.magic)
    return topic_bytes, properties_bytes


def encode_record(rec: MessageRecord, java_order: bool = True, prop_crc: bool = False) -> bytes:
    """Encode one record (derived fields are filled in ``rec``)."""
    topic_bytes, properties_bytes = prepare(rec, java_order, prop_crc)
    buf = bytearray(rec.total_size)
    encode_into(buf, 0, rec, topic_bytes, properties_bytes)
    if prop_crc:
        fill_prop_crc(buf, 0, rec.total_size)
    return bytes(buf)


def encode_blank(bytes_left: int) -> bytes:
    """The 8-byte end-of-segment record for a file with ``bytes_left`` bytes remaining."""
    return BLANK_RECORD.pack(bytes_left, MAGIC_BLANK)


class CorruptRecord(Exception):
    """The bytes at ``phy_offset`` are not a valid record.

    ``size`` is the record's TOTALSIZE when the length arithmetic alone was wrong (the reader
    may skip it), else -1 (unknown extent: end of valid data).
    """

    def __init__(self, phy_offset: int, reason: str, size: int = -1) -> None:
        super().__init__(f"corrupt record at phy_offset {phy_offset}: {reason}")
        self.phy_offset = phy_offset
        self.reason = reason
        self.size = size


BLANK = "blank"  # sentinel returned by decode_record for the end-of-segment record


def decode_record(
    buf: Buffer, pos: int, limit: int, check_crc: bool = True, base_offset: int = 0, read_body: bool = True
) -> MessageRecord | str:
    """Decode the record at ``buf[pos:limit]`` (checkMessageAndReturnSize).

    Returns a MessageRecord, or BLANK for the end-of-segment record. Raises CorruptRecord.
    ``base_offset`` is the phy offset of ``buf[0]`` (used in error messages only).
    """
    where = base_offset + pos
    if limit - pos < BLANK_RECORD_SIZE_BYTES:
        raise CorruptRecord(where, "short buffer")
    total_size, magic = _SIZE_MAGIC.unpack_from(buf, pos)
    if magic == MAGIC_BLANK:
        return BLANK
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        raise CorruptRecord(where, f"bad magic 0x{magic:08x}")
    if total_size < HEADER_V4.size or total_size > limit - pos:
        raise CorruptRecord(where, f"bad total size {total_size}")
    sys_flag = struct.unpack_from(">i", buf, pos + SYSFLAG_POS)[0]
    header = HEADERS[(sys_flag >> 4) & 3]
    if total_size < header.size:
        raise CorruptRecord(where, f"bad total size {total_size}")
    (
        _,
        _,
        crc,
        queue_id,
        flag,
        queue_offset,
        phy_offset,
        sys_flag,
        born_ts,
        born_ip,
        born_port,
        store_ts,
        store_ip,
        store_port,
        reconsume,
        prepared,
        body_len,
    ) = header.unpack_from(buf, pos)
    end = pos + total_size
    p = pos + header.size
    if body_len < 0 or p + body_len > end:
        raise CorruptRecord(where, f"bad body length {body_len}")
    body_view = buf[p : p + body_len]
    if check_crc and (crc32(body_view) & 0x7FFFFFFF if body_len else 0) != crc:
        raise CorruptRecord(where, "body crc mismatch")
    p += body_len
    if p + 1 > end:
        raise CorruptRecord(where, "truncated topic", total_size)
    if magic == MAGIC_V2:
        if p + 2 > end:
            raise CorruptRecord(where, "truncated topic", total_size)
        topic_len = _INT16.unpack_from(buf, p)[0]
        p += 2
    else:
        topic_len = _INT8.unpack_from(buf, p)[0]
        p += 1
    if topic_len < 0 or p + topic_len + 2 > end:
        raise CorruptRecord(where, f"bad topic length {topic_len}", total_size)
    topic = bytes(buf[p : p + topic_len]).decode("utf-8", "replace")
    p += topic_len
    properties_len = _INT16.unpack_from(buf, p)[0]
    p += 2
    if properties_len < 0 or p + properties_len != end:
        raise CorruptRecord(where, "length arithmetic mismatch", total_size)
    properties = decode_properties(bytes(buf[p : p + properties_len])) if properties_len else {}
    properties.pop(CRC32, None)
    return MessageRecord(
        topic=topic,
        queue_id=queue_id,
        body=bytes(body_view) if read_body else b"",
        properties=properties,
        flag=flag,
        sys_flag=sys_flag,
        born_timestamp_ms=born_ts,
        born_host=(born_ip, born_port),
        store_timestamp_ms=store_ts,
        store_host=(store_ip, store_port),
        reconsume_times=reconsume,
        prepared_transaction_offset=prepared,
        queue_offset=queue_offset,
        phy_offset=phy_offset,
        body_crc=crc,
        total_size=total_size,
        magic=magic,
    )


def tags_code(record: MessageRecord, delay_level_millis: Sequence[int] | None = None) -> int:
    """ConsumeQueue tags code: JavaHash(TAGS), or the deliver time for SCHEDULE_TOPIC_XXXX."""
    props = record.properties
    if record.topic == SCHEDULE_TOPIC and delay_level_millis is not None:
        delay_ms = level_delay_ms(props, delay_level_millis)
        if delay_ms is not None:
            return record.store_timestamp_ms + delay_ms
    tags = props.get(TAGS)
    return java_string_hash_repeated(tags) if tags else 0


def offset_msg_id(store_host: tuple[bytes, int], phy_offset: int) -> str:
    """Offset message id: store IP + int32 port + int64 phy offset, uppercase hex."""
    ip, port = store_host
    return (ip + struct.pack(">iq", port, phy_offset)).hex().upper()


def offset_msg_id_with_prefix(store_host_prefix: bytes, phy_offset: int) -> str:
    """:func:`offset_msg_id` from the packed store IP + int32 port (computed once per store)."""
    return (store_host_prefix + phy_offset.to_bytes(8, "big")).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[tuple[bytes, int], int]:
    """Inverse of :func:`offset_msg_id`: ((ip, port), phy_offset). Raises ValueError."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"offset message id must be 32 or 56 hex chars, got {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    ip_len = len(raw) - 12
    port, phy_offset = struct.unpack(">iq", raw[ip_len:])
    return (raw[:ip_len], port), phy_offset


_SIZE_MAGIC_CRC = struct.Struct(">iIi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
MAGIC_V1_BYTES = struct.pack(">I", MAGIC_V1)
MAGIC_V2_BYTES = struct.pack(">I", MAGIC_V2)


def validate_record(
    view: Buffer, pos: int, limit: int, expected_phy_offset: int, check_crc: bool = True, require_prop_crc: bool = False
) -> int:
    """Check the record at ``view[pos:limit]`` without decoding it; returns its size (0: blank).

    Stricter than RocketMQ's check: the record's PHYSICALOFFSET must equal
    ``expected_phy_offset`` and non-empty properties must end with 0x02, so stale, misplaced or
    zero-torn bytes never pass; with ``require_prop_crc`` a record without the whole-record CRC
    trailer fails too. ``view`` should be a memoryview (CRCs are computed without copying).
    Raises CorruptRecord.
    """
    if limit - pos < BLANK_RECORD_SIZE_BYTES:
        raise CorruptRecord(expected_phy_offset, "short buffer")
    total_size, magic, crc = (
        _SIZE_MAGIC_CRC.unpack_from(view, pos) if limit - pos >= 12 else (*_SIZE_MAGIC.unpack_from(view, pos), 0)
    )
    if magic == MAGIC_BLANK:
        if total_size != limit - pos:
            raise CorruptRecord(expected_phy_offset, f"blank record size {total_size} != {limit - pos} left")
        return 0
    if magic != MAGIC_V1 and magic != MAGIC_V2:
        raise CorruptRecord(expected_phy_offset, f"bad magic 0x{magic:08x}")
    if total_size < HEADER_V4.size or total_size > limit - pos:
        raise CorruptRecord(expected_phy_offset, f"bad total size {total_size}")
    if _INT64.unpack_from(view, pos + PHY_OFFSET_POS)[0] != expected_phy_offset:
        raise CorruptRecord(expected_phy_offset, "phy offset field does not match position")
    sys_flag = _INT32.unpack_from(view, pos + SYSFLAG_POS)[0]
    header_size = HEADERS[(sys_flag >> 4) & 3].size
    if total_size < header_size:
        raise CorruptRecord(expected_phy_offset, f"bad total size {total_size}")
    end = pos + total_size
    p = pos + header_size
    body_len = _INT32.unpack_from(view, p - 4)[0]
    if body_len < 0 or p + body_len > end:
        raise CorruptRecord(expected_phy_offset, f"bad body length {body_len}")
    if check_crc and (crc32(view[p : p + body_len]) & 0x7FFFFFFF if body_len else 0) != crc:
        raise CorruptRecord(expected_phy_offset, "body crc mismatch")
    p += body_len
    if magic == MAGIC_V2:
        topic_len = _INT16.unpack_from(view, p)[0] if p + 2 <= end else -1
        p += 2
    else:
        topic_len = _INT8.unpack_from(view, p)[0] if p + 1 <= end else -1
        p += 1
    if topic_len < 0 or p + topic_len + 2 > end:
        raise CorruptRecord(expected_phy_offset, f"bad topic length {topic_len}", total_size)
    p += topic_len
    properties_len = _INT16.unpack_from(view, p)[0]
    if properties_len < 0 or p + 2 + properties_len != end:
        raise CorruptRecord(expected_phy_offset, "length arithmetic mismatch", total_size)
    if properties_len and view[end - 1] != 0x02:
        raise CorruptRecord(expected_phy_offset, "properties do not end with a separator", total_size)
    has_trailer = (
        properties_len >= PROP_CRC_RESERVED_LEN and view[end - PROP_CRC_RESERVED_LEN : end - 11] == PROP_CRC_PREFIX
    )
    if require_prop_crc and not has_trailer:
        raise CorruptRecord(expected_phy_offset, "record crc trailer missing", total_size)
    if check_crc and has_trailer:
        crc = crc32(view[pos : end - PROP_CRC_RESERVED_LEN]) & 0x7FFFFFFF
        if view[end - 11 : end - 1] != prop_crc_digits(crc):
            raise CorruptRecord(expected_phy_offset, "record crc mismatch")
    return total_size
