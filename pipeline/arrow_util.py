"""Vectorised byte gathering and property parsing for the Arrow decoders (numpy + pyarrow).

Everything here works on a whole batch at once: no Python loop over rows on the common path.

* ``gather(a, starts, lengths)``: the byte ranges ``a[s:s+n]`` concatenated, with Arrow-style
  offsets, by one fancy index (``repeat`` of the range starts plus a running ``arange``).
* ``parse_properties(values, offsets)``: RocketMQ property strings (``name 0x01 value 0x02``
  ..., properties_format.py) into an Arrow ``map<string,string>`` plus a string column per
  property asked for (TAGS, UNIQ_KEY, __LITE_TOPIC, ...) and KEYS (split on spaces). A batch
  in which any string is not well formed (an entry without exactly one 0x01, an empty name or
  value, a missing final 0x02) is decoded row by row with the store's own
  ``decode_properties`` instead, which has Java's exact semantics.
* ``host_column``: the born / store addresses as "ip:port" strings, each distinct address
  formatted once.
"""

from __future__ import annotations

import socket
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from services.domain.format.properties_format import KEY_SEPARATOR, KEYS, TAGS, UNIQ_KEY, decode_properties

_EMPTY_I64 = np.zeros(0, np.int64)
_arange = np.arange(1 << 20, dtype=np.int64)  # grown on demand, never written to


def arange(count: int) -> np.ndarray:
    """``np.arange(count)`` (int64) without allocating it each time (read-only)."""
    global _arange
    if count > len(_arange):
        _arange = np.arange(max(count, 2 * len(_arange)), dtype=np.int64)
    return _arange[:count]


def offsets_of(lengths: np.ndarray) -> np.ndarray:
    """[0, l0, l0+l1, ...] as int64."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def windows(a: np.ndarray, width: int, starts: np.ndarray) -> np.ndarray:
    """``a[s:s+width]`` for every start, as an (n, width) uint8 copy: one row index per start
    over a strided view of all windows (no (n, width) index array)."""
    view = np.lib.stride_tricks.as_strided(
        a, shape=(max(0, len(a) - width + 1), width), strides=(1, 1), writeable=False
    )
    return view[starts]


def gather(a: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bytes of every range concatenated, int64 offsets into them)."""
    lengths = lengths.astype(np.int64, copy=False)
    offsets = offsets_of(lengths)
    total = int(offsets[-1])
    if total == 0:
        return np.zeros(0, np.uint8), offsets
    index = np.repeat(starts.astype(np.int64, copy=False) - offsets[:-1], lengths)
    index += arange(total)
    return a[index], offsets


VIEW_MIN_MEAN_LENGTH = 24  # from this mean length on, ``gather_array`` copies in C++ (views)


def gather_array(a: np.ndarray, starts: np.ndarray, lengths: np.ndarray, kind: pa.DataType | None = None) -> pa.Array:
    """The byte ranges ``a[s:s+n]`` as an Arrow binary (or ``kind``) array. Long ranges are
    described as an Arrow ``binary_view`` array over ``a`` (16 bytes per row, no per-byte
    index) that Arrow's cast copies into a plain binary array; short ones use ``gather``."""
    kind = kind or pa.binary()
    lengths = lengths.astype(np.int64, copy=False)
    count = len(starts)
    if (
        count == 0
        or len(a) >= 1 << 31
        or int(lengths.sum()) < VIEW_MIN_MEAN_LENGTH * count
        or int(starts.max()) + 12 > len(a)
    ):
        return binary_array(*gather(a, starts, lengths), kind)
    views = np.zeros((count, 16), np.uint8)
    words = views.view(np.int32)
    words[:, 0] = lengths
    views[:, 4:8] = windows(a, 4, starts)  # the prefix of a long value
    words[:, 3] = starts  # buffer 0, offset
    small = np.flatnonzero(lengths <= 12)
    if len(small):  # up to 12 bytes are inline, zero-padded
        inline = windows(a, 12, starts[small])
        inline[_BYTE_INDEX12 >= lengths[small, None]] = 0
        views[small, 4:] = inline
    array = pa.Array.from_buffers(pa.binary_view(), count, [None, pa.py_buffer(views), pa.py_buffer(a)])
    array = array.cast(pa.binary())
    return array if kind == pa.binary() else array.view(kind)


def buffers_of(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(values as uint8, int64 offsets) of a binary array without nulls, as ``gather`` gives."""
    _, offsets, values = array.buffers()
    offsets = np.frombuffer(offsets, np.int32, len(array) + 1, array.offset * 4).astype(np.int64)
    data = np.frombuffer(values, np.uint8) if values is not None else np.zeros(0, np.uint8)
    return data, offsets


_BYTE_INDEX12 = np.arange(12)


def binary_array(
    values: np.ndarray, offsets: np.ndarray, kind: pa.DataType | None = None, valid: np.ndarray | None = None
) -> pa.Array:
    """An Arrow binary/string array over ``values`` (uint8) and int64 offsets (< 2 GiB)."""
    kind = kind or pa.binary()
    count = len(offsets) - 1
    validity = None
    nulls = 0
    if valid is not None and not valid.all():
        validity = pa.py_buffer(np.packbits(valid.astype(np.uint8), bitorder="little"))
        nulls = int(count - valid.sum())
    return pa.Array.from_buffers(
        kind, count, [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(values)], null_count=nulls
    )


def string_array(values: np.ndarray, offsets: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    # Arrow validates UTF-8 lazily; Spark decodes it as Java strings. Invalid bytes are rare
    # (the store writes UTF-8); ``safe_strings`` repairs them.
    return binary_array(values, offsets, pa.string(), valid)


def safe_strings(array: pa.Array) -> pa.Array:
    """``array`` if its bytes are valid UTF-8, else the same strings decoded with replacement
    characters (as the store's decoder does)."""
    try:
        array.validate(full=True)
        return array
    except pa.ArrowInvalid:
        raw = array.cast(pa.binary()).to_pylist()
        return pa.array([None if v is None else v.decode("utf-8", "replace") for v in raw], pa.string())


def constant_strings(text: str, count: int) -> pa.Array:
    data = text.encode("utf-8")
    values = np.frombuffer(data * count, np.uint8) if count else np.zeros(0, np.uint8)
    return string_array(values, np.arange(count + 1, dtype=np.int64) * len(data))


_INT64_MAX_TEXT = str(2**63 - 1)


def decimal_int64(texts: pa.Array) -> pa.Array:
    """Strings of 1-19 decimal digits as int64 (leading zeros allowed: INNER_MULTI_QUEUE_OFFSET
    is 19 zero-padded digits); null where a string is null, anything else, or past int64 (a
    RocketMQ LMQ record dispatched to several queues has ``"3,7"``)."""
    ok = pc.fill_null(
        pc.and_(
            pc.match_substring_regex(texts, r"^[0-9]{1,19}$"),
            pc.or_(pc.less(pc.utf8_length(texts), 19), pc.less_equal(texts, _INT64_MAX_TEXT)),
        ),
        False,
    )
    numbers = pc.cast(pc.if_else(ok, texts, "0"), pa.int64())
    return pc.if_else(ok, numbers, pa.scalar(None, pa.int64()))


class _KeyProbe:
    """Cheap key equality for the few property names the decoders look up: the length and the
    first and last 4 bytes of every key, read once per batch (a name longer than 8 bytes is
    then compared whole, on the few keys that pass)."""

    def __init__(self, values: np.ndarray, key_starts: np.ndarray, key_lengths: np.ndarray) -> None:
        # A key is followed by 0x01, a value of >= 1 byte and 0x02: 4 bytes from its start exist.
        self.values = values
        self.starts = key_starts
        self.lengths = key_lengths
        self.head = _word(values, key_starts)
        self.tail = _word(values, np.maximum(key_starts, key_starts + key_lengths - 4))

    def matches(self, name: str) -> np.ndarray:
        raw = name.encode("ascii")
        assert len(raw) >= 4, "names of 4 bytes or more: head and tail lie within them"
        head = int.from_bytes(raw[:4], "big")
        tail = int.from_bytes(raw[-4:], "big")
        hits = (self.lengths == len(raw)) & (self.head == head) & (self.tail == tail)
        if len(raw) > 8:
            rows = np.flatnonzero(hits)
            if len(rows):
                whole = windows(self.values, len(raw), self.starts[rows]) == np.frombuffer(raw, np.uint8)
                hits[rows[~whole.all(axis=1)]] = False
        return hits


def _word(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The 4 bytes at each start as a big-endian uint32."""
    return windows(values, 4, starts).view(">u4").ravel()


def parse_properties(
    values: np.ndarray,
    offsets: np.ndarray,
    want_map: bool = True,
    strings: tuple[str, ...] = (TAGS, UNIQ_KEY),
    want_keys: bool = True,
) -> tuple[pa.MapArray | None, dict[str, pa.Array], pa.Array | None]:
    """(map array or None, {name: the value of property ``name`` in each row, null where it
    has none, for each of ``strings``}, KEYS as a list array or None) for ``count`` property
    strings."""
    count = len(offsets) - 1
    ones = np.flatnonzero(values == 1)
    twos = np.flatnonzero(values == 2)
    row_starts = offsets[:-1]
    row_ends = offsets[1:]
    entries_per_row = np.searchsorted(twos, row_ends) - np.searchsorted(twos, row_starts)
    ones_per_row = np.searchsorted(ones, row_ends) - np.searchsorted(ones, row_starts)
    well_formed = len(ones) == len(twos) and np.array_equal(entries_per_row, ones_per_row)
    if well_formed and len(twos):
        # Every row ends with 0x02 (or is empty), and each entry is [start, 0x01) [0x01+1, 0x02).
        nonempty = row_ends > row_starts
        last = values[row_ends[nonempty] - 1] if nonempty.any() else np.zeros(0, np.uint8)
        entry_starts = np.empty(len(twos), np.int64)
        entry_starts[0] = 0
        entry_starts[1:] = twos[:-1] + 1
        first_entry = offsets_of(entries_per_row)[:-1][entries_per_row > 0]
        entry_starts[first_entry] = row_starts[entries_per_row > 0]
        well_formed = (
            bool(np.all(last == 2))
            and bool(np.all(ones < twos))
            and bool(np.all(ones > entry_starts))
            and bool(np.all(twos > ones + 1))
        )
    elif well_formed:
        entry_starts = _EMPTY_I64
        well_formed = not np.any(row_ends > row_starts)  # non-empty without any 0x02
    if not well_formed:
        return _parse_rows(values, offsets, want_map, strings, want_keys)
    key_lengths = ones - entry_starts
    value_starts = ones + 1
    value_lengths = twos - value_starts
    props = None
    if want_map:
        key_values, key_offsets = gather(values, entry_starts, key_lengths)
        item_values, item_offsets = gather(values, value_starts, value_lengths)
        keys = safe_strings(string_array(key_values, key_offsets))
        items = safe_strings(string_array(item_values, item_offsets))
        map_offsets = pa.array(offsets_of(entries_per_row).astype(np.int32))
        props = pa.MapArray.from_arrays(map_offsets, keys, items)
    entry_row = np.repeat(arange(count), entries_per_row)
    probe = _KeyProbe(values, entry_starts, key_lengths)
    ranges: _Ranges = (probe, value_starts, value_lengths, entry_row, count)
    columns = {name: _column_of(name, values, ranges) for name in strings}
    keys = None
    if want_keys:
        key_starts, key_lens, _ = _value_ranges(KEYS, *ranges)
        keys = _split_keys(values, key_starts, key_lens)
    return props, columns, keys


# The entries of a batch: their keys, where each value lies, each entry's row, and the rows.
_Ranges = tuple[_KeyProbe, np.ndarray, np.ndarray, np.ndarray, int]


def _value_ranges(
    name: str, probe: _KeyProbe, value_starts: np.ndarray, value_lengths: np.ndarray, entry_row: np.ndarray, count: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, length, present) per row of the value of property ``name`` (the last one wins)."""
    hit = np.flatnonzero(probe.matches(name))
    starts = np.zeros(count, np.int64)
    lengths = np.zeros(count, np.int64)
    present = np.zeros(count, np.bool_)
    rows = entry_row[hit]
    starts[rows] = value_starts[hit]  # fancy assignment: a later duplicate overwrites
    lengths[rows] = value_lengths[hit]
    present[rows] = True
    return starts, lengths, present


def _column_of(name: str, values: np.ndarray, ranges: _Ranges) -> pa.Array:
    starts, lengths, present = _value_ranges(name, *ranges)
    data, data_offsets = gather(values, starts, lengths)
    return safe_strings(string_array(data, data_offsets, valid=present))


def _split_keys(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """KEYS values split on single spaces, empty words dropped, as list<string> per row."""
    data, data_offsets = gather(values, starts, lengths)
    count = len(lengths)
    spaces = np.flatnonzero(data == 0x20)
    # A word starts at a row start or after a space and ends at the next space or its row's end.
    space_rows = np.searchsorted(data_offsets, spaces, "right") - 1
    word_starts = np.concatenate([data_offsets[:-1], spaces + 1])
    word_rows = np.concatenate([np.arange(count), space_rows])
    next_space = np.searchsorted(spaces, word_starts, "left")
    space_after = np.append(spaces, np.iinfo(np.int64).max)[next_space]
    word_ends = np.minimum(space_after, data_offsets[1:][word_rows])
    keep = word_ends > word_starts
    order = np.argsort(word_starts[keep], kind="stable")
    word_starts, word_ends, word_rows = word_starts[keep][order], word_ends[keep][order], word_rows[keep][order]
    words, word_offsets = gather(data, word_starts, word_ends - word_starts)
    per_row = np.bincount(word_rows, minlength=count)
    return pa.ListArray.from_arrays(
        pa.array(offsets_of(per_row).astype(np.int32)), safe_strings(string_array(words, word_offsets))
    )


def _parse_rows(
    values: np.ndarray, offsets: np.ndarray, want_map: bool, strings: tuple[str, ...], want_keys: bool
) -> tuple[pa.MapArray | None, dict[str, pa.Array], pa.Array | None]:
    """The slow, exact path: ``decode_properties`` row by row."""
    maps: list[list[tuple[str, str]]] = []
    keys: list[list[str]] = []
    columns: dict[str, list[str | None]] = {name: [] for name in strings}
    raw = values.tobytes()
    for i in range(len(offsets) - 1):
        props = decode_properties(raw[offsets[i] : offsets[i + 1]])
        maps.append(list(props.items()))
        for name, column in columns.items():
            column.append(props.get(name))
        keys.append([k for k in props.get(KEYS, "").split(KEY_SEPARATOR) if k])
    return (
        pa.array(maps, pa.map_(pa.string(), pa.string())) if want_map else None,
        {name: pa.array(column, pa.string()) for name, column in columns.items()},
        pa.array(keys, pa.list_(pa.string())) if want_keys else None,
    )


# A batch's born or store addresses: (addresses, their rows, None for every row), one part per
# address width present (IPv4, IPv6).
HostParts: TypeAlias = list[tuple[np.ndarray, np.ndarray | None]]


def host_column(parts: HostParts, ports: np.ndarray) -> pa.Array:
    """The "ip:port" strings of a batch's born or store addresses (``parts``) with ``ports``."""
    if len(parts) == 1 and parts[0][1] is None:
        return _host_strings(parts[0][0], ports)
    arrays, order = [], []
    for column, rows in parts:
        assert rows is not None  # several address widths: each part has its rows
        arrays.append(_host_strings(column, ports[rows]))
        order.append(rows)
    inverse = np.argsort(np.concatenate(order), kind="stable")
    return pa.concat_arrays(arrays).take(pa.array(inverse.astype(np.int32)))


def _host_strings(ip: np.ndarray, port: np.ndarray) -> pa.Array:
    """ "ip:port" strings, formatted once per distinct address (usually one or a few)."""
    ip_bytes = np.ascontiguousarray(ip).view(np.uint8).reshape(len(port), -1)
    keys = np.concatenate([ip_bytes, port.astype(">i4").view(np.uint8).reshape(-1, 4)], axis=1)
    width = keys.shape[1]
    flat = keys.view(">u8").ravel() if width == 8 else keys.view(f"V{width}").ravel()
    if len(flat) and (flat == flat[0]).all():
        uniq, inverse = flat[:1], None
    else:
        uniq, inverse = np.unique(flat, return_inverse=True)
    texts = []
    for key in uniq:
        raw = int(key).to_bytes(8, "big") if width == 8 else bytes(key)
        addr, port_value = raw[:-4], int.from_bytes(raw[-4:], "big", signed=True)
        family = socket.AF_INET if len(addr) == 4 else socket.AF_INET6
        text = socket.inet_ntop(family, addr)
        texts.append(f"{text}:{port_value}" if len(addr) == 4 else f"[{text}]:{port_value}")
    if inverse is None:
        return constant_strings(texts[0], len(flat))
    return pa.array(texts, pa.string()).take(pa.array(inverse.astype(np.int32)))
