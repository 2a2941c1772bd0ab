"""The store RPCs added for the scheduler (GetRawMessages, LookRawMessages) and the scheduler's
gRPC store client over them, against a real store server."""

from __future__ import annotations

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.domain.format.commitlog_format import decode_record
from services.domain.statuses import GetStatus, PutStatus
from services.scheduler.config import SchedulerConfig
from services.scheduler.service import SchedulerService
from services.store.client.client import GrpcStoreClient
from services.store.client.model import MessageToPut
from tests.support.waits import wait_until


@pytest.fixture
def client(store_address: str):
    store = GrpcStoreClient(store_address, put_stream=False)
    yield store
    store.close()


def put(client: GrpcStoreClient, count: int, topic: str = "rmq_sys_wheel_timer"):
    """Put ``count`` messages into queue 0 and wait until they are dispatched (readable)."""
    outcomes = client.put_messages(
        [
            MessageToPut(
                topic,
                0,
                f"body{i}".encode(),
                {"UNIQ_KEY": f"K{i}", "TIMER_OUT_MS": "5"},
                flag=9,
                born_timestamp_ms=123,
                born_host="10.1.1.1:80",
            )
            for i in range(count)
        ],
        allow_system_topics=True,
    )
    wait_until(lambda: client.queue_offsets(topic, 0)[1] >= outcomes[-1].queue_offset + 1, 10, f"{topic} dispatched")
    return outcomes


def test_raw_records_decode_to_what_get_messages_returns(client, store_stub):
    outcomes = put(client, 5)
    assert [o.status for o in outcomes] == [PutStatus.PUT_OK] * 5
    raw = store_stub.GetRawMessages(
        pb.GetMessagesRequest(topic="rmq_sys_wheel_timer", queue_id=0, queue_offset=1, max_count=3), timeout=10
    )
    decoded = store_stub.GetMessages(
        pb.GetMessagesRequest(topic="rmq_sys_wheel_timer", queue_id=0, queue_offset=1, max_count=3), timeout=10
    )
    assert (raw.status, raw.next_begin_offset, raw.max_offset) == (decoded.status, 4, 5)
    for record, message in zip(raw.records, decoded.messages, strict=True):
        ours = decode_record(record, 0, len(record))
        assert (ours.body, ours.phy_offset, ours.queue_offset) == (
            message.body,
            message.phy_offset,
            message.queue_offset,
        )
        assert ours.properties == dict(message.properties)
    result = client.get_messages("rmq_sys_wheel_timer", 0, 5, 10)
    assert (result.status, result.messages, result.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, [], 5)


def test_look_raw_by_offset_and_size(client, store_stub):
    outcomes = put(client, 3)
    first = client.get_messages("rmq_sys_wheel_timer", 0, 0, 3).messages
    refs = [(r.phy_offset, r.store_size_bytes) for r in first]
    found = client.look_messages(refs + [(refs[1][0] + 1, refs[1][1]), (10**9, 100)])
    assert sorted(found) == [o.phy_offset for o in outcomes]  # a misaligned or absent record is left out
    record = found[refs[2][0]]
    assert (record.body, record.flag, record.born_timestamp_ms, record.born_host) == (b"body2", 9, 123, "10.1.1.1:80")
    response = store_stub.LookRawMessages(pb.LookRawMessagesRequest(phy_offsets=[10**9], sizes=[100]), timeout=10)
    assert list(response.records) == [b""]
    for bad in (
        pb.LookRawMessagesRequest(phy_offsets=[0], sizes=[]),
        pb.LookRawMessagesRequest(phy_offsets=[-1], sizes=[10]),
        pb.LookRawMessagesRequest(phy_offsets=[0] * 1025, sizes=[1] * 1025),
    ):
        with pytest.raises(grpc.RpcError) as raised:
            store_stub.LookRawMessages(bad, timeout=10)
        assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_delay_offsets_and_queue_offsets(client):
    assert client.get_delay_offset(3) == 0
    client.update_delay_offset(3, 17)
    assert client.get_delay_offset(3) == 17
    put(client, 2, topic="SCHEDULE_TOPIC_XXXX")
    assert client.queue_offsets("SCHEDULE_TOPIC_XXXX", 0) == (0, 2)
    assert client.queue_offsets("SCHEDULE_TOPIC_XXXX", 1) == (0, 0)


def test_delay_level_delivery_against_a_real_store(client, tmp_path):
    service = SchedulerService(SchedulerConfig(root=tmp_path / "scheduler"), client, watch=client)
    service.open()
    service.start()
    try:
        client.put_messages(
            [
                MessageToPut(
                    "SCHEDULE_TOPIC_XXXX",
                    0,
                    f"retry{i}".encode(),
                    {"DELAY": "1", "REAL_TOPIC": "%RETRY%G", "REAL_QID": "0", "UNIQ_KEY": f"R{i}"},
                )
                for i in range(2)
            ],
            allow_system_topics=True,
        )
        wait_until(lambda: client.get_messages("%RETRY%G", 0, 0, 10).max_offset >= 2, 10, "both retries delivered")
        parked = client.get_messages("SCHEDULE_TOPIC_XXXX", 0, 0, 10).messages
        records = client.get_messages("%RETRY%G", 0, 0, 10).messages
        assert [r.body for r in records] == [b"retry0", b"retry1"]
        for park, record in zip(parked, records):
            assert record.store_timestamp_ms >= park.store_timestamp_ms + 1_000
            assert record.properties["DELAY"] == "1" and record.properties["REAL_TOPIC"] == "%RETRY%G"
        wait_until(lambda: client.get_delay_offset(1) == 2, 5, "delay level 1's offset at 2")
    finally:
        service.stop()
