"""The golden CommitLog record (docs/store-files.md, section 10): its bytes (``GOLDEN``) and the
``MessageRecord`` that encodes to them (``golden_record``), computed from RocketMQ's layout with
the JavaHash and CRC values checked on a JDK. Used by tests/domain/test_commitlog_format.py and
tests/pipeline/test_decode.py."""

from __future__ import annotations

from services.domain.format.commitlog_format import MessageRecord, host_from_string

GOLDEN_HEX = """
00 00 00 d2 da a3 20 a7 69 c8 65 ed 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 01 8b cf e5 68 00 7f 00 00 01 00 00 d4 31 00 00 01 8b cf e5 68 7b
c0 a8 00 02 00 00 2a 9f 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 0e 48 65 6c 6c 6f 20 52 6f
63 6b 65 74 4d 51 09 54 6f 70 69 63 54 65 73 74 00 60 55 4e 49 51 5f 4b 45 59 01 37 46 30 30 30
30 30 31 30 42 38 43 31 38 42 34 41 41 43 32 37 33 30 41 36 34 42 35 30 30 30 30 02 43 4c 55 53
54 45 52 01 44 65 66 61 75 6c 74 43 6c 75 73 74 65 72 02 54 41 47 53 01 54 61 67 41 02 4b 45 59
53 01 6b 31 20 6b 32 02 57 41 49 54 01 74 72 75 65 02
"""
GOLDEN = bytes.fromhex(GOLDEN_HEX.replace("\n", " "))


def golden_record() -> MessageRecord:
    # Producer order (TAGS, KEYS, WAIT), then the broker adds UNIQ_KEY and CLUSTER.
    props = {
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "WAIT": "true",
        "UNIQ_KEY": "7F0000010B8C18B4AAC2730A64B50000",
        "CLUSTER": "DefaultCluster",
    }
    return MessageRecord(
        topic="TopicTest",
        queue_id=0,
        body=b"Hello RocketMQ",
        properties=props,
        born_timestamp_ms=1700000000000,
        born_host=host_from_string("127.0.0.1:54321"),
        store_timestamp_ms=1700000000123,
        store_host=host_from_string("192.168.0.2:10911"),
    )
