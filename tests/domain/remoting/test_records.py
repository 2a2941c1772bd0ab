"""services/domain/remoting/records.py: STOREHOST rewritten in concatenated records, every other
byte as stored."""

from __future__ import annotations

import socket

from services.domain.format.commitlog_format import MessageRecord, decode_record, encode_record
from services.domain.remoting.records import ipv4_host, with_store_host


def record(body: bytes, born_v6: bool = False, store_v6: bool = False) -> bytes:
    born = (socket.inet_pton(socket.AF_INET6, "::1"), 1) if born_v6 else (b"\x0a\x00\x00\x01", 1)
    store = (socket.inet_pton(socket.AF_INET6, "::2"), 2) if store_v6 else (b"\x7f\x00\x00\x01", 10911)
    return encode_record(MessageRecord("T", 0, body, {"K": "V"}, born_host=born, store_host=store, phy_offset=7))


def decoded(body: bytes) -> list[MessageRecord]:
    out, pos = [], 0
    while pos < len(body):
        rec = decode_record(body, pos, len(body), check_crc=False)
        assert isinstance(rec, MessageRecord)
        out.append(rec)
        pos += rec.total_size
    return out


def test_each_ipv4_store_host_names_the_door() -> None:
    door = ipv4_host("192.168.1.9:9876")
    records = [record(b"a"), record(b"bb", born_v6=True), record(b"ccc", store_v6=True)]
    out = decoded(with_store_host(records, door))
    assert [r.body for r in out] == [b"a", b"bb", b"ccc"]
    assert out[0].store_host == out[1].store_host == (socket.inet_aton("192.168.1.9"), 9876)
    assert out[2].store_host == (socket.inet_pton(socket.AF_INET6, "::2"), 2)  # sizes cannot change
    assert [r.born_host for r in out] == [r.born_host for r in decoded(b"".join(records))]


def test_no_address_or_no_records_leave_the_bytes() -> None:
    records = [record(b"x")]
    assert with_store_host(records, None) == records[0]
    assert with_store_host([], ipv4_host("1.2.3.4:5")) == b""
    assert ipv4_host("[::1]:9876") is None and ipv4_host("host.example:1") is None
