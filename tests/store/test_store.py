"""FileStore behaviour through its core API."""

from __future__ import annotations

import os

import pytest

from services.domain.format.commitlog_format import MessageRecord, decode_record
from services.domain.format.java_compat import java_string_hash
from services.domain.statuses import GetStatus, PutStatus
from services.store.config import FlushMode
from tests.support.filestore import message


def wait_dispatched(store):
    store.reput.run_once()


def test_put_then_get_round_trip(make_store):
    store = make_store()
    results = store.put_messages([message(body=b"m%d" % i, tags="a") for i in range(5)])
    assert [r.status for r in results] == [PutStatus.PUT_OK] * 5
    assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
    assert results[1].phy_offset == results[0].phy_offset + results[0].wrote_bytes
    wait_dispatched(store)
    got = store.get_messages("TopicTest", 0, 0, max_count=10)
    assert got.status is GetStatus.FOUND
    assert [m.body for m in got.messages] == [b"m%d" % i for i in range(5)]
    assert got.next_begin_offset == 5 and got.min_offset == 0 and got.max_offset == 5
    first = got.messages[0]
    assert first.offset_msg_id == results[0].offset_msg_id
    assert store.look_message_by_offset_msg_id(results[2].offset_msg_id).body == b"m2"
    assert store.look_message_by_phy_offset(results[3].phy_offset).queue_offset == 3


def test_get_statuses(make_store):
    store = make_store()
    assert store.get_messages("nope", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    store.put_messages([message(queue_id=1) for _ in range(3)])
    wait_dispatched(store)
    assert store.get_messages("TopicTest", 1, 3).status is GetStatus.OFFSET_OVERFLOW_ONE
    bad = store.get_messages("TopicTest", 1, 9)
    assert bad.status is GetStatus.OFFSET_OVERFLOW_BADLY and bad.next_begin_offset == 3
    assert store.get_messages("TopicTest", 1, 1, max_count=1).next_begin_offset == 2


def test_queue_that_starts_past_zero_reads_offset_too_small(make_store):
    store = make_store(consume_queue_units_per_file=8)
    store.put_messages([message() for _ in range(20)])
    wait_dispatched(store)
    cq = store.cq_store.find("TopicTest", 0)
    assert len(cq.mfq.files) == 3
    cq.min_logic_offset = 8 * 20  # as after retention of the first file
    got = store.get_messages("TopicTest", 0, 2)
    assert got.status is GetStatus.OFFSET_TOO_SMALL and got.next_begin_offset == 8


def test_tag_filter_by_hash(make_store):
    store = make_store()
    store.put_messages([message(tags="a" if i % 3 else "b", body=b"%d" % i) for i in range(30)])
    wait_dispatched(store)
    got = store.get_messages("TopicTest", 0, 0, max_count=32, tags_codes=frozenset({java_string_hash("b")}))
    assert [m.body for m in got.messages] == [b"%d" % i for i in range(0, 30, 3)]
    assert got.next_begin_offset == 30
    none = store.get_messages("TopicTest", 0, 0, tags_codes=frozenset({java_string_hash("zzz")}))
    assert none.status is GetStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 30


def test_max_bytes_limits_a_read(make_store):
    store = make_store()
    store.put_messages([message(body=b"x" * 1000) for _ in range(10)])
    wait_dispatched(store)
    got = store.get_messages("TopicTest", 0, 0, max_count=10, max_bytes=3500)
    assert len(got.raw_messages) == 3 and got.next_begin_offset == 3


def test_segments_roll_with_a_blank_record(make_store):
    store = make_store()
    body = b"y" * 3000
    results = store.put_messages([message(body=body) for _ in range(60)])
    assert all(r.ok for r in results)
    files = store.commitlog.mfq.files
    assert len(files) >= 3
    first = files[0]
    last_in_first = max((r for r in results if r.phy_offset < first.file_end_offset), key=lambda r: r.phy_offset)
    end = last_in_first.phy_offset + last_in_first.wrote_bytes
    left = first.file_size - end
    assert first.mm[end : end + 8] == left.to_bytes(4, "big") + bytes.fromhex("cbd43194")
    wait_dispatched(store)
    got = store.get_messages("TopicTest", 0, 0, max_count=60, max_bytes=1 << 30)
    assert len(got.messages) == 60 and all(m.body == body for m in got.messages)


def test_query_by_key_and_uniq_key(make_store, clock):
    store = make_store()
    t0 = clock.now_ms()
    store.put_messages([message(keys="order-1 shared", UNIQ_KEY="ID1"), message(keys="order-2 shared")])
    wait_dispatched(store)
    assert [m.properties["KEYS"] for m in store.query_messages_by_key("TopicTest", "order-2", 10, 0, t0 + 1000)] == [
        "order-2 shared"
    ]
    assert len(store.query_messages_by_key("TopicTest", "shared", 10, 0, t0 + 1000)) == 2
    assert len(store.query_messages_by_key("TopicTest", "ID1", 10, 0, t0 + 1000)) == 1
    assert store.query_messages_by_key("Other", "shared", 10, 0, t0 + 1000) == []
    assert store.query_messages_by_key("TopicTest", "shared", 10, t0 + 5000, t0 + 9000) == []


def test_offset_by_timestamp(make_store, clock):
    store = make_store()
    stamps = []
    for _i in range(10):
        stamps.append(clock.now_ms())
        store.put_messages([message()])
        clock.advance_ms(1000)
    wait_dispatched(store)
    assert store.offset_by_timestamp("TopicTest", 0, stamps[4]) == 4
    assert store.offset_by_timestamp("TopicTest", 0, stamps[4] + 1) == 5
    assert store.offset_by_timestamp("TopicTest", 0, 0) == 0
    assert store.offset_by_timestamp("TopicTest", 0, stamps[-1] + 1) == 10


@pytest.mark.parametrize(
    "build,status",
    [
        (lambda: message(topic="bad topic!"), PutStatus.TOPIC_ILLEGAL),
        (lambda: message(topic="x" * 128), PutStatus.TOPIC_ILLEGAL),
        (lambda: message(topic="SCHEDULE_TOPIC_XXXX"), PutStatus.TOPIC_ILLEGAL),
        (lambda: message(topic="rmq_sys_anything"), PutStatus.TOPIC_ILLEGAL),
        (lambda: message(body=b"x" * (4 * 1024 * 1024 + 1)), PutStatus.MESSAGE_ILLEGAL),
        (lambda: message(queue_id=8), PutStatus.QUEUE_ID_ILLEGAL),
        (lambda: message(queue_id=-1), PutStatus.QUEUE_ID_ILLEGAL),
        (lambda: message(**{"BIG": "v" * 40000}), PutStatus.PROPERTIES_SIZE_EXCEEDED),
        (lambda: message(**{"K": "a\x01b"}), PutStatus.MESSAGE_ILLEGAL),
    ],
)
def test_bad_input_gets_a_status_and_writes_nothing(make_store, build, status):
    store = make_store(commitlog_file_size_bytes=8 * 1024 * 1024)
    before = store.commitlog.max_offset
    results = store.put_messages([message(), build()])
    assert [r.status for r in results] == [status, status]
    assert all(r.error for r in results)
    assert store.commitlog.max_offset == before


def test_system_topics_are_allowed_for_internal_callers(make_store):
    store = make_store()
    rec = message(topic="SCHEDULE_TOPIC_XXXX", queue_id=2, DELAY="3", REAL_TOPIC="T", REAL_QID="0")
    [result] = store.put_messages([rec], allow_system_topics=True)
    assert result.ok
    wait_dispatched(store)
    unit = store.cq_store.find("SCHEDULE_TOPIC_XXXX", 2).get_unit(0)
    assert unit[2] == result.store_timestamp_ms + 10_000  # tags code = deliver time for level 3


def test_prepared_and_rollback_records_get_no_queue_unit(make_store):
    store = make_store()
    store.put_messages(
        [
            MessageRecord(topic="T", queue_id=0, body=b"p", sys_flag=0x4),
            MessageRecord(topic="T", queue_id=0, body=b"c", sys_flag=0x8),
        ]
    )
    wait_dispatched(store)
    got = store.get_messages("T", 0, 0)
    assert [m.body for m in got.messages] == [b"c"]


def test_arrival_listener_hears_new_messages(make_store):
    store = make_store()
    heard = []
    unsubscribe = store.add_arrival_listener(heard.extend)
    store.put_messages([message(queue_id=q) for q in (0, 1, 1)])
    wait_dispatched(store)
    assert {(a.topic, a.queue_id, a.max_offset) for a in heard} == {("TopicTest", 0, 1), ("TopicTest", 1, 2)}
    unsubscribe()
    store.put_messages([message()])
    wait_dispatched(store)
    assert len(heard) == 2


def test_restart_keeps_messages_offsets_and_metadata(tmp_path, make_store):
    store = make_store()
    store.put_messages([message(queue_id=i % 2, body=b"%d" % i) for i in range(50)])
    store.consumer_offsets.commit_offset("G", "TopicTest", 0, 7)
    store.shutdown()
    assert not (tmp_path / "store" / "abort").exists()
    again = make_store()
    assert again.max_offset_in_queue("TopicTest", 0) == 25
    assert again.consumer_offsets.query_offset("G", "TopicTest", 0) == 7
    [r] = again.put_messages([message(queue_id=0)])
    assert r.queue_offset == 25
    assert again.topics.get("TopicTest").write_queue_nums == 8
    for name in (
        "commitlog",
        "consumequeue/TopicTest/0",
        "index",
        "checkpoint",
        "lock",
        "config/topics.json",
        "config/consumerOffset.json",
    ):
        assert (tmp_path / "store" / name).exists(), name


def test_second_store_on_the_same_root_is_refused(make_store, tmp_path):
    from services.store.errors import StoreLockedError
    from services.store.store import FileStore
    from tests.support.filestore import small_config

    make_store()
    with pytest.raises(StoreLockedError):
        FileStore(small_config(tmp_path / "store")).start()


def test_sync_flush_returns_after_the_flush(make_store):
    store = make_store(flush_mode=FlushMode.SYNC)
    results = store.put_messages([message() for _ in range(3)])
    assert all(r.ok for r in results)
    end = results[-1].phy_offset + results[-1].wrote_bytes
    assert store.commitlog.flushed_where >= end


def test_sync_flush_timeout_is_never_ok(make_store, monkeypatch):
    store = make_store(flush_mode=FlushMode.SYNC, sync_flush_timeout_ms=200)
    import time as _time

    real = os.fdatasync

    def slow(fd):
        _time.sleep(0.5)  # a slow disk: longer than the sync flush timeout
        real(fd)

    monkeypatch.setattr(os, "fdatasync", slow)
    [result] = store.put_messages([message()])
    assert result.status is PutStatus.FLUSH_DISK_TIMEOUT


def test_not_running_store_refuses_puts(make_store):
    store = make_store()
    store.shutdown()
    [result] = store.put_messages([message()])
    assert result.status is PutStatus.SERVICE_NOT_AVAILABLE


def test_raw_records_are_real_commitlog_records(make_store):
    store = make_store()
    [r] = store.put_messages([message(body=b"raw")])
    wait_dispatched(store)
    raw = store.get_messages("TopicTest", 0, 0).raw_messages[0]
    assert decode_record(raw, 0, len(raw)).phy_offset == r.phy_offset


def test_consume_queue_fast_run_and_careful_path_agree(make_store):
    """A dense run goes through the vectorised ConsumeQueue write; a run with a duplicate or a
    gap in queue offsets must fall back to the unit-by-unit rules."""
    from services.store.model import DispatchRequest

    store = make_store()
    store.put_messages([message(body=b"%d" % i) for i in range(40)])
    store.reput.run_once()
    cq = store.cq_store.find("TopicTest", 0)
    assert cq.max_offset == 40
    units = cq.get_units(0, 40)
    assert list(units["size"]) == [
        r.size for r in [store.commitlog.dispatch_request_at(int(p))[0] for p in units["phy_offset"]]
    ]
    assert all(b > a for a, b in zip(units["phy_offset"], units["phy_offset"][1:]))
    # Re-dispatching the same requests writes nothing (idempotent), whichever path is taken.
    again = [store.commitlog.dispatch_request_at(int(p))[0] for p in units["phy_offset"]]
    assert cq.put_requests(again) == 0 and cq.max_offset == 40
    # A batch with a duplicated queue offset in the middle is not a dense run.
    base = int(units["phy_offset"][-1]) + 10_000
    odd = [
        DispatchRequest("TopicTest", 0, base + 100 * i, 50, 0, 0, 40 + (i if i < 5 else i - 1), "", "", 0, 0)
        for i in range(10)
    ]
    assert cq.put_requests(odd) == 9  # the duplicate offset 44 is skipped (RocketMQ's rule)
    assert cq.max_offset == 49
    assert [int(p) for p in cq.get_units(44, 2)["phy_offset"]] == [base + 400, base + 600]
