"""A group's retry policy end to end, on real store and broker servers over raw v2 requests: set
through the admin API, told to consumers in the Telemetry settings reply, and honoured when a
consumer nacks with it (ChangeInvisibleDuration, as the official push consumers do)."""

from __future__ import annotations

import time

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from pyrmq.admin.v1 import admin_pb2 as admin_pb
from pyrmq.admin.v1 import admin_pb2_grpc as admin_grpc

from services.domain.retry_policy import CustomizedRetryPolicy
from tests.support.v2_requests import Stream, change, message, receive, send_ok

BACKOFFS_MS = (1_000, 2_000)  # whole seconds (ChangeInvisibleDuration), one per attempt, rising
REVIVE_SLACK_S = 3.0  # the store revives expired messages once a second; allow a loaded machine more


def test_customized_policy_reaches_the_consumer_and_paces_redelivery(broker, v2):
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:  # Admin is served on the same port
        admin = admin_grpc.AdminStub(channel)
        topic = admin_pb.CreateTopicRequest(name="RetryTopic", message_type=admin_pb.NORMAL, queue_nums=1)
        admin.CreateTopic(topic, timeout=10)
        policy = admin_pb.RetryPolicy(kind=admin_pb.RETRY_POLICY_CUSTOMIZED, backoffs_ms=BACKOFFS_MS)
        group = admin_pb.CreateGroupRequest(name="G1", max_delivery_attempts=5, retry_policy=policy)
        admin.CreateGroup(group, timeout=10)

    stream = Stream(v2)
    reply = stream.send(
        s.TelemetryCommand(
            settings=d.Settings(client_type=d.PUSH_CONSUMER, subscription=d.Subscription(group=d.Resource(name="G1")))
        )
    )
    stream.call.cancel()
    assert reply.status.code == d.OK
    backoff = reply.settings.backoff_policy
    assert backoff.max_attempts == 5 and backoff.WhichOneof("strategy") == "customized_backoff"
    delays_ms = tuple(x.seconds * 1000 + x.nanos // 1_000_000 for x in backoff.customized_backoff.next)
    assert delays_ms == BACKOFFS_MS
    client_policy = CustomizedRetryPolicy(delays_ms)  # what the client computes its nack from

    send_ok(v2, message("RetryTopic", body=b"flaky"))
    status, [got], _ = receive(v2, "RetryTopic")
    assert status.code == d.OK
    for attempt in (1, 2):
        assert got.system_properties.delivery_attempt == attempt
        delay_ms = client_policy.client_delay_ms(attempt)
        nacked = time.monotonic()
        response = change(v2, "RetryTopic", got.system_properties.receipt_handle, delay_ms // 1000)
        assert response.status.code == d.OK
        status, messages, _ = receive(v2, "RetryTopic", polling_s=15, timeout=20)
        waited_s = time.monotonic() - nacked
        assert status.code == d.OK and [m.body for m in messages] == [b"flaky"]
        assert delay_ms / 1000 - 0.1 <= waited_s <= delay_ms / 1000 + REVIVE_SLACK_S
        [got] = messages
    assert got.system_properties.delivery_attempt == 3
