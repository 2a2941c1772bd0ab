"""The producer core: property mapping (docs/v2-clients.md, 6.1), queue selection, put hooks, outcomes."""

from __future__ import annotations

import base64
from collections import Counter

import pytest

from services.broker.config import BrokerConfig
from services.broker.errors import Code, NotFoundError
from services.broker.model import BodyEncoding, IncomingMessage
from services.broker.producer import Producer, recall_handle, response_code
from services.broker.put_coalescer import DirectPutSink
from services.broker.queue_selection import RoundRobin, fifo_queue_id, guava_consistent_hash
from services.broker.topics import TopicRegistry
from services.domain.contracts.delay import timer_out_ms
from services.domain.delivery import MessageType
from services.domain.format.java_compat import java_string_hash
from services.runtime.clock import ManualClock
from services.store.client.model import MessageToPut, PutStatus, TopicInfo
from tests.support.topics import create_topics

NOW_MS = 1_700_000_000_123
PEER = "10.1.2.3:50123"
MESSAGE_ID = "0102FC0000000146A20B13E20600000000"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW_MS)


@pytest.fixture(autouse=True)
def topic_test(store_client) -> None:
    """The topic these tests send to: MIXED, 8 queues (a test may re-create it in another shape)."""
    create_topics(store_client, "TopicTest")


def make_producer(store_client, **config) -> Producer:
    cfg = BrokerConfig(**config)
    return Producer(
        cfg,
        TopicRegistry(cfg, store_client, store_client.clock),
        DirectPutSink(store_client.put_messages),
        store_client.clock,
    )


def send(store_client, *messages, **config):
    return make_producer(store_client, **config).send(list(messages), PEER, 3.0)


def the_one_stored(store_client) -> MessageToPut:
    """The one message sent to the store, which holds it as it was sent."""
    [sent] = store_client.sent
    [held] = store_client.messages(sent.topic)
    assert (held.queue_id, held.body, held.properties, held.sys_flag) == (
        sent.queue_id,
        sent.body,
        sent.properties,
        sent.sys_flag,
    )
    assert (held.born_timestamp_ms, held.born_host, held.reconsume_times) == (
        sent.born_timestamp_ms,
        sent.born_host,
        sent.reconsume_times,
    )
    return sent


def normal(**fields) -> IncomingMessage:
    values = dict(
        topic="TopicTest",
        body=b"hello",
        message_id=MESSAGE_ID,
        message_type=MessageType.NORMAL,
        born_timestamp_ms=1_700_000_000_000,
        born_host="192.168.0.7",
    )
    values.update(fields)
    return IncomingMessage(**values)


def test_normal_message_properties(store_client):
    [receipt] = send(store_client, normal(tag="TagA", keys=["order-1", "order-2"], user_properties={"color": "red"}))
    # transaction_id: the message id on every send, as the broker's SendMessageProcessor answers
    assert receipt.code == Code.OK and receipt.message_id == MESSAGE_ID == receipt.transaction_id
    record = the_one_stored(store_client)
    assert record.topic == "TopicTest" and record.body == b"hello" and record.sys_flag == 0
    assert record.properties == {
        "color": "red",
        "TAGS": "TagA",
        "KEYS": "order-1 order-2",
        "UNIQ_KEY": MESSAGE_ID,
        "RECONSUME_TIME": "0",
        "PGROUP": "TopicTest",
        "__BORNHOST": "192.168.0.7",
        "BORN_TIMESTAMP": "1700000000000",
        "CLUSTER": "DefaultCluster",
    }
    assert record.born_timestamp_ms == 1_700_000_000_000 and record.born_host == PEER
    assert not record.allow_system_topic


def test_optional_fields_absent_and_fallbacks(store_client):
    send(
        store_client,
        normal(
            born_timestamp_ms=None,
            born_host="",
            tag=None,
            keys=[],
            delivery_attempt=2,
            trace_context="00-abc-01",
            body_encoding=BodyEncoding.GZIP,
        ),
        cluster_name="c1",
    )
    record = the_one_stored(store_client)
    assert "TAGS" not in record.properties and "KEYS" not in record.properties
    assert "BORN_TIMESTAMP" not in record.properties and record.born_timestamp_ms == NOW_MS
    assert record.properties["__BORNHOST"] == PEER  # blank born_host -> the peer, as the proxy does
    assert record.properties["RECONSUME_TIME"] == "2" and record.reconsume_times == 2
    assert record.properties["TRACE_CONTEXT"] == "00-abc-01"
    assert record.properties["CLUSTER"] == "c1"
    assert record.sys_flag == 0x1  # COMPRESSED for GZIP bodies


def test_empty_keys_are_skipped_when_joining(store_client):
    send(store_client, normal(keys=["a", "", "b"]))
    assert store_client.sent[0].properties["KEYS"] == "a b"


def test_fifo_message(store_client):
    [receipt] = send(store_client, normal(message_type=MessageType.FIFO, message_group="order-42"))
    record = the_one_stored(store_client)
    assert receipt.code == Code.OK and receipt.transaction_id == MESSAGE_ID == receipt.message_id
    assert record.properties["__SHARDINGKEY"] == "order-42"
    assert record.queue_id == fifo_queue_id("order-42", 8)


def test_delay_message_in_the_future_is_parked_in_the_timer_topic(store_client):
    deliver_ms = NOW_MS + 10_500
    [receipt] = send(store_client, normal(message_type=MessageType.DELAY, delivery_timestamp_ms=deliver_ms))
    record = the_one_stored(store_client)
    assert record.topic == "rmq_sys_wheel_timer" and record.queue_id == 0 and record.allow_system_topic
    props = record.properties
    assert props["TIMER_DELIVER_MS"] == str(deliver_ms)
    assert props["TIMER_OUT_MS"] == str(deliver_ms // 1000 * 1000)
    assert props["REAL_TOPIC"] == "TopicTest" and 0 <= int(props["REAL_QID"]) < 8
    raw = base64.urlsafe_b64decode(receipt.recall_handle).decode()
    assert raw == f"v1 TopicTest broker-a {deliver_ms // 1000 * 1000 + 1} {MESSAGE_ID}"


def test_delay_message_in_the_past_is_stored_normally(store_client):
    [receipt] = send(store_client, normal(message_type=MessageType.DELAY, delivery_timestamp_ms=NOW_MS - 1))
    record = the_one_stored(store_client)
    assert record.topic == "TopicTest" and record.properties["TIMER_DELIVER_MS"] == str(NOW_MS - 1)
    assert "TIMER_OUT_MS" not in record.properties and receipt.recall_handle == ""


def test_timer_rounding_is_rocketmqs():
    assert timer_out_ms(5_000, 1000) == 4_000  # on a tick: one tick earlier
    assert timer_out_ms(5_001, 1000) == 5_000
    assert timer_out_ms(5_999, 1000) == 5_000


def test_transaction_half_message(store_client):
    [receipt] = send(store_client, normal(message_type=MessageType.TRANSACTION, orphaned_transaction_recovery_s=30))
    record = the_one_stored(store_client)
    assert receipt.code == Code.OK and receipt.transaction_id == MESSAGE_ID == receipt.message_id
    assert record.topic == "RMQ_SYS_TRANS_HALF_TOPIC" and record.queue_id == 0 and record.allow_system_topic
    assert record.sys_flag == 0  # half messages are stored with transaction type NOT (RocketMQ 4.3+)
    props = record.properties
    assert props["TRAN_MSG"] == "true" and props["PGROUP"] == "TopicTest"
    assert props["__transactionId__"] == MESSAGE_ID and props["CHECK_IMMUNITY_TIME_IN_SECONDS"] == "30"
    assert props["REAL_TOPIC"] == "TopicTest" and 0 <= int(props["REAL_QID"]) < 8


def test_round_robin_over_write_queues(store_client):
    store_client.create_topic(TopicInfo("TopicTest", 8, 4, 6, "NORMAL"))
    producer = make_producer(store_client)
    for _ in range(8):
        producer.send([normal()], PEER, 3.0)
    assert [m.queue_id for m in store_client.sent] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [(m.queue_id, m.queue_offset) for m in store_client.messages("TopicTest")] == [
        (q, offset) for q in range(4) for offset in range(2)
    ]


def test_fifo_hash_is_stable_spread_and_javas():
    # Java: "hello".hashCode() == 99162322; Guava's golden values are checked in test_queue_selection.
    assert java_string_hash("hello") == 99162322
    assert fifo_queue_id("hello", 8) == guava_consistent_hash(99162322, 8)
    groups = [f"order-{i}" for i in range(4000)]
    ids = [fifo_queue_id(g, 8) for g in groups]
    assert ids == [fifo_queue_id(g, 8) for g in groups]
    assert min(Counter(ids).values()) > 400  # every queue gets a fair share
    # Consistent hashing: growing 8 -> 9 queues moves about 1/9 of the groups, all to the new queue.
    moved = [(a, fifo_queue_id(g, 9)) for g, a in zip(groups, ids) if fifo_queue_id(g, 9) != a]
    assert all(new == 8 for _, new in moved) and len(moved) < len(groups) / 6


def test_round_robin_counts_per_topic():
    rr = RoundRobin()
    assert [rr.next_queue_id("a", 3) for _ in range(4)] == [0, 1, 2, 0]
    assert rr.next_queue_id("b", 3) == 0


def test_store_outcomes_map_to_codes(store_client):
    statuses = iter([PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.OS_PAGE_CACHE_BUSY, PutStatus.UNKNOWN_ERROR])
    store_client.outcome = lambda message: next(statuses)
    codes = [send(store_client, normal())[0].code for _ in range(3)]
    assert codes == [Code.MASTER_PERSISTENCE_TIMEOUT, Code.TOO_MANY_REQUESTS, Code.INTERNAL_SERVER_ERROR]
    assert len(store_client.sent) == 3 and len(store_client.messages("TopicTest")) == 1  # a flush timeout is appended


def test_a_stale_queue_count_invalidates_the_topic_cache(store_client):
    store_client.create_topic(TopicInfo("TopicTest", 8, 8, 6, "NORMAL"))
    producer = make_producer(store_client)
    codes = [producer.send([normal()], PEER, 3.0)[0].code]  # queue 0; the producer caches 8 queues
    store_client.create_topic(TopicInfo("TopicTest", 2, 2, 6, "NORMAL"))  # the topic shrinks under the cache
    codes += [producer.send([normal()], PEER, 3.0)[0].code for _ in range(6)]
    # queue 1, then queue 2: the store answers QUEUE_ID_ILLEGAL, the producer re-reads the topic
    assert codes == [Code.OK, Code.OK, Code.INTERNAL_SERVER_ERROR] + [Code.OK] * 4
    assert [m.queue_id for m in store_client.sent[:3]] == [0, 1, 2]
    assert {m.queue_id for m in store_client.sent[3:]} == {0, 1}
    assert sorted(m.queue_id for m in store_client.messages("TopicTest")) == [0, 0, 0, 1, 1, 1]


def test_batch_request_goes_to_one_queue_and_reports_each_message(store_client):
    store_client.outcome = lambda m: PutStatus.PUT_OK if m.body != b"bad" else PutStatus.UNKNOWN_ERROR
    receipts = send(store_client, normal(message_id="ID-1"), normal(body=b"bad", message_id="ID-2"), normal())
    assert [r.code for r in receipts] == [Code.OK, Code.INTERNAL_SERVER_ERROR, Code.OK]
    # each OK receipt has its own message's id as its transaction id; a refused one has neither
    assert [(r.message_id, r.transaction_id) for r in receipts] == [
        ("ID-1", "ID-1"),
        ("", ""),
        (MESSAGE_ID, MESSAGE_ID),
    ]
    assert response_code(receipts) == Code.MULTIPLE_RESULTS
    assert len(store_client.sent) == 3 and len({m.queue_id for m in store_client.sent}) == 1
    assert [(m.queue_id, m.body) for m in store_client.messages("TopicTest")] == [
        (store_client.sent[0].queue_id, b"hello")
    ] * 2
    assert response_code(receipts[:1]) == Code.OK


def test_an_unknown_topic_is_not_found_unless_auto_create_is_on(store_client):
    with pytest.raises(NotFoundError) as caught:
        send(store_client, normal(topic="Unknown"))
    assert (
        caught.value.code == Code.TOPIC_NOT_FOUND
        and store_client.get_topic("Unknown") is None
        and not store_client.sent
    )
    assert caught.value.message.startswith("CODE: 17  DESC: No topic route info in name server for the topic: Unknown")
    [receipt] = send(
        store_client,
        normal(topic="Unknown"),
        auto_create_topic_enable=True,
        auto_create_topic_message_type="NORMAL",
        auto_create_topic_queue_nums=4,
    )
    assert receipt.code == Code.OK
    assert store_client.get_topic("Unknown") == TopicInfo("Unknown", 4, 4, 6, "NORMAL")


def test_recall_handle_format():
    handle = recall_handle("T", "broker-a", 1000, "ID")
    assert base64.urlsafe_b64decode(handle) == b"v1 T broker-a 1001 ID"


@pytest.mark.parametrize("queue_nums", [1, 3, 8, 16])
def test_fifo_queue_in_range(queue_nums):
    assert all(0 <= fifo_queue_id(f"g{i}", queue_nums) < queue_nums for i in range(200))
