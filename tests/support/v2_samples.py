"""Fully populated apache.rocketmq.v2 samples, as a real client and server fill them: a
``resource`` in namespace "ns", ``endpoints``, a ``delivered_message``, a ``send_request`` with
every send-side shape, ``producer_settings`` (a d.Settings) and ``consumer_settings``. Used by
the wire round trips of tests/broker/test_protocol_schema.py and by test_rpc.py."""

from __future__ import annotations

from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp


def resource(name: str) -> d.Resource:
    return d.Resource(resource_namespace="ns", name=name)


def endpoints() -> d.Endpoints:
    return d.Endpoints(scheme=d.IPv4, addresses=[d.Address(host="127.0.0.1", port=8081)])


def delivered_message() -> d.Message:
    """A message as the server hands it to a consumer: every delivery-side property set."""
    return d.Message(
        topic=resource("TopicTest"),
        user_properties={"order": "42"},
        body=b"\x1f\x8b\x08\x00gz",
        system_properties=d.SystemProperties(
            tag="TagA",
            keys=["k1"],
            message_id="0102FC0000000146A20B13E20600000000",
            body_digest=d.Digest(type=d.MD5, checksum="5D41402ABC4B2A76B9719D911017C592"),
            body_encoding=d.GZIP,
            message_type=d.NORMAL,
            born_timestamp=Timestamp(seconds=1_700_000_000, nanos=123_000_000),
            born_host="10.0.0.7",
            store_timestamp=Timestamp(seconds=1_700_000_001),
            store_host="10.0.0.1:10911",
            receipt_handle="h-0-1",
            queue_id=3,
            queue_offset=0,
            invisible_duration=Duration(seconds=30),
            delivery_attempt=1,
            trace_context="00-trace",
            dead_letter_queue=d.DeadLetterQueue(topic="TopicOrigin", message_id="0102FC0000000146A20B13E20600000001"),
        ),
    )


def send_request() -> s.SendMessageRequest:
    """One message per send-side shape: FIFO, DELAY, TRANSACTION, LITE, PRIORITY."""

    def message(**system) -> d.Message:
        base = dict(
            keys=["k1", "k2"],
            message_id="0102FC0000000146A20B13E20600000000",
            body_encoding=d.IDENTITY,
            born_timestamp=Timestamp(seconds=1_700_000_000),
            born_host="10.0.0.7",
        )
        return d.Message(
            topic=resource("TopicTest"),
            user_properties={"order": "42", "empty": ""},
            system_properties=d.SystemProperties(**{**base, **system}),
            body=b"\x00\xffhello",
        )

    return s.SendMessageRequest(
        messages=[
            message(tag="", message_type=d.FIFO, message_group="order-42"),
            message(
                message_type=d.DELAY, delivery_timestamp=Timestamp(seconds=1_700_000_060, nanos=500_000_000), queue_id=0
            ),
            message(tag="TagA", message_type=d.TRANSACTION, orphaned_transaction_recovery_duration=Duration(seconds=5)),
            message(message_type=d.LITE, lite_topic="lite-1"),
            message(message_type=d.PRIORITY, priority=0),
        ]
    )


def producer_settings(**extra) -> d.Settings:
    return d.Settings(
        client_type=d.PRODUCER,
        access_point=endpoints(),
        request_timeout=Duration(seconds=3),
        backoff_policy=d.RetryPolicy(
            max_attempts=3,
            exponential_backoff=d.ExponentialBackoff(
                initial=Duration(nanos=10_000_000), max=Duration(seconds=1), multiplier=2.0
            ),
        ),
        publishing=d.Publishing(
            topics=[resource("TopicTest")], max_body_size=4 * 1024 * 1024, validate_message_type=True
        ),
        user_agent=d.UA(language=d.PYTHON, version="5.1.2", platform="Linux", hostname="10.0.0.7"),
        metric=d.Metric(on=False),
        **extra,
    )


def consumer_settings() -> d.Settings:
    tag_all = d.FilterExpression(type=d.TAG, expression="*")
    sql = d.FilterExpression(type=d.SQL, expression="a > 1")
    entries = [
        d.SubscriptionEntry(topic=resource("TopicTest"), expression=tag_all),
        d.SubscriptionEntry(topic=resource("TopicSql"), expression=sql),
    ]
    retry = d.RetryPolicy(
        max_attempts=17,
        customized_backoff=d.CustomizedBackoff(next=[Duration(seconds=1), Duration(seconds=5), Duration(seconds=10)]),
    )
    subscription = d.Subscription(
        group=resource("GroupA"),
        subscriptions=entries,
        fifo=False,
        receive_batch_size=32,
        long_polling_timeout=Duration(seconds=20),
        lite_subscription_quota=100,
        max_lite_topic_size=64,
    )
    return d.Settings(
        client_type=d.PUSH_CONSUMER,
        access_point=endpoints(),
        backoff_policy=retry,
        subscription=subscription,
        user_agent=d.UA(language=d.NODE_JS, version="1.0.8"),
        metric=d.Metric(on=True, endpoints=endpoints()),
    )
