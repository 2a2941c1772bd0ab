"""The body of SEND_BATCH_MESSAGE 320 (../shared/docs/remoting.md §2.2 "SEND_BATCH_MESSAGE 320";
RocketMQ's ``MessageDecoder.encodeMessages`` / ``decodeMessages``): the inner messages, one after
the other, each big-endian:

| # | offset | size | field | notes |
|---|---|---|---|---|
| 1 | 0 | 4 | TOTALSIZE | this message's bytes, this field included |
| 2 | 4 | 4 | MAGICCODE | 0 (clients write 0; not read) |
| 3 | 8 | 4 | BODYCRC | 0 (clients write 0; not read) |
| 4 | 12 | 4 | FLAG | the message's user flag |
| 5 | 16 | 4 + B | BODY | int32 length, then the body |
| 6 | 20 + B | 2 + P | PROPERTIES | int16 length, then the ``\\x01``/``\\x02`` string (properties_format) |

TOTALSIZE = 4+4+4+4 + 4+B + 2+P = 22 + B + P bytes.

Java's decoder reads the lengths and skips TOTALSIZE; every client we know (Java, Go, the C++
client) writes TOTALSIZE = 22 + B + P, so a message whose TOTALSIZE disagrees is refused here as
garbage, as are a negative length and a message that runs past the body's end. The refusal is a
:class:`BatchFormatError` (a ValueError) whose text says which message and byte; the door answers
it MESSAGE_ILLEGAL (13). Each inner message carries its own ``UNIQ_KEY`` property.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from services.domain.format.properties_format import decode_properties, encode_properties

_HEAD = struct.Struct(">iiiii")  # TOTALSIZE MAGICCODE BODYCRC FLAG BODYLEN = 20 bytes
_PROPS_LEN = struct.Struct(">h")  # PROPERTIES length = 2 bytes
MESSAGE_OVERHEAD_BYTES = _HEAD.size + _PROPS_LEN.size  # 22: TOTALSIZE = 22 + B + P
assert MESSAGE_OVERHEAD_BYTES == 22
PROPERTIES_LEN_MAX = 32767  # int16

BatchMessage = tuple[int, bytes, dict[str, str]]  # (flag, body, properties)
RawBatchMessage = tuple[int, bytes, bytes]  # (flag, body, properties bytes, undecoded)


class BatchFormatError(ValueError):
    """A batch body that does not decode: truncated, a negative or inconsistent length.

    ``index``: the inner message's position; ``offset``: where it starts in the body."""

    def __init__(self, message: str, index: int, offset: int) -> None:
        super().__init__(f"batch message {index} at byte {offset}: {message}")
        self.index = index
        self.offset = offset


def decode_batch_raw(body: bytes | bytearray | memoryview, max_messages: int | None = None) -> list[RawBatchMessage]:
    """The inner messages as ``(flag, body, properties bytes)``, properties left undecoded.

    An empty body is an empty list (the caller decides whether that is legal). More than
    ``max_messages`` messages raises BatchFormatError at the first one past the limit.
    """
    view = memoryview(body)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view)
    head_size = _HEAD.size
    unpack_head = _HEAD.unpack_from
    unpack_props = _PROPS_LEN.unpack_from
    limit = end + 1 if max_messages is None else max_messages
    out: list[RawBatchMessage] = []
    pos = 0
    index = 0
    while pos < end:
        if index >= limit:
            raise BatchFormatError(f"more than {limit} messages in one batch", index, pos)
        if end - pos < MESSAGE_OVERHEAD_BYTES:
            raise BatchFormatError(f"truncated: {end - pos} bytes left, a message takes at least 22", index, pos)
        total_size, _magic, _crc, flag, body_len = unpack_head(view, pos)
        body_at = pos + head_size
        if body_len < 0 or body_len > end - body_at - _PROPS_LEN.size:
            raise BatchFormatError(f"body length {body_len} does not fit in the {end - pos} bytes left", index, pos)
        props_len_at = body_at + body_len
        (props_len,) = unpack_props(view, props_len_at)
        props_at = props_len_at + 2
        if props_len < 0 or props_len > end - props_at:
            raise BatchFormatError(
                f"properties length {props_len} does not fit in the {end - props_at} bytes left", index, pos
            )
        size = MESSAGE_OVERHEAD_BYTES + body_len + props_len
        if total_size != size:
            raise BatchFormatError(f"TOTALSIZE {total_size} but its fields take {size} bytes", index, pos)
        out.append((flag, view[body_at:props_len_at].tobytes(), view[props_at : props_at + props_len].tobytes()))
        pos += size
        index += 1
    return out


def decode_batch(body: bytes | bytearray | memoryview, max_messages: int | None = None) -> list[BatchMessage]:
    """The inner messages as ``(flag, body, properties)``, properties decoded as Java's
    ``string2messageProperties`` does (services/domain/format/properties_format.py).

    Raises BatchFormatError (a ValueError) for a truncated or garbled body; see
    :func:`decode_batch_raw`."""
    decode = decode_properties
    return [(flag, data, decode(props) if props else {}) for flag, data, props in decode_batch_raw(body, max_messages)]


def encode_batch_message(flag: int, body: bytes, properties: Mapping[str, str] | bytes) -> bytes:
    """One inner message (the client's ``MessageDecoder.encodeMessage``); ``properties`` as a
    mapping or already encoded."""
    props = properties if isinstance(properties, bytes) else encode_properties(dict(properties))
    if len(props) > PROPERTIES_LEN_MAX:
        raise ValueError(f"properties take {len(props)} bytes, more than {PROPERTIES_LEN_MAX}")
    size = MESSAGE_OVERHEAD_BYTES + len(body) + len(props)
    return b"".join((_HEAD.pack(size, 0, 0, flag, len(body)), body, _PROPS_LEN.pack(len(props)), props))


def encode_batch(messages: Iterable[tuple[int, bytes, Mapping[str, str] | bytes]]) -> bytes:
    """A SEND_BATCH_MESSAGE body: the messages ``(flag, body, properties)`` concatenated."""
    return b"".join([encode_batch_message(flag, body, props) for flag, body, props in messages])
