"""services/domain/format/pop_journal_format.py: records round-trip; malformed bodies are refused
with PopJournalFormatError, never another exception."""

from __future__ import annotations

import json

import pytest

from services.domain.format import pop_journal_format as fmt

DELIVERY = fmt.Delivery("g", "%RETRY%g_T", 0, "T", False, 7, 2, 41, 1_700_000_000_000, 30_000, "ab12cd34", True)


def test_an_ops_record_round_trips():
    record = fmt.OpsRecord(
        12,
        (
            (DELIVERY,),
            (fmt.Finished("g", "T", 3, 5, 6, True), fmt.Finished("g", "T", 3, 9, 6, False)),
            fmt.Reset("g", "%LMQ%$P$l", 0, 4),
        ),
    )
    body = fmt.encode_ops(record)
    assert fmt.decode(fmt.TAG_OPS, body) == record
    doc = json.loads(body)
    assert doc["v"] == 1 and doc["sn"] == 12 and [op[0] for op in doc["ops"]] == ["d", "f", "r"]


def test_a_snapshot_part_round_trips():
    image = fmt.QueueImage("g", "T", 1, 5, (7, 9), (DELIVERY,), ())
    part = fmt.SnapshotPart(1, 3, 99, (image,))
    assert fmt.decode(fmt.TAG_SNAPSHOT, fmt.encode_snapshot(part)) == part


@pytest.mark.parametrize(
    ("tag", "body"),
    [
        (fmt.TAG_OPS, b"\xff"),
        (fmt.TAG_OPS, b"[]"),
        (fmt.TAG_OPS, b'{"v":2,"sn":0,"ops":[]}'),
        (fmt.TAG_OPS, b'{"v":1,"sn":"0","ops":[]}'),
        (fmt.TAG_OPS, b'{"v":1,"sn":0,"ops":[["x"]]}'),
        (fmt.TAG_OPS, b'{"v":1,"sn":0,"ops":[["d",[1,2]]]}'),
        (fmt.TAG_OPS, b'{"v":1,"sn":0,"ops":[["f",["g","T",0,true,1,1]]]}'),
        (fmt.TAG_OPS, b'{"v":1,"sn":0,"ops":[["f",["g","T",0,1]]]}'),
        (fmt.TAG_OPS, b'{"v":1,"sn":0,"ops":[["r","g","T",0]]}'),
        (fmt.TAG_SNAPSHOT, b'{"v":1,"part":0,"parts":1,"seq":0,"qs":[["g"]]}'),
        ("other", b'{"v":1,"sn":0,"ops":[]}'),
    ],
)
def test_a_malformed_record_is_refused(tag, body):
    with pytest.raises(fmt.PopJournalFormatError):
        fmt.decode(tag, body)


def test_a_finished_op_written_before_the_acked_flag_reads_as_acked():
    record = fmt.decode(fmt.TAG_OPS, b'{"v":1,"sn":0,"ops":[["f",["g","T",0,7,8]]]}')
    assert isinstance(record, fmt.OpsRecord) and record.ops == ((fmt.Finished("g", "T", 0, 7, 8, True),),)
