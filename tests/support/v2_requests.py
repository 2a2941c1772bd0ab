"""Raw apache.rocketmq.v2 requests from our own stubs, as the broker tests make them:

* ``CLIENT_ID`` / ``METADATA`` (the x-mq-client-id header), ``MESSAGE_ID``;
* producing: ``message`` (a d.Message with defaults), ``send``, ``send_ok``; ``end``
  (EndTransaction);
* consuming: ``receive`` (ReceiveMessage: status, messages, replies), ``ack``, ``change``
  (ChangeInvisibleDuration);
* Telemetry: ``Stream`` (a call driven from a queue of commands), ``producer_settings``
  (a producer's Settings command) and ``push_consumer_settings``.
"""

from __future__ import annotations

import queue
import threading

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from google.protobuf.duration_pb2 import Duration

CLIENT_ID = "test-host@1@0@broker-tests"
METADATA = (("x-mq-client-id", CLIENT_ID),)
MESSAGE_ID = "0102FC0000000146A20B13E20600000000"


def message(topic="TopicTest", body=b"hello", message_id=MESSAGE_ID, user_properties=None, **system) -> d.Message:
    system.setdefault("message_type", d.NORMAL)
    system.setdefault("body_encoding", d.IDENTITY)
    return d.Message(
        topic=d.Resource(name=topic),
        body=body,
        user_properties=user_properties or {},
        system_properties=d.SystemProperties(message_id=message_id, **system),
    )


def send(v2, *messages, metadata=METADATA) -> s.SendMessageResponse:
    return v2.SendMessage(s.SendMessageRequest(messages=list(messages)), metadata=metadata, timeout=10)


def send_ok(v2, *messages):
    response = send(v2, *messages)
    assert response.status.code == d.OK, response


def end(v2, topic, tid, resolution, source=d.SOURCE_CLIENT):
    return v2.EndTransaction(
        s.EndTransactionRequest(
            topic=d.Resource(name=topic), message_id=tid, transaction_id=tid, resolution=resolution, source=source
        ),
        metadata=METADATA,
        timeout=10,
    )


def receive(
    v2,
    topic,
    group="G1",
    expression="*",
    invisible_s=30,
    polling_s=5,
    timeout=10,
    batch_size=32,
    filter_type=d.TAG,
    metadata=METADATA,
    broker="",
    **extra,
) -> tuple[d.Status, list[d.Message], list[s.ReceiveMessageResponse]]:
    queue = d.MessageQueue(topic=d.Resource(name=topic), id=0)
    if broker:  # the broker group to receive from (message_queue.broker.name)
        queue.broker.name = broker
    request = s.ReceiveMessageRequest(
        group=d.Resource(name=group),
        message_queue=queue,
        filter_expression=d.FilterExpression(type=filter_type, expression=expression),
        batch_size=batch_size,
        long_polling_timeout=Duration(seconds=polling_s),
        **extra,
    )
    if invisible_s is not None:
        request.invisible_duration.CopyFrom(Duration(seconds=invisible_s))
    replies = list(v2.ReceiveMessage(request, metadata=metadata, timeout=timeout))
    [status] = [r.status for r in replies if r.HasField("status")]
    return status, [r.message for r in replies if r.HasField("message")], replies


def ack(v2, topic, handle, group="G1", metadata=METADATA) -> s.AckMessageResponse:
    return v2.AckMessage(
        s.AckMessageRequest(
            group=d.Resource(name=group),
            topic=d.Resource(name=topic),
            entries=[s.AckMessageEntry(message_id="x", receipt_handle=handle)],
        ),
        metadata=metadata,
        timeout=10,
    )


def change(v2, topic, handle, seconds, group="G1") -> s.ChangeInvisibleDurationResponse:
    return v2.ChangeInvisibleDuration(
        s.ChangeInvisibleDurationRequest(
            group=d.Resource(name=group),
            topic=d.Resource(name=topic),
            receipt_handle=handle,
            invisible_duration=Duration(seconds=seconds),
            message_id="x",
        ),
        metadata=METADATA,
        timeout=10,
    )


# -- Telemetry ----------------------------------------------------------------------------------


class Stream:
    """A Telemetry call driven from a queue of commands."""

    def __init__(self, v2, metadata=METADATA) -> None:
        self.outbound: queue.Queue = queue.Queue()
        self.replies: queue.Queue = queue.Queue()
        self.call = v2.Telemetry(iter(self.outbound.get, None), metadata=metadata)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        try:
            for reply in self.call:
                self.replies.put(reply)
        except grpc.RpcError as exc:
            self.replies.put(exc)
        self.replies.put(None)

    def send(self, command: s.TelemetryCommand):
        self.outbound.put(command)
        return self.replies.get(timeout=10)


def producer_settings(*topics) -> s.TelemetryCommand:
    return s.TelemetryCommand(
        settings=d.Settings(
            client_type=d.PRODUCER,
            access_point=d.Endpoints(scheme=d.IPv4, addresses=[d.Address(host="127.0.0.1", port=1)]),
            request_timeout=Duration(seconds=3),
            publishing=d.Publishing(
                topics=[d.Resource(name=t) for t in topics], max_body_size=134217728, validate_message_type=True
            ),
            user_agent=d.UA(language=d.PYTHON, version="5.1.2"),
            metric=d.Metric(on=False),
        )
    )


def push_consumer_settings(group, topic) -> s.TelemetryCommand:
    """A push consumer's Settings command, as the Python client writes it."""
    return s.TelemetryCommand(
        settings=d.Settings(
            client_type=d.PUSH_CONSUMER,
            access_point=d.Endpoints(scheme=d.IPv4, addresses=[d.Address(host="127.0.0.1", port=1)]),
            request_timeout=Duration(seconds=3),
            subscription=d.Subscription(
                group=d.Resource(name=group),
                subscriptions=[
                    d.SubscriptionEntry(
                        topic=d.Resource(name=topic), expression=d.FilterExpression(type=d.TAG, expression="*")
                    )
                ],
            ),
            user_agent=d.UA(language=d.PYTHON, version="5.1.2"),
            metric=d.Metric(on=False),
        )
    )
