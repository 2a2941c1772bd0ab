"""The broker's gRPC face, raw v2 requests from our own stubs, against a real store.

Store and broker servers run in-process on 127.0.0.1:0 (conftest). What the store holds is
read back through the store's gRPC API.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pyrmq.store.v1 import store_pb2 as pb

from services.broker.queue_selection import fifo_queue_id
from tests.support.store_reads import stored, wait_stored
from tests.support.v2_requests import CLIENT_ID, MESSAGE_ID, METADATA, Stream, message, producer_settings, send
from tests.support.waits import wait_until

# -- QueryRoute ---------------------------------------------------------------------------------


def test_query_route(broker, v2, topics):
    topics("TopicTest")
    response = v2.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(resource_namespace="", name="TopicTest")), metadata=METADATA, timeout=10
    )
    assert response.status.code == d.OK
    queues = response.message_queues
    assert [q.id for q in queues] == list(range(8))
    for q in queues:
        assert q.topic.name == "TopicTest" and q.permission == d.READ_WRITE
        assert (q.broker.name, q.broker.id) == ("broker-a", 0)
        assert q.broker.endpoints.scheme == d.IPv4
        assert [(a.host, a.port) for a in q.broker.endpoints.addresses] == [("127.0.0.1", broker.port)]
        assert list(q.accept_message_types) == [d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION]


def test_query_route_errors(v2):
    response = v2.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="TBW102")), metadata=METADATA, timeout=10)
    assert response.status.code == d.ILLEGAL_TOPIC and not response.message_queues
    response = v2.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="NoSuchTopic")), metadata=METADATA, timeout=10)
    assert response.status.code == d.TOPIC_NOT_FOUND == 40402 and not response.message_queues
    # The proxy's words (CODE: 17, two spaces, DESC: the name server's), then how to create it.
    assert response.status.message == (
        "CODE: 17  DESC: No topic route info in name server for the topic: NoSuchTopic, "
        "create it first (pyrmq topic create NoSuchTopic --type NORMAL)"
    )


def test_auto_create_topic_enable_creates_an_unknown_topic(make_broker, store_stub):
    creating = make_broker(auto_create_topic_enable=True)
    with grpc.insecure_channel(f"127.0.0.1:{creating.port}") as channel:
        v2 = s_grpc.MessagingServiceStub(channel)
        route = v2.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="Routed")), metadata=METADATA, timeout=10)
        sent = send(v2, message(topic="Sent"))
    assert route.status.code == sent.status.code == d.OK and len(route.message_queues) == 8
    for name in ("Routed", "Sent"):
        config = store_stub.GetTopic(pb.GetTopicRequest(topic_name=name), timeout=10)
        assert (config.write_queue_nums, config.message_type) == (8, pb.MIXED)


def test_route_accept_types_follow_a_topic_created_in_the_store(v2, store_stub):
    store_stub.CreateOrUpdateTopic(
        pb.CreateOrUpdateTopicRequest(
            config=pb.TopicConfig(topic_name="FifoTopic", read_queue_nums=2, write_queue_nums=2, message_type=pb.FIFO)
        ),
        timeout=10,
    )
    response = v2.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name="FifoTopic")), metadata=METADATA, timeout=10)
    assert [list(q.accept_message_types) for q in response.message_queues] == [[d.FIFO], [d.FIFO]]


# -- SendMessage --------------------------------------------------------------------------------


def test_send_lands_in_the_store_with_its_properties(v2, store_stub, topics):
    topics("TopicTest")
    born = Timestamp(seconds=1_700_000_000)
    response = send(
        v2,
        message(
            user_properties={"color": "red"},
            tag="TagA",
            keys=["order-1", "order-2"],
            born_timestamp=born,
            born_host="192.168.0.7",
        ),
    )
    assert response.status.code == d.OK, response
    [entry] = response.entries
    assert entry.status.code == d.OK and entry.message_id == MESSAGE_ID == entry.transaction_id  # every send
    [record] = wait_stored(store_stub, "TopicTest", MESSAGE_ID)
    assert record.body == b"hello" and record.queue_offset == entry.offset
    for key, value in {
        "color": "red",
        "TAGS": "TagA",
        "KEYS": "order-1 order-2",
        "UNIQ_KEY": MESSAGE_ID,
        "PGROUP": "TopicTest",
        "CLUSTER": "DefaultCluster",
        "__BORNHOST": "192.168.0.7",
        "BORN_TIMESTAMP": "1700000000000",
        "RECONSUME_TIME": "0",
    }.items():
        assert record.properties[key] == value, key
    assert record.born_timestamp_ms == 1_700_000_000_000 and record.born_host.startswith("127.0.0.1:")
    assert [m.body for m in stored(store_stub, "TopicTest", record.queue_id, record.queue_offset)][:1] == [b"hello"]
    by_key = wait_stored(store_stub, "TopicTest", "order-2")
    assert [m.properties["UNIQ_KEY"] for m in by_key] == [MESSAGE_ID]


def test_fifo_sends_land_in_the_hashed_queue_in_order(v2, store_stub, topics):
    topics("FifoSends")
    for i in range(6):
        group = f"order-{i % 2}"
        response = send(
            v2,
            message(
                topic="FifoSends",
                body=f"{group}/{i}".encode(),
                message_id=f"ID{i}",
                message_type=d.FIFO,
                message_group=group,
            ),
        )
        assert response.status.code == d.OK
    wait_stored(store_stub, "FifoSends", "ID5")  # dispatch follows CommitLog order: the last one in means all are
    for group in ("order-0", "order-1"):
        bodies = [m.body.decode() for m in stored(store_stub, "FifoSends", fifo_queue_id(group, 8))]
        assert [b for b in bodies if b.startswith(group)] == [
            f"{group}/{i}" for i in range(6) if f"order-{i % 2}" == group
        ]


@pytest.mark.parametrize(
    "build,code",
    [
        (lambda: [], d.MESSAGE_CORRUPTED),
        (lambda: [message(topic="RMQ_SYS_TRANS_HALF_TOPIC")], d.ILLEGAL_TOPIC),
        (lambda: [message(topic="SCHEDULE_TOPIC_XXXX")], d.ILLEGAL_TOPIC),
        (lambda: [message(topic="bad topic")], d.ILLEGAL_TOPIC),
        (lambda: [message(body=b"")], d.MESSAGE_BODY_EMPTY),
        (lambda: [message(body=b"x" * (4 * 1024 * 1024 + 1))], d.MESSAGE_BODY_TOO_LARGE),
        (lambda: [message(tag="a|b")], d.ILLEGAL_MESSAGE_TAG),
        (lambda: [message(tag="  ")], d.ILLEGAL_MESSAGE_TAG),
        (lambda: [message(keys=["\t"])], d.ILLEGAL_MESSAGE_KEY),
        (lambda: [message(user_properties={"UNIQ_KEY": "x"})], d.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (lambda: [message(user_properties={"TIMER_DELIVER_MS": "1"})], d.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (lambda: [message(message_id="")], d.ILLEGAL_MESSAGE_ID),
        (lambda: [message(message_type=d.FIFO, message_group="g" * 64)], d.ILLEGAL_MESSAGE_GROUP),
        (
            lambda: [
                message(message_type=d.DELAY, delivery_timestamp=Timestamp(seconds=int(time.time()) + 31 * 86400))
            ],
            d.ILLEGAL_DELIVERY_TIME,
        ),
        (
            lambda: [message(message_type=d.DELAY, delivery_timestamp=Timestamp(seconds=1, nanos=-5))],
            d.ILLEGAL_DELIVERY_TIME,
        ),
        (
            lambda: [
                message(message_type=d.TRANSACTION, orphaned_transaction_recovery_duration=Duration(seconds=7200))
            ],
            d.BAD_REQUEST,
        ),
        (lambda: [message(message_type=d.FIFO)], d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
        (lambda: [message(), message(topic="Other")], d.MESSAGE_CORRUPTED),
        (lambda: [message(lite_topic="lite")], d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),  # stated NORMAL, fields LITE
    ],
)
def test_server_side_rules(v2, build, code):
    response = send(v2, *build())
    assert response.status.code == code, response.status
    assert response.status.message


def test_send_to_an_unknown_topic_is_topic_not_found(v2, store_stub):
    response = send(v2, message(topic="NeverCreated"))
    assert response.status.code == d.TOPIC_NOT_FOUND
    assert response.status.message.startswith(
        "CODE: 17  DESC: No topic route info in name server for the topic: NeverCreated, create it first"
    )
    with pytest.raises(grpc.RpcError) as caught:
        store_stub.GetTopic(pb.GetTopicRequest(topic_name="NeverCreated"), timeout=10)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_topic_type_conflict(v2, store_stub):
    store_stub.CreateOrUpdateTopic(
        pb.CreateOrUpdateTopicRequest(config=pb.TopicConfig(topic_name="NormalOnly", message_type=pb.NORMAL)),
        timeout=10,
    )
    response = send(v2, message(topic="NormalOnly", message_type=d.FIFO, message_group="g"))
    assert response.status.code == d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_client_id_is_required(v2):
    response = send(v2, message(), metadata=())
    assert response.status.code == d.CLIENT_ID_REQUIRED


def test_a_4_mib_body_fits_the_grpc_limits(v2, store_stub, topics):
    topics("BigBodies")
    body = b"y" * (4 * 1024 * 1024)
    response = send(v2, message(topic="BigBodies", body=body, message_id="BIG"))
    assert response.status.code == d.OK, response.status
    [record] = wait_stored(store_stub, "BigBodies", "BIG")
    assert record.body == body


def test_delay_and_transaction_messages_are_parked_in_system_topics(v2, store_stub, topics):
    topics("Parked")
    deliver = Timestamp(seconds=int(time.time()) + 60)
    delayed = send(v2, message(topic="Parked", message_id="DELAYED", message_type=d.DELAY, delivery_timestamp=deliver))
    half = send(v2, message(topic="Parked", message_id="HALF", message_type=d.TRANSACTION))
    assert delayed.status.code == half.status.code == d.OK
    assert delayed.entries[0].recall_handle and half.entries[0].transaction_id == "HALF"
    [timer] = wait_stored(store_stub, "rmq_sys_wheel_timer", "DELAYED")
    assert timer.properties["REAL_TOPIC"] == "Parked" and timer.properties["TIMER_DELIVER_MS"] == str(
        deliver.seconds * 1000
    )
    assert timer.properties["TIMER_OUT_MS"] == str(deliver.seconds * 1000 - 1000)
    [halfrec] = wait_stored(store_stub, "RMQ_SYS_TRANS_HALF_TOPIC", "HALF")
    assert halfrec.properties["TRAN_MSG"] == "true" and halfrec.properties["__transactionId__"] == "HALF"
    assert all(stored(store_stub, "Parked", q) == [] for q in range(8))  # nothing visible yet


def test_concurrent_sends_share_store_calls(make_broker, topics):
    topics("Burst")
    # Shedding off: on a loaded CI machine one of 64 concurrent sends may wait longer than
    # put_queue_wait_max_ms for a worker and be refused TOO_MANY_REQUESTS, by design (the
    # overload tests cover that); this test is about coalescing only.
    broker = make_broker(put_queue_wait_max_ms=0)
    before = broker.sink.stats()
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        v2 = s_grpc.MessagingServiceStub(channel)
        futures = [
            v2.SendMessage.future(
                s.SendMessageRequest(messages=[message(topic="Burst", message_id=f"B{i}")]),
                metadata=METADATA,
                timeout=10,
            )
            for i in range(64)
        ]
        statuses = [f.result().status for f in futures]
    assert all(st.code == d.OK for st in statuses), [st for st in statuses if st.code != d.OK][:3]
    after = broker.sink.stats()
    assert after.messages - before.messages == 64
    assert after.put_calls - before.put_calls < 64


# -- Telemetry, Heartbeat, NotifyClientTermination -------------------------------------------


def test_producer_settings_reply_and_the_stream_stays_open(broker, v2):
    stream = Stream(v2)
    reply = stream.send(producer_settings("TopicTest"))
    assert reply.status.code == d.OK
    settings = reply.settings
    assert settings.client_type == d.PRODUCER and [r.name for r in settings.publishing.topics] == ["TopicTest"]
    assert settings.publishing.max_body_size == 4194304 and settings.publishing.validate_message_type
    backoff = settings.backoff_policy
    assert backoff.max_attempts == 3 and backoff.WhichOneof("strategy") == "exponential_backoff"
    assert backoff.exponential_backoff.initial == Duration(nanos=10_000_000)
    assert backoff.exponential_backoff.max == Duration(seconds=1) and backoff.exponential_backoff.multiplier == 2
    assert settings.metric.on is False and settings.user_agent.version == "5.1.2"
    assert [sess.client_id for sess in broker.telemetry.registry.producers_of("TopicTest")] == [CLIENT_ID]
    # The stream is still open: a second settings command gets a second reply.
    assert stream.send(producer_settings("TopicTest", "Other")).status.code == d.OK
    assert [sess.client_id for sess in broker.telemetry.registry.producers_of("Other")] == [CLIENT_ID]
    # The server can push a command onto it (how transaction checks will reach the producer).
    session = broker.telemetry.registry.get(CLIENT_ID)
    session.push(
        s.TelemetryCommand(
            recover_orphaned_transaction_command=s.RecoverOrphanedTransactionCommand(transaction_id="TX")
        )
    )
    assert stream.replies.get(timeout=10).recover_orphaned_transaction_command.transaction_id == "TX"
    stream.call.cancel()
    wait_until(lambda: broker.telemetry.registry.get(CLIENT_ID) is None, 10, "the session gone with its stream")


def test_consumer_settings_reply(v2, store_stub):
    store_stub.CreateOrUpdateGroup(
        pb.CreateOrUpdateGroupRequest(
            config=pb.SubscriptionGroupConfig(
                group_name="OrderlyGroup", consume_message_orderly=True, retry_max_times=4
            )
        ),
        timeout=10,
    )
    stream = Stream(v2)
    reply = stream.send(
        s.TelemetryCommand(
            settings=d.Settings(
                client_type=d.PUSH_CONSUMER, subscription=d.Subscription(group=d.Resource(name="OrderlyGroup"))
            )
        )
    )
    assert reply.status.code == d.OK
    sub = reply.settings.subscription
    assert sub.fifo and sub.receive_batch_size == 32 and sub.long_polling_timeout == Duration(seconds=20)
    backoff = reply.settings.backoff_policy
    assert backoff.max_attempts == 5 and backoff.WhichOneof("strategy") == "customized_backoff"
    assert [x.seconds for x in backoff.customized_backoff.next][:4] == [1, 5, 10, 30]
    stream.call.cancel()


def test_settings_without_publishing_or_subscription_close_the_stream(v2):
    stream = Stream(v2)
    error = stream.send(s.TelemetryCommand(settings=d.Settings(client_type=d.PRODUCER)))
    assert isinstance(error, grpc.RpcError) and error.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_heartbeat_and_termination_are_ok(v2):
    # Before its Settings a client is unknown (the proxy's UNRECOGNIZED_CLIENT_TYPE); after, OK.
    assert (
        v2.Heartbeat(s.HeartbeatRequest(client_type=d.PRODUCER), metadata=METADATA, timeout=10).status.code
        == d.UNRECOGNIZED_CLIENT_TYPE
    )
    from tests.support.v2_samples import producer_settings

    settings_sent = threading.Event()

    def commands():
        yield s.TelemetryCommand(settings=producer_settings())
        settings_sent.wait(10)

    stream = v2.Telemetry(commands(), metadata=METADATA, timeout=10)
    assert next(stream).HasField("settings")
    assert v2.Heartbeat(s.HeartbeatRequest(client_type=d.PRODUCER), metadata=METADATA, timeout=10).status.code == d.OK
    settings_sent.set()
    stream.cancel()
    response = v2.NotifyClientTermination(s.NotifyClientTerminationRequest(), metadata=METADATA, timeout=10)
    assert response.status.code == d.OK
    # Node aborts its shutdown on a failed termination: OK even without a client id.
    assert v2.NotifyClientTermination(s.NotifyClientTerminationRequest(), timeout=10).status.code == d.OK
    assert v2.Heartbeat(s.HeartbeatRequest(), timeout=10).status.code == d.CLIENT_ID_REQUIRED


# -- consumer RPCs and RecallMessage: empty requests are refused in band ----------------------


def test_empty_consumer_requests_answer_a_status(v2):
    replies = list(
        v2.ReceiveMessage(s.ReceiveMessageRequest(group=d.Resource(name="G")), metadata=METADATA, timeout=10)
    )
    assert [r.status.code for r in replies if r.HasField("status")] == [d.ILLEGAL_TOPIC]
    assert replies[-1].HasField("delivery_timestamp")
    for call, request in [
        (v2.AckMessage, s.AckMessageRequest()),
        (v2.ChangeInvisibleDuration, s.ChangeInvisibleDurationRequest()),
        (v2.ForwardMessageToDeadLetterQueue, s.ForwardMessageToDeadLetterQueueRequest()),
        (v2.QueryAssignment, s.QueryAssignmentRequest()),
    ]:
        assert call(request, metadata=METADATA, timeout=10).status.code == d.ILLEGAL_CONSUMER_GROUP
    assert v2.RecallMessage(s.RecallMessageRequest(), metadata=METADATA, timeout=10).status.code == d.ILLEGAL_TOPIC


def test_health_and_reflection(broker):
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="apache.rocketmq.v2.MessagingService"), timeout=10
        )
    assert response.status == health_pb2.HealthCheckResponse.SERVING
