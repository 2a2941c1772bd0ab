"""CommitLog and ConsumeQueue files -> Arrow record batches, decoded with numpy.

The record layout is the store's (``services/domain/format/commitlog_format.py``, byte table
there): this module builds numpy dtypes from its ``HEADERS`` structs and asserts they agree,
and ``decode_record`` there is the reference these decoders are tested against.

Decoding one batch of a segment:

1. **Walk** the TOTALSIZE chain from a record boundary (``walk_array``: candidates found with
   numpy, kept while each starts where the previous ends; ``walk``, 8 bytes per record in
   Python, takes over where they do not link). It stops at the blank end-of-segment record, at
   bytes that are not a record (the unwritten tail of the last segment is zeros), or at ``stop``.
2. **Headers**: one fancy index copies the fixed header of every record into an ``(n, 88)``
   array viewed as a packed big-endian structured dtype: every fixed field at once. Records
   with IPv6 hosts (SYSFLAG 0x10 / 0x20) have longer headers; each host combination present
   in the batch is decoded with its own dtype.
3. **Variable parts**: body, topic and properties are gathered with ``arrow_util.gather_array``
   (Arrow copies long ranges through a ``binary_view``; short ones one numpy index); properties are
   parsed into a map plus TAGS / KEYS / UNIQ_KEY / __LITE_TOPIC / INNER_MULTI_QUEUE_OFFSET
   without a Python loop (``arrow_util.parse_properties``; a name absent from the batch's bytes
   is not parsed for at all); hosts are formatted once per distinct address
   (``arrow_util.host_column``).

Splitting a segment (``find_record_start``): every record stores its own phy offset
(PHYSICALOFFSET at +28), so a reader given an arbitrary byte range finds the first record
that starts in it by looking for the magic code and checking that field: no driver-side walk
is needed to cut a 1 GiB segment into partitions. A split owns the records that *start* in
``[from, to)``.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from pipeline import arrow_util as au
from pipeline.errors import CorruptSegment
from pipeline.schema import COMMITLOG_COLUMNS, CONSUMEQUEUE_COLUMNS, arrow_schema
from services.domain.delay_levels import DELAY_LEVELS_DEFAULT, parse_delay_levels
from services.domain.format.commitlog_format import (
    HEADERS,
    MAGIC_BLANK,
    MAGIC_V1,
    MAGIC_V2,
    PHY_OFFSET_POS,
    PROP_CRC_PREFIX,
    PROP_CRC_RESERVED_LEN,
    SYSFLAG_POS,
    MessageRecord,
    decode_record,
    tags_code,
)
from services.domain.format.consume_queue_format import CQ_DTYPE, CQ_UNIT_SIZE_BYTES
from services.domain.format.java_compat import java_string_hash
from services.domain.format.properties_format import INNER_MULTI_QUEUE_OFFSET, LITE_TOPIC, TAGS, UNIQ_KEY
from services.domain.names import SCHEDULE_TOPIC

BATCH_ROWS_DEFAULT = 32_768
SEGMENT_NAME_LENGTH = 20  # 20-digit start offset
# Whole records: a segment's mapped bytes, or the records of a PullRecords answer (searchable: find).
RecordBytes: TypeAlias = bytes | bytearray | mmap.mmap


def _header_dtype(born_v6: bool, store_v6: bool) -> np.dtype:
    ip = lambda v6: "V16" if v6 else "V4"  # noqa: E731
    return np.dtype(
        [
            ("total_size", ">i4"),
            ("magic", ">u4"),
            ("body_crc", ">i4"),
            ("queue_id", ">i4"),
            ("flag", ">i4"),
            ("queue_offset", ">i8"),
            ("phy_offset", ">i8"),
            ("sys_flag", ">i4"),
            ("born_ts", ">i8"),
            ("born_ip", ip(born_v6)),
            ("born_port", ">i4"),
            ("store_ts", ">i8"),
            ("store_ip", ip(store_v6)),
            ("store_port", ">i4"),
            ("reconsume", ">i4"),
            ("prepared", ">i8"),
            ("body_len", ">i4"),
        ]
    )


# HEADER_DTYPES[sys_flag >> 4 & 3], exactly as HEADERS (pair assertion with the store's structs).
HEADER_DTYPES = [
    _header_dtype(False, False),
    _header_dtype(True, False),
    _header_dtype(False, True),
    _header_dtype(True, True),
]
for _dtype, _struct in zip(HEADER_DTYPES, HEADERS):
    assert _dtype.itemsize == _struct.size, (_dtype.itemsize, _struct.size)
_FIELDS_V4 = HEADER_DTYPES[0].fields
assert _FIELDS_V4 is not None
assert _FIELDS_V4["phy_offset"][1] == PHY_OFFSET_POS
assert _FIELDS_V4["sys_flag"][1] == SYSFLAG_POS

_SIZE_MAGIC = struct.Struct(">iI")
_PHY = struct.Struct(">q")
_HEADER_MIN = HEADERS[0].size
_MAGICS = (MAGIC_V1, MAGIC_V2)
_CRC_PREFIX = np.frombuffer(PROP_CRC_PREFIX, np.uint8)
_POW10 = 10 ** np.arange(10, dtype=np.int64)


def walk(buf: RecordBytes, pos: int, limit: int, stop: int, max_records: int) -> tuple[list[int], int, str]:
    """Record starts from the boundary ``pos``: (starts, next position, why it stopped).

    Stops before ``max_records``, at the first record starting at or after ``stop``
    ("stop"), at the blank record ("blank"), or where no valid record starts ("end").
    """
    starts: list[int] = []
    unpack = _SIZE_MAGIC.unpack_from
    while len(starts) < max_records:
        if pos >= stop:
            return starts, pos, "stop"
        if limit - pos < 8:
            return starts, pos, "end"
        size, magic = unpack(buf, pos)
        if magic == MAGIC_BLANK:
            return starts, pos, "blank"
        if (magic != MAGIC_V1 and magic != MAGIC_V2) or size < _HEADER_MIN or size > limit - pos:
            return starts, pos, "end"
        starts.append(pos)
        pos += size
    return starts, pos, "more"


_MAGIC_HI = MAGIC_V1 >> 8  # V1 and V2 differ only in their last byte
assert MAGIC_V2 >> 8 == _MAGIC_HI
_FAST_MIN_RECORDS = 64


def walk_array(
    buf: RecordBytes, a: np.ndarray, pos: int, limit: int, stop: int, max_records: int
) -> tuple[np.ndarray, int, str]:
    """``walk`` with numpy (the same starts, as int64, the same position and reason).

    Within a window, every position holding a v1/v2 magic code and a plausible TOTALSIZE is
    a candidate; the records are the prefix of candidates, from ``pos``, where each candidate
    starts exactly where the previous one ends (the TOTALSIZE chain, checked link by link).
    Wherever the chain leaves the candidates (a magic code inside a body, the window's end,
    the blank record, the unwritten tail), ``walk`` itself takes the next few steps."""
    parts: list[np.ndarray] = []
    starts: list[int] | np.ndarray
    total = 0
    mean_size = 512
    slow = 0
    while True:
        remaining = max_records - total
        if remaining <= 0 or pos >= stop or limit - pos < 8:
            starts, pos, why = walk(buf, pos, limit, stop, remaining)
            break
        if slow:
            starts, pos, why = walk(buf, pos, limit, stop, min(remaining, slow))
            slow = 0
        else:
            window = min(16 << 20, max(64 << 10, remaining * mean_size * 17 // 16))
            starts, pos = _chain(a, pos, min(limit, stop, pos + window), limit, remaining)
            if len(starts) < _FAST_MIN_RECORDS:  # a short chain: let ``walk`` go on a while
                slow = 16 if len(starts) else 1024
            if len(starts) > 1:
                mean_size = max(_HEADER_MIN, int(starts[-1] - starts[0]) // (len(starts) - 1))
            why = "more"
        if len(starts):
            parts.append(np.asarray(starts, np.int64))
            total += len(starts)
        if why != "more":
            break
    return (np.concatenate(parts) if parts else np.zeros(0, np.int64)), pos, why


def _chain(a: np.ndarray, pos: int, hi: int, limit: int, max_records: int) -> tuple[np.ndarray, int]:
    """The records from ``pos`` whose starts are below ``hi``, as far as consecutive candidates
    link up (none if ``pos`` is not a candidate), and the position after the last one."""
    end = min(hi, limit - 7)  # a candidate p has its magic at p+4..p+8 <= limit
    if end <= pos:
        return _EMPTY_STARTS, pos
    probe = a[pos + 5 : end + 5]  # the magic's second byte
    cand = np.flatnonzero(probe == (_MAGIC_HI >> 8) & 0xFF) + pos
    if len(cand) == 0 or cand[0] != pos:
        return _EMPTY_STARTS, pos
    words = au.windows(a, 8, cand).view(">u4")
    magic = words[:, 1]
    size = words[:, 0].view(">i4").astype(np.int64)
    ok = (
        ((magic >> 8) == _MAGIC_HI)
        & (((magic & 0xFF) == (MAGIC_V1 & 0xFF)) | ((magic & 0xFF) == (MAGIC_V2 & 0xFF)))
        & (size >= _HEADER_MIN)
        & (size <= limit - cand)
    )
    cand, size = cand[ok], size[ok]
    if len(cand) == 0 or cand[0] != pos:
        return _EMPTY_STARTS, pos
    nxt = cand + size
    broken = np.flatnonzero(nxt[:-1] != cand[1:])
    count = min(int(broken[0]) + 1 if len(broken) else len(cand), max_records)
    return cand[:count], int(nxt[count - 1])


_EMPTY_STARTS = np.zeros(0, np.int64)
_MAGIC_BYTES = tuple(m.to_bytes(4, "big") for m in (*_MAGICS, MAGIC_BLANK))
SEARCH_WINDOW_BYTES = 64 << 10


def find_record_start(buf: RecordBytes, pos: int, limit: int, base_offset: int) -> int:
    """The first position >= ``pos`` where a record whose PHYSICALOFFSET names that position
    starts (or the blank record that ends the segment); ``limit`` if there is none. Searches
    in growing windows, so a magic code that never occurs costs a window, not the segment."""
    window = SEARCH_WINDOW_BYTES
    while pos < limit:
        pos = _skip_zeros(buf, pos, limit)
        if pos >= limit:
            break
        end = min(limit, pos + 4 + window)
        candidates = [p for p in (buf.find(m, pos + 4, end) for m in _MAGIC_BYTES) if p >= 0]
        if not candidates:
            pos = max(pos + 1, end - 8)  # a magic may straddle the window's end
            window *= 2
            continue
        found = min(candidates) - 4
        size, magic = _SIZE_MAGIC.unpack_from(buf, found)
        if magic == MAGIC_BLANK:
            if size == limit - found:
                return found
        elif (
            found + PHY_OFFSET_POS + 8 <= limit
            and _PHY.unpack_from(buf, found + PHY_OFFSET_POS)[0] == base_offset + found
        ):
            return found
        pos = found + 1
    return limit


def _skip_zeros(buf: RecordBytes, pos: int, limit: int) -> int:
    """``pos``, or past the zero bytes that follow it (the unwritten tail of the last segment,
    where ``buf.find`` would be slow): every record starts with a TOTALSIZE that has a
    non-zero byte among its 4, so none starts more than 3 bytes before the first non-zero."""
    a = np.frombuffer(buf, np.uint8)
    try:
        step = 4096
        while pos < limit:
            end = min(limit, pos + step)
            chunk = a[pos:end]
            if np.count_nonzero(chunk):
                return max(pos, pos + int(np.argmax(chunk != 0)) - 3)
            pos = end
            step = min(2 * step, 16 << 20)
        return limit
    finally:
        del a


def _fields(a: np.ndarray, starts: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, au.HostParts]]:
    """Every fixed header field of the records at ``starts``, native int arrays, and their
    addresses (``born_ip``, ``store_ip``) in parts."""
    count = len(starts)
    combos = (a[starts + SYSFLAG_POS + 3] >> 4) & 3  # the v6 bits are in SYSFLAG's low byte
    present = np.unique(combos)
    out: dict[str, np.ndarray] = {}
    hosts: dict[str, au.HostParts] = {}
    for combo in present:
        dtype = HEADER_DTYPES[combo]
        assert dtype.names is not None  # a structured dtype
        rows = np.flatnonzero(combos == combo) if len(present) > 1 else None
        picked = starts if rows is None else starts[rows]
        header = au.windows(a, dtype.itemsize, picked).view(dtype).ravel()
        for name in dtype.names:
            column = header[name]
            if name.endswith("_ip"):
                if rows is None:
                    hosts[name] = [(column, None)]
                else:
                    hosts.setdefault(name, []).append((column, rows))
                continue
            if name not in out:
                out[name] = np.empty(count, column.dtype.newbyteorder("="))
            target = out[name]
            if rows is None:
                target[:] = column
            else:
                target[rows] = column
    out["header_size"] = np.array([d.itemsize for d in HEADER_DTYPES], np.int64)[combos]
    return out, hosts


ALL_COLUMNS = tuple(name for name, _ in COMMITLOG_COLUMNS)
# Columns that are one property's value (liteQueueOffset: as a number).
_PROPERTY_STRINGS = {
    "tags": TAGS,
    "uniqKey": UNIQ_KEY,
    "liteTopic": LITE_TOPIC,
    "liteQueueOffset": INNER_MULTI_QUEUE_OFFSET,
}
_PROPERTY_COLUMNS = {"properties", "keys", "tagsCode", *_PROPERTY_STRINGS}
DELAY_LEVEL_MILLIS_DEFAULT = parse_delay_levels(DELAY_LEVELS_DEFAULT)


def _tags_codes(
    buf: RecordBytes, starts: np.ndarray, topics: pa.Array, tags: pa.Array, delay_level_millis: tuple[int, ...]
) -> pa.Array:
    """The ConsumeQueue tags code of every record, as the store computes it (``tags_code``):
    the Java hash of each distinct tag once; records of SCHEDULE_TOPIC_XXXX (whose code is a
    delivery time) through the store's own function."""
    import pyarrow.compute as pc

    encoded = tags.dictionary_encode()
    hashes = np.array([java_string_hash(t) if t else 0 for t in encoded.dictionary.to_pylist()] or [0], np.int64)
    codes = hashes[pc.fill_null(encoded.indices, 0).to_numpy(zero_copy_only=False)]
    codes[~pc.is_valid(tags).to_numpy(zero_copy_only=False)] = 0
    for row in np.flatnonzero(pc.equal(topics, SCHEDULE_TOPIC).to_numpy(zero_copy_only=False)):
        record = decode_record(buf, int(starts[row]), len(buf), check_crc=False, read_body=False)
        assert isinstance(record, MessageRecord)  # never BLANK: the walk stops before the blank record
        codes[row] = tags_code(record, delay_level_millis)
    return pa.array(codes, pa.int64())


def decode_batch(
    buf: RecordBytes,
    a: np.ndarray,
    starts: np.ndarray,
    base_offset: int,
    segment: str,
    verify_crc: bool = False,
    columns: tuple[str, ...] = ALL_COLUMNS,
    delay_level_millis: tuple[int, ...] = DELAY_LEVEL_MILLIS_DEFAULT,
    broker_name: str | None = None,
) -> pa.RecordBatch:
    """One Arrow batch of ``columns`` (of ``COMMITLOG_COLUMNS``, in that order) for the records
    starting at ``starts`` in ``a`` (the segment's bytes as uint8; ``buf`` the same bytes, for
    CRCs); ``base_offset`` is the phy offset of ``a[0]``; ``broker_name`` fills the
    ``brokerName`` column (null when None). Only the requested columns are decoded (the length
    arithmetic of every record is always checked)."""
    count = len(starts)
    f, hosts = _fields(a, starts)
    total = f["total_size"].astype(np.int64)
    body_starts = starts + f["header_size"]
    body_len = f["body_len"].astype(np.int64)
    ends = starts + total
    # Every length is checked before it is used to read, so a damaged record cannot make the
    # decoder read outside its own bytes; the batch then fails naming the first such record.
    bad = (body_len < 0) | (body_starts + body_len + 3 > ends)
    body_len[bad] = 0
    v2 = f["magic"] == MAGIC_V2
    topic_len_pos = body_starts + body_len
    topic_len = a[topic_len_pos].astype(np.int8).astype(np.int64)  # v1: signed byte
    if v2.any():
        hi = a[topic_len_pos[v2]].astype(np.int64)
        lo = a[topic_len_pos[v2] + 1].astype(np.int64)
        topic_len[v2] = ((hi << 8) | lo).astype(np.int16)
    topic_starts = topic_len_pos + np.where(v2, 2, 1)
    bad |= (topic_len < 0) | (topic_starts + topic_len + 2 > ends)
    topic_len[bad] = 0
    props_len_pos = topic_starts + topic_len
    props_len = ((a[props_len_pos].astype(np.int64) << 8) | a[props_len_pos + 1]).astype(np.int16).astype(np.int64)
    props_starts = props_len_pos + 2
    bad |= (props_len < 0) | (props_starts + props_len != ends)
    if bad.any():
        where = base_offset + int(starts[np.flatnonzero(bad)[0]])
        raise CorruptSegment(f"{segment}: record at phy offset {where}: length arithmetic does not add up")
    # The whole-record CRC trailer ("__CRC32#" 0x01 <10 digits> 0x02) is not a user property.
    has_trailer = props_len >= PROP_CRC_RESERVED_LEN
    rows = np.flatnonzero(has_trailer)
    if len(rows):
        probe = au.windows(a, len(_CRC_PREFIX), ends[rows] - PROP_CRC_RESERVED_LEN)
        has_trailer[rows] = (probe == _CRC_PREFIX).all(axis=1)
    user_props_len = props_len - np.where(has_trailer, PROP_CRC_RESERVED_LEN, 0)

    wanted = set(columns)
    out: dict[str, pa.Array] = {}
    if wanted & _PROPERTY_COLUMNS:
        strings = {
            c: _PROPERTY_STRINGS[c] for c in _PROPERTY_STRINGS if c in wanted or (c == "tags" and "tagsCode" in wanted)
        }
        # A name found nowhere in the batch's bytes is null throughout, with no parse (so the
        # lite columns of a store without lite messages cost one search per batch).
        lo, hi = (int(starts.min()), int(ends.max())) if count else (0, 0)
        present = tuple(n for n in strings.values() if buf.find(n.encode() + b"\x01", lo, hi) >= 0)
        values: dict[str, pa.Array] = {}
        if present or wanted & {"properties", "keys"}:
            prop_values, prop_offsets = au.buffers_of(au.gather_array(a, props_starts, user_props_len))
            props, values, keys = au.parse_properties(
                prop_values, prop_offsets, "properties" in wanted, present, "keys" in wanted
            )
            out.update({k: v for k, v in (("properties", props), ("keys", keys)) if v is not None})
        out.update({c: values[n] if n in values else pa.nulls(count, pa.string()) for c, n in strings.items()})
        if "liteQueueOffset" in out:
            out["liteQueueOffset"] = au.decimal_int64(out["liteQueueOffset"])
    if "topic" in wanted or "tagsCode" in wanted:
        topic_values, topic_offsets = au.gather(a, topic_starts, topic_len)
        out["topic"] = au.safe_strings(au.string_array(topic_values, topic_offsets))
    if "tagsCode" in wanted:
        out["tagsCode"] = _tags_codes(buf, starts, out["topic"], out["tags"], delay_level_millis)
    if "body" in wanted:
        out["body"] = au.gather_array(a, body_starts, body_len)
    if "crcValid" in wanted:
        out["crcValid"] = (
            pa.array(_check_crcs(buf, a, starts, ends, body_starts, body_len, f["body_crc"], has_trailer), pa.bool_())
            if verify_crc
            else pa.nulls(count, pa.bool_())
        )
    to_us = lambda ms: pa.array(ms.astype(np.int64) * 1000, pa.timestamp("us", tz="UTC"))  # noqa: E731
    simple = {
        "commitLogOffset": lambda: pa.array(base_offset + starts, pa.int64()),
        "totalSize": lambda: pa.array(f["total_size"], pa.int32()),
        "magicCode": lambda: pa.array(f["magic"].view(np.int32), pa.int32()),
        "bodyCrc": lambda: pa.array(f["body_crc"], pa.int32()),
        "queueId": lambda: pa.array(f["queue_id"], pa.int32()),
        "flag": lambda: pa.array(f["flag"], pa.int32()),
        "queueOffset": lambda: pa.array(f["queue_offset"], pa.int64()),
        "sysFlag": lambda: pa.array(f["sys_flag"], pa.int32()),
        "bornTimestamp": lambda: to_us(f["born_ts"]),
        "bornHost": lambda: au.host_column(hosts["born_ip"], f["born_port"]),
        "storeTimestamp": lambda: to_us(f["store_ts"]),
        "storeHost": lambda: au.host_column(hosts["store_ip"], f["store_port"]),
        "reconsumeTimes": lambda: pa.array(f["reconsume"], pa.int32()),
        "preparedTransactionOffset": lambda: pa.array(f["prepared"], pa.int64()),
        "segment": lambda: au.constant_strings(segment, count),
        "brokerName": lambda: _broker_names(broker_name, count),
    }
    arrays = [out[name] if name in out else simple[name]() for name in columns]
    return pa.RecordBatch.from_arrays(arrays, schema=commitlog_schema(columns))


@lru_cache(maxsize=64)
def commitlog_schema(columns: tuple[str, ...]) -> pa.Schema:
    full = arrow_schema(COMMITLOG_COLUMNS)
    return pa.schema([full.field(name) for name in columns])


def _check_crcs(
    buf: RecordBytes,
    a: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    body_starts: np.ndarray,
    body_len: np.ndarray,
    body_crc: np.ndarray,
    has_trailer: np.ndarray,
) -> np.ndarray:
    """Body CRC (crc32 & 0x7FFFFFFF, 0 for an empty body) and, where the trailer is present,
    the whole-record CRC (digits least-significant first) of every record."""
    view = memoryview(buf)
    crc32 = zlib.crc32
    body = np.fromiter(
        (crc32(view[s : s + n]) & 0x7FFFFFFF if n else 0 for s, n in zip(body_starts.tolist(), body_len.tolist())),
        np.int64,
        len(starts),
    )
    valid = body == body_crc.astype(np.int64)
    rows = np.flatnonzero(has_trailer)
    if len(rows):
        digits = au.windows(a, 10, ends[rows] - 11).astype(np.int64) - ord("0")
        stored = (digits * _POW10).sum(axis=1)
        whole = np.fromiter(
            (
                crc32(view[s : e - PROP_CRC_RESERVED_LEN]) & 0x7FFFFFFF
                for s, e in zip(starts[rows].tolist(), ends[rows].tolist())
            ),
            np.int64,
            len(rows),
        )
        valid[rows] &= whole == stored
    view.release()
    return valid


# -- files ------------------------------------------------------------------------------------


def segment_files(path: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """(start phy offset, path) of each CommitLog segment under a store root or commitlog dir."""
    root = Path(path)
    directory = root / "commitlog" if (root / "commitlog").is_dir() else root
    if not directory.is_dir():
        raise FileNotFoundError(f"no CommitLog directory at {root} (expected STORE_ROOT/commitlog)")
    return sorted(
        (int(p.name), p)
        for p in directory.iterdir()
        if p.is_file() and len(p.name) == SEGMENT_NAME_LENGTH and p.name.isdigit()
    )


def read_segment(
    path: Path,
    file_from_offset: int,
    from_offset: int | None = None,
    to_offset: int | None = None,
    batch_rows: int = BATCH_ROWS_DEFAULT,
    verify_crc: bool = False,
    columns: tuple[str, ...] = ALL_COLUMNS,
    delay_level_millis: tuple[int, ...] = DELAY_LEVEL_MILLIS_DEFAULT,
    broker_name: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of the records of one segment that start in [from_offset, to_offset) (phy
    offsets; default the whole segment). A range not starting at the segment start is
    re-synchronised with ``find_record_start``."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return
        with mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ) as mm:
            a = np.frombuffer(mm, np.uint8)
            try:
                pos = 0 if from_offset is None else max(0, from_offset - file_from_offset)
                if pos > 0:
                    pos = find_record_start(mm, pos, size, file_from_offset)
                stop = size if to_offset is None else max(0, min(size, to_offset - file_from_offset))
                while True:
                    starts, pos, why = walk_array(mm, a, pos, size, stop, batch_rows)
                    if len(starts):
                        yield decode_batch(
                            mm,
                            a,
                            starts,
                            file_from_offset,
                            path.name,
                            verify_crc,
                            columns,
                            delay_level_millis,
                            broker_name,
                        )
                    if why != "more":
                        break
            finally:
                del a


def _broker_names(broker_name: str | None, count: int) -> pa.Array:
    return pa.nulls(count, pa.string()) if broker_name is None else au.constant_strings(broker_name, count)


def read_consume_queue(
    path: Path,
    topic: str,
    queue_id: int,
    file_from_offset: int,
    batch_rows: int = 262_144,
    broker_name: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of the valid units of one ConsumeQueue file (it ends at the first unit that is
    not valid, ``phy_offset < 0 or size <= 0``; blank units before a queue's start are
    skipped)."""
    data = np.fromfile(path, dtype=CQ_DTYPE)
    bad = np.flatnonzero((data["phy_offset"] < 0) | (data["size"] <= 0))
    count = int(bad[0]) if len(bad) else len(data)
    first_offset = file_from_offset // CQ_UNIT_SIZE_BYTES
    schema = arrow_schema(CONSUMEQUEUE_COLUMNS)
    for begin in range(0, count, batch_rows):
        units = data[begin : min(count, begin + batch_rows)]
        keep = ~((units["phy_offset"] == 0) & (units["size"] == 0x7FFFFFFF))  # the blank unit
        units = units[keep]
        offsets = (first_offset + begin + np.flatnonzero(keep)).astype(np.int64)
        n = len(units)
        yield pa.RecordBatch.from_arrays(
            [
                au.constant_strings(topic, n),
                _broker_names(broker_name, n),
                pa.array(np.full(n, queue_id, np.int32)),
                pa.array(offsets),
                pa.array(units["phy_offset"].astype(np.int64)),
                pa.array(units["size"].astype(np.int32)),
                pa.array(units["tags_code"].astype(np.int64)),
            ],
            schema=schema,
        )
