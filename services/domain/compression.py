"""Compressed message bodies: what a record's SYSFLAG says about its body (RocketMQ's
``MessageSysFlag`` and ``CompressionType``; ../shared/docs/remoting.md §2.2 "sysFlag"), and the
translations between the two doors' ways of compressing.

| SYSFLAG bits | meaning |
|---|---|
| 0x1 (COMPRESSED) | the body is compressed |
| 0x700 (bits 8-10) | the compression: 1 LZ4 (frame format), 2 ZSTD (frame), 3 ZLIB; 0 is ZLIB (clients before the field existed) |

Remoting producers compress bodies themselves (the Java client: zlib level 5 over 4 KiB) and
their consumers inflate them, so the store keeps such a body as sent. A v2 client knows only
GZIP (``Encoding.GZIP``; the Java v5 client gzips bodies over 4 MiB). Both are DEFLATE streams
in different wrappers, so the doors re-wrap instead of recompressing:

* a v2 send's GZIP body is stored as ZLIB (``gzip_to_zlib``: the same deflate stream between a
  zlib header and the Adler-32 of the inflated bytes), COMPRESSED with type ZLIB, which every
  remoting consumer inflates;
* a v2 delivery of a ZLIB body gets it as GZIP (``zlib_to_gzip``), of an LZ4 or ZSTD one the
  inflated bytes (``plain_body``).

Each re-wrap inflates once to compute the other wrapper's checksum, in chunks, keeping nothing.
A GZIP body an older pyrmq stored as COMPRESSED type 0 is told apart from zlib by its magic.
"""

from __future__ import annotations

import struct
import zlib

import lz4.frame
import zstandard

SYSFLAG_COMPRESSED = 0x1
COMPRESSION_TYPE_SHIFT = 8
COMPRESSION_TYPE_MASK = 0x7 << COMPRESSION_TYPE_SHIFT
LZ4 = 1
ZSTD = 2
ZLIB = 3
ZLIB_SYSFLAG = SYSFLAG_COMPRESSED | (ZLIB << COMPRESSION_TYPE_SHIFT)
GZIP_MAGIC = b"\x1f\x8b"
_ZLIB_HEADER = b"\x78\x9c"  # deflate, 32 KiB window, default level
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no flags, no mtime, OS unknown
_CHUNK_BYTES = 1 << 20
_FTEXT, _FHCRC, _FEXTRA, _FNAME, _FCOMMENT = 1, 2, 4, 8, 16


class CompressionError(ValueError):
    """A body that does not inflate as its SYSFLAG or encoding says, or inflates past a limit."""


def compression_type(sys_flag: int) -> int:
    return (sys_flag & COMPRESSION_TYPE_MASK) >> COMPRESSION_TYPE_SHIFT


def is_gzip(body: bytes) -> bool:
    return body[:2] == GZIP_MAGIC


def decompress(body: bytes, sys_flag: int, limit_bytes: int) -> bytes:
    """The body before compression, as its SYSFLAG's compression type says; CompressionError
    when it does not inflate or inflates beyond ``limit_bytes``."""
    kind = compression_type(sys_flag)
    try:
        if kind == LZ4:
            out = lz4.frame.LZ4FrameDecompressor().decompress(body, max_length=limit_bytes + 1)
        elif kind == ZSTD:
            out = zstandard.ZstdDecompressor().decompressobj().decompress(body)
        elif kind in (ZLIB, 0):
            out = zlib.decompressobj().decompress(body, limit_bytes + 1)
        else:
            raise CompressionError(f"unknown compression type {kind}")
    except (zlib.error, RuntimeError, zstandard.ZstdError) as exc:
        raise CompressionError(f"the body does not inflate as compression type {kind}: {exc}") from None
    if len(out) > limit_bytes:
        raise CompressionError(f"the body inflates beyond {limit_bytes} bytes")
    return out


def plain_body(body: bytes, sys_flag: int, limit_bytes: int) -> tuple[bytes, bool]:
    """(body, gzip): what a v2 consumer gets for a stored body. ZLIB is re-wrapped as GZIP, LZ4
    and ZSTD inflated (up to ``limit_bytes``), an old GZIP one kept; one that does not decode is
    handed over as stored, GZIP-flagged (the client reports it)."""
    if not sys_flag & SYSFLAG_COMPRESSED:
        return body, False
    kind = compression_type(sys_flag)
    try:
        if kind == 0 and is_gzip(body):
            return body, True
        if kind in (0, ZLIB):
            return zlib_to_gzip(body), True
        return decompress(body, sys_flag, limit_bytes), False
    except CompressionError:
        return body, True


def _inflate_raw(stream: memoryview, wbits: int) -> tuple[int, int, int, bytes]:
    """Inflate a deflate stream in chunks: (crc32, adler32, inflated size, bytes after it)."""
    inflater = zlib.decompressobj(wbits)
    crc, adler, size = 0, 1, 0
    pending = stream
    try:
        while True:
            chunk = inflater.decompress(pending, _CHUNK_BYTES)
            crc = zlib.crc32(chunk, crc)
            adler = zlib.adler32(chunk, adler)
            size += len(chunk)
            pending = memoryview(inflater.unconsumed_tail)
            if inflater.eof or not chunk and not pending:
                break
    except zlib.error as exc:
        raise CompressionError(f"the deflate stream is corrupt: {exc}") from None
    if not inflater.eof:
        raise CompressionError("the deflate stream is truncated")
    return crc, adler, size, inflater.unused_data


def gzip_to_zlib(body: bytes) -> bytes:
    """A GZIP member as a zlib stream of the same deflate data (CompressionError if it is not
    one GZIP member with a matching CRC and size)."""
    view = memoryview(body)
    start = _gzip_header_size(view)
    crc, adler, size, rest = _inflate_raw(view[start:], -15)
    if len(rest) < 8:
        raise CompressionError("the GZIP trailer is missing")
    want_crc, want_size = struct.unpack_from("<II", rest, 0)
    if want_crc != crc or want_size != size & 0xFFFFFFFF:
        raise CompressionError("the GZIP trailer does not match the data")
    deflate = view[start : len(body) - len(rest)]
    return b"".join((_ZLIB_HEADER, deflate, struct.pack(">I", adler)))


def zlib_to_gzip(body: bytes) -> bytes:
    """A zlib stream as a GZIP member of the same deflate data."""
    view = memoryview(body)
    if len(view) < 6 or (view[0] & 0x0F) != 8 or ((view[0] << 8) | view[1]) % 31 or view[1] & 0x20:
        raise CompressionError("not a zlib stream")
    crc, adler, size, rest = _inflate_raw(view[2:], -15)
    if len(rest) < 4 or struct.unpack_from(">I", rest, 0)[0] != adler:
        raise CompressionError("the zlib Adler-32 does not match the data")
    deflate = view[2 : len(body) - len(rest)]
    return b"".join((_GZIP_HEADER, deflate, struct.pack("<II", crc, size & 0xFFFFFFFF)))


def _gzip_header_size(view: memoryview) -> int:
    """The length of a GZIP member's header (RFC 1952 §2.3)."""
    if len(view) < 10 or view[:2] != GZIP_MAGIC or view[2] != 8:
        raise CompressionError("not a GZIP (deflate) stream")
    flags = view[3]
    pos = 10
    try:
        if flags & _FEXTRA:
            pos += 2 + int.from_bytes(view[pos : pos + 2], "little")
        for flag in (_FNAME, _FCOMMENT):
            if flags & flag:
                pos = view.tobytes().index(b"\x00", pos) + 1
        if flags & _FHCRC:
            pos += 2
    except ValueError:
        raise CompressionError("the GZIP header is truncated") from None
    if pos > len(view):
        raise CompressionError("the GZIP header is truncated")
    return pos
