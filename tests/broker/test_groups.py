"""One broker over two broker groups (issue 17): routes, sends, receives, acks, assignments,
offsets, transactions and recalls go to the right group (tests/support/broker_groups.py: two
real stores, the routes given by the test instead of etcd)."""

from __future__ import annotations

import time
from collections import Counter

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from google.protobuf.timestamp_pb2 import Timestamp
from pyrmq.pull.v1 import pull_pb2 as pull_pb
from pyrmq.pull.v1 import pull_pb2_grpc as pull_grpc

from services.domain.routes import select_write_queue
from services.store.client.model import TopicInfo
from tests.support.broker_groups import GROUP_A, GROUP_B, TwoGroups, two_groups
from tests.support.v2_requests import METADATA, ack, change, end, message, receive, send
from tests.support.waits import wait_until

TOPIC = "Spread"


@pytest.fixture
def groups(tmp_path) -> TwoGroups:
    with two_groups(tmp_path) as cluster:
        cluster.create(TOPIC)
        yield cluster


def query_route(v2, topic=TOPIC) -> s.QueryRouteResponse:
    return v2.QueryRoute(s.QueryRouteRequest(topic=d.Resource(name=topic)), metadata=METADATA, timeout=10)


def send_many(groups: TwoGroups, count, topic=TOPIC, **system) -> list[s.SendResultEntry]:
    """Send ``count`` messages, each acknowledged OK; return once both stores have dispatched
    them (a send is acknowledged after the CommitLog append, the ConsumeQueues follow it: a
    receive, pull or offset query at once could miss the last ones)."""
    entries = []
    for i in range(count):
        response = send(groups.v2, message(topic, body=b"m%d" % i, message_id=f"{i:032X}", **system))
        assert response.status.code == d.OK, response.status
        entries.extend(response.entries)
    for group in (GROUP_A, GROUP_B):
        groups.dispatched(group)
    return entries


def test_route_lists_every_queue_of_both_groups_sorted_by_group(groups: TwoGroups) -> None:
    response = query_route(groups.v2)
    assert response.status.code == d.OK
    queues = [(q.broker.name, q.id, d.Permission.Name(q.permission)) for q in response.message_queues]
    assert queues == [(g, i, "READ_WRITE") for g in (GROUP_A, GROUP_B) for i in range(4)]
    assert {q.broker.id for q in response.message_queues} == {0}
    assert {q.broker.endpoints.addresses[0].port for q in response.message_queues} == {groups.broker.endpoint[1]}


def test_a_group_that_is_down_keeps_its_queues_without_permission(groups: TwoGroups) -> None:
    groups.mark_down(GROUP_B)
    queues = [(q.broker.name, q.id, d.Permission.Name(q.permission)) for q in query_route(groups.v2).message_queues]
    assert queues == [(GROUP_A, i, "READ_WRITE") for i in range(4)] + [(GROUP_B, i, "NONE") for i in range(4)]


def test_sends_spread_round_robin_over_both_groups(groups: TwoGroups) -> None:
    send_many(groups, 16)
    assert groups.depth(GROUP_A, TOPIC) == [2, 2, 2, 2]
    assert groups.depth(GROUP_B, TOPIC) == [2, 2, 2, 2]


def test_a_fifo_message_group_keeps_its_queue_over_all_groups(groups: TwoGroups) -> None:
    route = groups.routes.routes[TOPIC]
    for message_group in ("order-1", "order-2", "order-3", "order-17"):
        before = {g: groups.depth(g, TOPIC) for g in (GROUP_A, GROUP_B)}
        send_many(groups, 3, message_group=message_group, message_type=d.FIFO)
        group, queue_id = select_write_queue(route, 0, message_group)
        after = {g: groups.depth(g, TOPIC) for g in (GROUP_A, GROUP_B)}
        grown = [(g, q) for g in after for q in range(4) if after[g][q] != before[g][q]]
        assert grown == [(group, queue_id)]
        assert after[group][queue_id] - before[group][queue_id] == 3


def test_sends_skip_a_group_that_is_down(groups: TwoGroups) -> None:
    groups.mark_down(GROUP_B)
    send_many(groups, 8)
    assert sum(groups.depth(GROUP_A, TOPIC)) == 8
    assert sum(groups.depth(GROUP_B, TOPIC)) == 0


def test_a_send_that_fails_on_a_dead_group_goes_to_the_other_at_once(groups: TwoGroups) -> None:
    groups.stop_store(GROUP_B)  # not known to be down: the first sends to it fail and move over
    started = time.monotonic()
    send_many(groups, 8)
    assert sum(groups.depth(GROUP_A, TOPIC)) == 8
    assert time.monotonic() - started < 8  # each failure is immediate, not a timeout
    assert groups.broker.producer is not None and groups.broker.producer.sent_elsewhere >= 1


def test_a_group_without_the_topic_in_its_store_hands_the_send_to_the_other(groups: TwoGroups) -> None:
    groups.create("OnlyA")  # the route names both groups, but broker-b's store loses the topic
    groups.stores[GROUP_B].delete_topic("OnlyA")
    send_many(groups, 6, topic="OnlyA")
    assert sum(groups.depth(GROUP_A, "OnlyA")) == 6


def test_assignment_has_one_entry_per_group_and_receives_follow_it(groups: TwoGroups) -> None:
    send_many(groups, 8)
    response = groups.v2.QueryAssignment(
        s.QueryAssignmentRequest(topic=d.Resource(name=TOPIC), group=d.Resource(name="G1")),
        metadata=METADATA,
        timeout=10,
    )
    assert response.status.code == d.OK, response.status
    assigned = [(a.message_queue.broker.name, a.message_queue.id) for a in response.assignments]
    assert assigned == [(GROUP_A, -1), (GROUP_B, -1)]

    bodies: Counter[bytes] = Counter()
    handles = {}
    for group in (GROUP_A, GROUP_B):
        status, messages, _ = receive(groups.v2, TOPIC, broker=group, polling_s=1)
        assert status.code == d.OK, status
        assert len(messages) == 4
        for m in messages:
            bodies[m.body] += 1
            handles[m.body] = (group, m.system_properties.receipt_handle)
    assert sorted(bodies) == sorted(b"m%d" % i for i in range(8)) and set(bodies.values()) == {1}
    b_handles = [h for g, h in handles.values() if g == GROUP_B]
    assert all(h.startswith(GROUP_B + "/") for h in b_handles)
    assert all("/" not in h for g, h in handles.values() if g == GROUP_A)

    # One AckMessage with handles of both groups: each acked in its own group, answers in order.
    request = s.AckMessageRequest(
        group=d.Resource(name="G1"),
        topic=d.Resource(name=TOPIC),
        entries=[s.AckMessageEntry(message_id="x", receipt_handle=h) for _, h in handles.values()],
    )
    answer = groups.v2.AckMessage(request, metadata=METADATA, timeout=10)
    assert answer.status.code == d.OK, answer.status
    assert [e.status.code for e in answer.entries] == [d.OK] * 8
    for group in (GROUP_A, GROUP_B):
        status, messages, _ = receive(groups.v2, TOPIC, broker=group, polling_s=1, invisible_s=1)
        assert messages == []


def test_change_invisible_and_dead_letter_follow_the_handle_group(groups: TwoGroups) -> None:
    send_many(groups, 8)
    _, messages, _ = receive(groups.v2, TOPIC, broker=GROUP_B, polling_s=1)
    first, second = messages[0], messages[1]
    changed = change(groups.v2, TOPIC, first.system_properties.receipt_handle, 0)
    assert changed.status.code == d.OK, changed.status
    assert changed.receipt_handle.startswith(GROUP_B + "/")
    _, again, _ = receive(groups.v2, TOPIC, broker=GROUP_B, polling_s=2, batch_size=1)
    assert [m.body for m in again] == [first.body]
    assert ack(groups.v2, TOPIC, again[0].system_properties.receipt_handle).status.code == d.OK

    forwarded = groups.v2.ForwardMessageToDeadLetterQueue(
        s.ForwardMessageToDeadLetterQueueRequest(
            group=d.Resource(name="G1"),
            topic=d.Resource(name=TOPIC),
            receipt_handle=second.system_properties.receipt_handle,
            message_id=second.system_properties.message_id,
            delivery_attempt=1,
            max_delivery_attempts=16,
        ),
        metadata=METADATA,
        timeout=10,
    )
    assert forwarded.status.code == d.OK, forwarded.status
    wait_until(lambda: groups.stores[GROUP_B].queue_offsets("%DLQ%G1", 0)[1] == 1, 5)  # dispatch runs behind the append
    assert groups.stores[GROUP_A].get_topic("%DLQ%G1") is None


def test_a_handle_of_an_unknown_group_is_invalid(groups: TwoGroups) -> None:
    assert ack(groups.v2, TOPIC, "broker-z/abcd").entries[0].status.code == d.INVALID_RECEIPT_HANDLE


def test_offsets_and_pulls_go_to_the_named_group(groups: TwoGroups) -> None:
    send_many(groups, 8)
    queue = d.MessageQueue(topic=d.Resource(name=TOPIC), id=1, broker=d.Broker(name=GROUP_B))
    latest = groups.v2.QueryOffset(
        s.QueryOffsetRequest(message_queue=queue, query_offset_policy=d.END), metadata=METADATA, timeout=10
    )
    assert latest.status.code == d.OK and latest.offset == groups.depth(GROUP_B, TOPIC)[1] == 1
    pulled = list(
        groups.v2.PullMessage(
            s.PullMessageRequest(
                group=d.Resource(name="P1"),
                message_queue=queue,
                offset=0,
                batch_size=8,
                filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
            ),
            metadata=METADATA,
            timeout=10,
        )
    )
    assert len([r.message for r in pulled if r.HasField("message")]) == 1
    updated = groups.v2.UpdateOffset(
        s.UpdateOffsetRequest(group=d.Resource(name="P1"), message_queue=queue, offset=1), metadata=METADATA, timeout=10
    )
    assert updated.status.code == d.OK
    assert groups.stores[GROUP_B].query_consumer_offset("P1", TOPIC, 1) == 1
    assert groups.stores[GROUP_A].query_consumer_offset("P1", TOPIC, 1) < 0


def test_end_transaction_finds_the_half_in_its_group_from_any_broker(groups: TwoGroups) -> None:
    entries = send_many(groups, 5, message_type=d.TRANSACTION, orphaned_transaction_recovery_duration={"seconds": 30})
    for core in groups.broker.broker_groups.cores():
        core.halves = type(core.halves)()  # as another broker of the cluster: nothing remembered
        core.transactions._halves = core.halves
    for entry in entries:
        answer = end(groups.v2, TOPIC, entry.transaction_id, d.COMMIT)
        assert answer.status.code == d.OK, answer.status
    # Round-robin over a0, b0, a1, b1, ... put three halves in broker-a and two in broker-b;
    # each commit lands in its half's group.
    wait_until(lambda: sum(groups.depth(GROUP_A, TOPIC)) == 3 and sum(groups.depth(GROUP_B, TOPIC)) == 2, 5)
    assert end(groups.v2, TOPIC, "F" * 32, d.COMMIT).status.code == d.INVALID_TRANSACTION_ID


def test_recall_goes_to_the_group_in_the_handle(groups: TwoGroups) -> None:
    later = Timestamp()
    later.FromMilliseconds(int(time.time() * 1000) + 60_000)
    entries = send_many(groups, 5, message_type=d.DELAY, delivery_timestamp=later)  # 3 to broker-a, 2 to broker-b
    for entry in entries:
        recalled = groups.v2.RecallMessage(
            s.RecallMessageRequest(topic=d.Resource(name=TOPIC), recall_handle=entry.recall_handle),
            metadata=METADATA,
            timeout=10,
        )
        assert recalled.status.code == d.OK, recalled.status
    for group, count in ((GROUP_A, 3), (GROUP_B, 2)):  # each timer message and its recall marker
        wait_until(lambda g=group, n=count: groups.stores[g].queue_offsets("rmq_sys_wheel_timer", 0)[1] == 2 * n, 5)


def test_a_topic_without_a_route_stays_on_the_home_group(groups: TwoGroups) -> None:
    groups.stores[GROUP_A].create_topic(TopicInfo("Home", 2, 2, 6, "MIXED"))
    queues = [(q.broker.name, q.id) for q in query_route(groups.v2, "Home").message_queues]
    assert queues == [(GROUP_A, 0), (GROUP_A, 1)]
    send_many(groups, 4, topic="Home")
    assert groups.depth(GROUP_A, "Home", 2) == [2, 2]


def test_pull_records_go_to_the_named_group(groups: TwoGroups) -> None:
    send_many(groups, 8)  # one message in each queue of each group (a0, b0, a1, b1, ...)
    with grpc.insecure_channel(f"127.0.0.1:{groups.broker.port}") as channel:
        stub = pull_grpc.PullStub(channel)

        def pull(broker_name: str) -> pull_pb.PullRecordsResponse:
            request = pull_pb.PullRecordsRequest(topic=TOPIC, queue_id=1, broker_name=broker_name, queue_offset=0)
            [response] = list(stub.PullRecords(request, timeout=10))
            return response

        for group in (GROUP_A, GROUP_B, ""):  # "": the home group
            response = pull(group)
            assert response.status.code == d.OK and response.record_count == 1, response.status
            assert response.max_offset == groups.depth(group or GROUP_A, TOPIC)[1]
        assert pull("broker-z").status.code == d.BAD_REQUEST  # not a group of this cluster


def test_broker_metrics_add_up_every_group(tmp_path) -> None:
    """The send queue's counters, and each consumer group's lag on a topic, over both groups
    (broker_group_stats.py), not the home group's alone; a group away leaves the others' figures."""
    from services.broker.metrics import BrokerMetrics

    metrics = BrokerMetrics()
    with two_groups(tmp_path, metrics=metrics) as cluster:
        cluster.create(TOPIC)
        send_many(cluster, 8)
        assert [sum(cluster.depth(g, TOPIC)) for g in (GROUP_A, GROUP_B)] == [4, 4]
        sample = lambda name, **labels: metrics.registry.get_sample_value(name, labels)  # noqa: E731
        assert sample("pyrmq_broker_store_put_messages_total") == 8
        _, messages, _ = receive(cluster.v2, TOPIC, group="G", broker=GROUP_B, polling_s=1)
        assert messages  # makes G's offsets in broker-b: 4 lagging there, and 4 in broker-a once it starts there
        _, messages_a, _ = receive(cluster.v2, TOPIC, group="G", broker=GROUP_A, polling_s=1)
        assert messages_a
        lag = sample("rocketmq_consumer_lag_messages", consumer_group="G", topic=TOPIC)
        inflight = sample("rocketmq_consumer_inflight_messages", consumer_group="G", topic=TOPIC)
        assert lag == 8 and inflight == len(messages) + len(messages_a)
        cluster.stop_store(GROUP_B)
        assert sample("rocketmq_consumer_inflight_messages", consumer_group="G", topic=TOPIC) == len(messages_a)
