"""Consumer core (services/broker/consumer.py) and its v2 mapping; the service runs on the real
store (the ``store`` fixture, tests/support/store_double.py)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator

import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s

from services.broker import consumer
from services.broker.consumer import ArrivalHub, ConsumerService, FilterType, ReceiveRequest
from services.broker.errors import BrokerError, Code
from services.broker.v2 import consumer_convert
from services.domain.delivery import MessageType, delivered_message_type, delivery_timestamp_ms, user_properties
from services.domain.format.java_compat import java_string_hash
from services.runtime.clock import SystemClock
from services.store.client.model import AckResult, Delivery, MessageToPut, StoredMessage, TopicInfo
from services.store.pop.receipt_handle import ReceiptHandle
from tests.support.store_double import StoreDouble


def delivery(body=b"x", handle="h1", **props) -> Delivery:
    return Delivery(
        topic="T",
        body=body,
        properties=props,
        queue_id=2,
        queue_offset=7,
        delivery_attempt=1,
        receipt_handle=handle,
        born_timestamp_ms=1_700_000_000_123,
        born_host="10.0.0.1:5000",
        store_timestamp_ms=1_700_000_001_000,
        store_host="10.0.0.2:10911",
        offset_msg_id="0A0000",
    )


# -- pure functions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, tags",
    [
        ("*", None),
        ("", None),
        ("  ", None),
        ("TagA", {"TagA"}),
        ("TagA || TagB", {"TagA", "TagB"}),
        (" a ||b|| ", {"a", "b"}),
        ("a || *", None),
    ],
)
def test_tag_filter(expression, tags):
    parsed = consumer.parse_filter(FilterType.TAG, expression)
    assert parsed == consumer.Filter(tags=None if tags is None else frozenset(tags))


def test_tag_filter_errors_and_codes():
    assert consumer.parse_filter(FilterType.SQL, "a > 1") == consumer.Filter(sql_expression="a > 1")
    for bad in ("a >", "", "a = NULL"):
        with pytest.raises(BrokerError) as err:
            consumer.parse_filter(FilterType.SQL, bad)
        assert err.value.code is Code.ILLEGAL_FILTER_EXPRESSION and "position" in err.value.message
    with pytest.raises(BrokerError) as err:
        consumer.parse_filter(FilterType.TAG, "||")
    assert err.value.code is Code.ILLEGAL_FILTER_EXPRESSION
    assert consumer.tags_codes(frozenset({"TagA"})) == [java_string_hash("TagA")]
    assert consumer.tags_codes(None) == []


def test_polling_invisible_and_batch_rules():
    assert consumer.polling_ms(None, None) == 20_000
    assert consumer.polling_ms(1_000, 30_000) == 5_000
    assert consumer.polling_ms(60_000, 30_000) == 20_000
    assert consumer.polling_ms(20_000, 10_000) == 9_900
    with pytest.raises(BrokerError) as err:
        consumer.polling_ms(20_000, 4_999)
    assert err.value.code is Code.ILLEGAL_POLLING_TIME
    assert consumer.receive_invisible_ms(None, auto_renew=True) == consumer.AUTO_RENEW_INVISIBLE_MS
    assert consumer.receive_invisible_ms(10_000, auto_renew=False) == 10_000
    for bad in (None, 9_999, 12 * 3600 * 1000 + 1):
        with pytest.raises(BrokerError) as err:
            consumer.receive_invisible_ms(bad, auto_renew=False)
        assert err.value.code is Code.ILLEGAL_INVISIBLE_TIME
    assert [consumer.batch_size(n) for n in (-1, 0, 1, 32, 33)] == [32, 32, 1, 32, 32]


def test_user_properties_are_the_stored_ones_but_the_reserved_keys():
    props = {
        "color": "red",
        "TAGS": "a",
        "KEYS": "k",
        "UNIQ_KEY": "U",
        "__SHARDINGKEY": "g",
        "TRACE_CONTEXT": "t",
        "__transactionId__": "x",
        "CHECK_IMMUNITY_TIME_IN_SECONDS": "5",
        "RETRY_TOPIC": "T",
        "ORIGIN_MESSAGE_ID": "o",
        "DLQ_ORIGIN_TOPIC": "T",
        "DLQ_ORIGIN_MESSAGE_ID": "m",
        "REAL_TOPIC": "T",
        "REAL_QID": "1",
        "WAIT": "true",
        "CLUSTER": "c",
        "__CRC32#": "1",
        "PGROUP": "p",
        "__BORNHOST": "h",
        "BORN_TIMESTAMP": "1",
        "TIMER_DELIVER_MS": "1",
        "1ST_POP_TIME": "1",
        "RECONSUME_TIME": "1",
        "size": "L",
    }
    # The proxy passes through every key outside MessageConst.STRING_HASH_SET (services/domain/delivery.py).
    assert user_properties(props) == {
        "color": "red",
        "size": "L",
        "__SHARDINGKEY": "g",
        "TRACE_CONTEXT": "t",
        "__transactionId__": "x",
        "CHECK_IMMUNITY_TIME_IN_SECONDS": "5",
    }


def test_message_type_and_delivery_time():
    assert delivered_message_type({}) is MessageType.NORMAL
    assert delivered_message_type({"__SHARDINGKEY": "g"}) is MessageType.FIFO
    assert delivered_message_type({"TIMER_DELIVER_MS": "5"}) is MessageType.DELAY
    assert delivered_message_type({"TRAN_MSG": "true", "__SHARDINGKEY": "g"}) is MessageType.TRANSACTION
    assert delivery_timestamp_ms({"TIMER_DELIVER_MS": "123"}, 0) == 123
    assert delivery_timestamp_ms({"TIMER_DELAY_SEC": "3"}, 1000) == 4000
    assert delivery_timestamp_ms({}, 1000) is None


def test_delivered_message_fields():
    message = consumer_convert.delivered_message(
        delivery(
            b"body",
            TAGS="TagA",
            KEYS="k1 k2",
            UNIQ_KEY="ID1",
            __SHARDINGKEY="g1",
            TIMER_DELIVER_MS="1700000005000",
            DLQ_ORIGIN_TOPIC="T0",
            DLQ_ORIGIN_MESSAGE_ID="ID0",
            TRACE_CONTEXT="tc",
            color="red",
        )
    )
    sp = message.system_properties
    assert message.topic.name == "T" and message.body == b"body"
    assert dict(message.user_properties) == {"color": "red", "__SHARDINGKEY": "g1", "TRACE_CONTEXT": "tc"}
    assert sp.tag == "TagA" and list(sp.keys) == ["k1", "k2"] and sp.message_id == "ID1"
    assert sp.body_digest.type == d.MD5 and sp.body_digest.checksum == hashlib.md5(b"body").hexdigest().upper()
    assert sp.body_encoding == d.IDENTITY and sp.message_type == d.DELAY
    assert sp.born_timestamp.seconds == 1_700_000_000 and sp.born_timestamp.nanos == 123_000_000
    assert sp.born_host == "10.0.0.1:5000" and sp.store_host == "10.0.0.2:10911"
    assert sp.delivery_timestamp.seconds == 1_700_000_005 and sp.receipt_handle == "h1"
    assert (sp.queue_id, sp.queue_offset, sp.delivery_attempt) == (2, 7, 1)
    assert sp.message_group == "g1" and sp.trace_context == "tc"
    assert sp.dead_letter_queue.topic == "T0" and sp.dead_letter_queue.message_id == "ID0"
    plain = consumer_convert.delivered_message(delivery(__BORNHOST="1.2.3.4"))
    assert plain.system_properties.message_id == "0A0000" and plain.system_properties.born_host == "1.2.3.4"
    assert not plain.system_properties.HasField("tag") and not plain.system_properties.HasField("delivery_timestamp")
    blank = consumer_convert.delivered_message(delivery(__BORNHOST="  "))  # blank: the record's host, as the proxy
    assert blank.system_properties.born_host == "10.0.0.1:5000"


def test_ack_response_status():
    request = s.AckMessageRequest(
        entries=[
            s.AckMessageEntry(message_id="a", receipt_handle="1"),
            s.AckMessageEntry(message_id="b", receipt_handle="2"),
        ]
    )
    same = consumer_convert.ack_response(request, [(Code.INVALID_RECEIPT_HANDLE, "x")] * 2)
    assert same.status.code == Code.INVALID_RECEIPT_HANDLE
    mixed = consumer_convert.ack_response(request, [(Code.OK, "OK"), (Code.INVALID_RECEIPT_HANDLE, "x")])
    assert mixed.status.code == Code.MULTIPLE_RESULTS and [e.message_id for e in mixed.entries] == ["a", "b"]


# -- the service over the real store (tests/support/store_double.py) --------------------------------

HOUR_MS = 3_600_000


class Topics:
    def get(self, name: str) -> TopicInfo:
        return TopicInfo(name, 4, 4, 6, "MIXED")


def service(store_client: StoreDouble, hub: ArrivalHub | None = None) -> ConsumerService:
    store_client.create_topic(Topics().get("T"))  # the store holds T as the broker's topics see it
    return ConsumerService(store_client, Topics(), hub or ArrivalHub(), SystemClock(), "broker-a", ("127.0.0.1", 8081))


def arrive(store_client: StoreDouble, body: bytes, tags: str | None = None) -> StoredMessage:
    """A message of T stored in queue 0 (readable at once)."""
    properties = {"UNIQ_KEY": body.decode()} | ({"TAGS": tags} if tags else {})
    return store_client.append(MessageToPut("T", 0, body, properties, born_timestamp_ms=1_700_000_000_000))


def names(handle: str, stored: StoredMessage) -> bool:
    """Does a receipt handle name the delivery of ``stored``?"""
    decoded = ReceiptHandle.decode(handle)
    return decoded is not None and (decoded.source_topic, decoded.queue_id, decoded.queue_offset) == (
        stored.topic,
        stored.queue_id,
        stored.queue_offset,
    )


@pytest.fixture
def filling_store(tmp_path, clock) -> Iterator[StoreDouble]:
    """A store whose disk counts as full once its clean service looks (warning ratio 0: any use
    is above it); the background pass never comes during a test."""
    double = StoreDouble(
        tmp_path / "filling", clock, disk_space_warning_level_ratio=0.0, clean_resource_interval_ms=HOUR_MS
    )
    yield double
    double.close()


def test_tag_collisions_are_acked_and_dropped(store_client):
    svc = service(store_client)
    aa = arrive(store_client, b"aa", tags="Aa")
    bb = arrive(store_client, b"bb", tags="BB")  # "Aa" and "BB" have the same tags code (Java hash code)
    result = svc.receive(ReceiveRequest("G", "T", filter_expression="Aa", invisible_ms=30_000))
    [kept] = result.messages
    assert (kept.body, kept.queue_offset) == (b"aa", aa.queue_offset) and names(kept.receipt_handle, aa)
    [ack] = store_client.requests_of("AckMessages")  # the store popped both; the broker acked BB's
    [dropped] = ack.receipt_handles
    assert ack.group == "G" and ack.topic == "T" and names(dropped, bb)
    assert store_client.ack_messages("G", "T", [dropped]) == [AckResult.OK]  # acked already: a repeat is OK
    assert store_client.ack_messages("G", "T", [kept.receipt_handle]) == [AckResult.OK]
    assert store_client.query_consumer_offset("G", "T", 0) == 2  # both finished


def test_parked_receive_wakes_on_arrival(store_client):
    hub = ArrivalHub()
    svc = service(store_client, hub)
    late: list[StoredMessage] = []

    def arrive_late():
        late.append(arrive(store_client, b"late"))
        hub.notify(["%RETRY%G_T"])  # the group's retry topic for T

    timer = threading.Timer(0.3, arrive_late)
    timer.start()
    started = time.monotonic()
    try:
        result = svc.receive(ReceiveRequest("G", "T", invisible_ms=30_000, long_polling_ms=5_000))
    finally:
        timer.join()
    [message] = result.messages
    assert message.body == b"late" and names(message.receipt_handle, late[0]) and time.monotonic() - started < 3
    assert hub.parked_count() == 0


def test_ack_change_dlq_and_assignment(filling_store):
    store = filling_store
    svc = service(store)
    stored = [arrive(store, b"m%d" % i) for i in range(3)]
    popped = svc.receive(ReceiveRequest("G", "T", batch_size=3, invisible_ms=30_000)).messages
    assert [m.body for m in popped] == [b"m0", b"m1", b"m2"]
    h1, h2, h3 = (m.receipt_handle for m in popped)
    assert svc.ack("G", "T", [h1, h1, ""]) == [  # the second h1: a repeat, OK as RocketMQ answers it
        (Code.OK, "OK"),
        (Code.OK, "OK"),
        (Code.INVALID_RECEIPT_HANDLE, "receipt handle is empty"),
    ]
    renewed = svc.change_invisible_duration("G", "T", h2, 0)
    assert renewed != h2 and names(renewed, stored[1]) and ReceiptHandle.decode(renewed).invisible_ms == 0
    store.file_store.clean.run_once()  # disk use is above the warning ratio: the store refuses puts
    assert store.file_store.clean.disk_full
    for call, code in [
        (lambda: svc.change_invisible_duration("G", "T", h2, 10), Code.INVALID_RECEIPT_HANDLE),  # h2 was renewed
        (lambda: svc.change_invisible_duration("G", "T", h3, -1), Code.ILLEGAL_INVISIBLE_TIME),
        (lambda: svc.forward_to_dead_letter_queue("G", "T", h3), Code.INTERNAL_SERVER_ERROR),  # DLQ_PUT_FAILED
        (lambda: svc.ack("", "T", [h3]), Code.ILLEGAL_CONSUMER_GROUP),
        (lambda: svc.ack("G", "", [h3]), Code.ILLEGAL_TOPIC),
    ]:
        with pytest.raises(BrokerError) as err:
            call()
        assert err.value.code is code
    assert store.messages("%DLQ%G") == []  # nothing dead-lettered: h3 is still in flight
    assert store.forward_to_dead_letter_queue("G", "T", h3) is AckResult.DLQ_PUT_FAILED  # the store's answer
    assert store.ack_messages("G", "T", [h3]) == [AckResult.OK]
    assert [q.queue_id for q in svc.query_assignment("G", "T").queues] == [-1]
    store.update_group("F", fifo=True, retry_max_times=16)
    assert [q.queue_id for q in svc.query_assignment("F", "T").queues] == [0, 1, 2, 3]


def test_a_cancelled_receive_stops_waiting_without_popping_again(store_client):
    svc = service(store_client)
    alive = threading.Event()
    alive.set()
    threading.Timer(0.2, alive.clear).start()
    started = time.monotonic()
    result = svc.receive(ReceiveRequest("G", "T", invisible_ms=30_000, long_polling_ms=5_000, alive=alive.is_set))
    assert (
        result.messages == [] and len(store_client.requests_of("PopMessages")) == 1 and time.monotonic() - started < 2.5
    )


def test_limits_come_from_the_broker_settings() -> None:
    limits = consumer.ConsumerLimits(
        invisible_ms_min=1_000, invisible_ms_max=5_000, polling_ms_min=100, polling_ms_max=2_000, batch_max=64
    )
    assert consumer.receive_invisible_ms(1_000, False, limits) == 1_000
    with pytest.raises(BrokerError) as info:
        consumer.receive_invisible_ms(5_001, False, limits)
    assert info.value.code == Code.ILLEGAL_INVISIBLE_TIME
    assert consumer.polling_ms(50, None, limits) == 100 and consumer.polling_ms(9_000, None, limits) == 2_000
    assert consumer.batch_size(100, limits) == 64 and consumer.batch_size(0, limits) == 32
    assert consumer.batch_size(100) == 32  # the defaults: RocketMQ's 32
