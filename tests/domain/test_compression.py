"""services/domain/compression.py: re-wrapping DEFLATE between GZIP and ZLIB, and what a v2
consumer gets for each compressed body a remoting producer may store."""

from __future__ import annotations

import gzip
import io
import random
import zlib

import lz4.frame
import pytest
import zstandard

from services.domain.compression import CompressionError, gzip_to_zlib, plain_body, zlib_to_gzip

DATA = random.Random(29).randbytes(3000) + b"a" * 200_000  # the same bytes in every worker
LIMIT = 4 << 20


def test_gzip_and_zlib_rewrap_the_same_deflate_data() -> None:
    assert zlib.decompress(gzip_to_zlib(gzip.compress(DATA, 5))) == DATA
    assert gzip.decompress(zlib_to_gzip(zlib.compress(DATA, 5))) == DATA
    member = io.BytesIO()
    with gzip.GzipFile(filename="named.txt", mode="wb", fileobj=member) as out:  # FNAME in the header
        out.write(DATA)
    assert zlib.decompress(gzip_to_zlib(member.getvalue())) == DATA


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not gzip at all",
        gzip.compress(DATA, mtime=0)[:-3],
        gzip.compress(DATA, mtime=0)[:50],
        b"\x1f\x8b\x08\x04\x00",
    ],
    ids=["empty", "not gzip", "no trailer", "truncated", "header cut"],
)
def test_what_is_not_one_whole_gzip_member_is_refused(body: bytes) -> None:
    with pytest.raises(CompressionError):
        gzip_to_zlib(body)


def test_a_v2_consumer_gets_each_compression_as_it_can_read_it() -> None:
    zlib_body = zlib.compress(DATA, 5)
    for sys_flag in (0x1 | 3 << 8, 0x1):  # ZLIB, and type 0 (zlib for old clients)
        body, gzipped = plain_body(zlib_body, sys_flag, LIMIT)
        assert gzipped and gzip.decompress(body) == DATA
    assert plain_body(lz4.frame.compress(DATA), 0x1 | 1 << 8, LIMIT) == (DATA, False)
    assert plain_body(zstandard.ZstdCompressor().compress(DATA), 0x1 | 2 << 8, LIMIT) == (DATA, False)
    old_gzip = gzip.compress(DATA)
    assert plain_body(old_gzip, 0x1, LIMIT) == (old_gzip, True)  # stored by an older pyrmq
    assert plain_body(b"raw", 0, LIMIT) == (b"raw", False)
    assert plain_body(b"garbage", 0x1 | 3 << 8, LIMIT) == (b"garbage", True)  # as stored: the client reports it


def test_inflating_stops_at_the_limit() -> None:
    body, gzipped = plain_body(lz4.frame.compress(DATA), 0x1 | 1 << 8, 1000)
    assert gzipped and body == lz4.frame.compress(DATA)
