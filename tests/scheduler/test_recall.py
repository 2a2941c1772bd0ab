"""The broker's half of recall (services/broker/recall.py, Producer.recall): handles, checks,
the DELETE marker it parks, and the RecallMessage RPC's codes."""

from __future__ import annotations

import base64

import pytest

from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError, Code
from services.broker.producer import Producer, recall_handle
from services.broker.put_coalescer import DirectPutSink
from services.broker.recall import decode_handle
from services.broker.topics import TopicRegistry
from services.domain.contracts.delay import timer_out_ms
from services.runtime.clock import ManualClock
from services.store.client.model import PutStatus, TopicInfo
from tests.support.store_double import StoreDouble

NOW_MS = 1_700_000_000_123
DELIVER_MS = NOW_MS + 60_000
MESSAGE_ID = "0102FC0000000146A20B13E20600000000"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(NOW_MS)


@pytest.fixture
def store_client(store_client: StoreDouble) -> StoreDouble:
    """The scheduler tests' store, with a DELAY topic and a NORMAL one."""
    store_client.create_topic(TopicInfo("Delayed", 8, 8, 6, "DELAY"))
    store_client.create_topic(TopicInfo("Plain", 8, 8, 6, "NORMAL"))
    return store_client


def producer(store_client: StoreDouble, clock: ManualClock, now_ms: int = NOW_MS) -> Producer:
    """A producer on the store at ``now_ms`` (the test's clock, which the store shares, is set to it)."""
    clock.set_ms(now_ms)
    config = BrokerConfig()
    return Producer(config, TopicRegistry(config, store_client, clock), DirectPutSink(store_client.put_messages), clock)


def handle_for(topic: str = "Delayed", broker: str = "broker-a", deliver_ms: int = DELIVER_MS) -> str:
    return recall_handle(topic, broker, timer_out_ms(deliver_ms, 1000), MESSAGE_ID)


def test_handle_round_trip_and_rocketmq_layout():
    handle = handle_for()
    raw = base64.urlsafe_b64decode(handle).decode()
    assert raw == f"v1 Delayed broker-a {timer_out_ms(DELIVER_MS, 1000) + 1} {MESSAGE_ID}"
    decoded = decode_handle(handle)
    assert (decoded.topic, decoded.broker_name, decoded.message_id) == ("Delayed", "broker-a", MESSAGE_ID)
    assert decode_handle(handle.rstrip("=")) == decoded  # padding optional, as Java's URL decoder


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "!!!",
        base64.urlsafe_b64encode(b"v2 a b 1 c").decode(),
        base64.urlsafe_b64encode(b"v1 a b 1").decode(),
        "\u00e9t\u00e9",
    ],
)
def test_malformed_handles_are_bad_requests(bad):
    with pytest.raises(BrokerError) as raised:
        decode_handle(bad)
    assert raised.value.code == Code.BAD_REQUEST and raised.value.message == "recall handle is invalid"


def test_recall_parks_a_delete_marker_in_the_same_slot(store_client, clock):
    message_id = producer(store_client, clock).recall("Delayed", handle_for(), "10.9.8.7:6", 3.0)
    assert message_id == MESSAGE_ID
    [(batch, allow_system)] = store_client.puts
    [marker] = batch
    [parked] = store_client.messages("rmq_sys_wheel_timer")
    assert (parked.queue_id, parked.body, parked.properties, parked.born_host, parked.born_timestamp_ms) == (
        marker.queue_id,
        marker.body,
        marker.properties,
        marker.born_host,
        marker.born_timestamp_ms,
    )
    out_ms = timer_out_ms(DELIVER_MS, 1000)
    assert allow_system and (marker.topic, marker.queue_id, marker.body) == ("rmq_sys_wheel_timer", 0, b"0")
    assert marker.properties == {
        "TAGS": "_RECALL_TAG_",
        "TIMER_DEL_UNIQKEY": f"Delayed+{MESSAGE_ID}",
        "UNIQ_KEY": MESSAGE_ID,
        "TIMER_DELIVER_MS": str(out_ms + 1),
        "BORN_TIMESTAMP": str(NOW_MS),
        "CLUSTER": "DefaultCluster",
        "TIMER_OUT_MS": str(out_ms),
        "REAL_TOPIC": "Delayed",
        "REAL_QID": "0",
    }
    assert marker.born_host == "10.9.8.7:6"


@pytest.mark.parametrize(
    "topic, handle, now_ms, code",
    [
        ("rmq_sys_wheel_timer", handle_for(), NOW_MS, Code.ILLEGAL_TOPIC),
        ("Missing", handle_for("Missing"), NOW_MS, Code.TOPIC_NOT_FOUND),
        ("Plain", handle_for("Plain"), NOW_MS, Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        ("Delayed", "not a handle", NOW_MS, Code.BAD_REQUEST),
        ("Delayed", handle_for("Other"), NOW_MS, Code.BAD_REQUEST),  # topic not match
        ("Delayed", handle_for(broker="broker-b"), NOW_MS, Code.BAD_REQUEST),
        # the slot began (now >= TIMER_OUT_MS + 1): too late, as RocketMQ's "timestamp invalid"
        ("Delayed", handle_for(), timer_out_ms(DELIVER_MS, 1000) + 1, Code.ILLEGAL_DELIVERY_TIME),
        ("Delayed", handle_for(deliver_ms=NOW_MS + 31 * 86_400_000), NOW_MS, Code.ILLEGAL_DELIVERY_TIME),
    ],
)
def test_recall_refusals(store_client, clock, topic, handle, now_ms, code):
    with pytest.raises(BrokerError) as raised:
        producer(store_client, clock, now_ms).recall(topic, handle, "", 3.0)
    assert raised.value.code == code
    assert store_client.puts == []


def test_recall_at_the_last_allowed_millisecond_and_store_refusal(store_client, clock):
    last_ms = timer_out_ms(DELIVER_MS, 1000)
    assert producer(store_client, clock, last_ms).recall("Delayed", handle_for(), "", 3.0) == MESSAGE_ID
    store_client.outcome = lambda message: PutStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(BrokerError) as raised:
        producer(store_client, clock).recall("Delayed", handle_for(), "", 3.0)
    assert raised.value.code == Code.INTERNAL_SERVER_ERROR
    assert (
        len(store_client.puts) == 2 and len(store_client.messages("rmq_sys_wheel_timer")) == 1
    )  # the refused one: not written
