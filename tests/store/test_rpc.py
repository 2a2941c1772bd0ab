"""The Store gRPC service over the wire: a real FileStore behind a real server on 127.0.0.1:0."""

from __future__ import annotations

import socket
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from pyrmq.store.v1 import store_pb2 as pb

from services.domain.format.commitlog_format import SYSFLAG_TRANSACTION_COMMIT_TYPE, MessageRecord
from services.domain.statuses import PutStatus
from services.runtime.metrics import MetricsHttpServer
from services.store.errors import ServiceNotAvailableError
from services.store.model import Arrival, PutResult
from services.store.rpc import convert
from services.store.rpc.servicer import ArrivalWatcher
from services.store.rpc.status import check_put_batch
from tests.support.store_rpc import RPC_TIMEOUT_S, TOPIC, Served, message
from tests.support.waits import wait_until


def test_put_then_get_round_trips_every_field(served: Served) -> None:
    results = served.put(message(b"one", TAGS="a", KEYS="k1"), message(b"two", TAGS="b"), message(b"three"))
    assert [r.status for r in results] == [pb.PUT_OK] * 3
    assert [r.queue_offset for r in results] == [0, 1, 2]
    assert results[0].phy_offset == 0 < results[1].phy_offset < results[2].phy_offset
    assert all(r.offset_msg_id and r.store_timestamp_ms > 0 and r.wrote_bytes > 0 for r in results)
    served.wait_dispatched(3)

    got = served.get(0)
    assert got.status == pb.FOUND
    assert (got.next_begin_offset, got.min_offset, got.max_offset) == (3, 0, 3)
    assert [m.body for m in got.messages] == [b"one", b"two", b"three"]
    first = got.messages[0]
    assert first.topic == TOPIC and first.queue_id == 0 and first.queue_offset == 0
    assert first.properties["TAGS"] == "a" and first.properties["KEYS"] == "k1"
    assert first.born_host == "10.1.2.3:54321" and first.born_timestamp_ms == 1_700_000_000_000
    assert first.phy_offset == results[0].phy_offset
    assert first.offset_msg_id == results[0].offset_msg_id
    assert first.store_timestamp_ms == results[0].store_timestamp_ms
    assert first.store_size_bytes == results[0].wrote_bytes and first.body_crc != 0


def test_get_with_tags_filter_and_limits(served: Served) -> None:
    served.put(message(b"a", TAGS="a"), message(b"b", TAGS="b"), message(b"c", TAGS="a"))
    served.wait_dispatched(3)
    only_b = served.get(0, tags_codes=[ord("b")])  # Java String.hashCode of "b"
    assert [m.body for m in only_b.messages] == [b"b"]
    assert [m.body for m in served.get(0, max_count=2).messages] == [b"a", b"b"]


def test_get_statuses(served: Served) -> None:
    served.put(message(b"x"), message(b"y"))
    served.wait_dispatched(2)
    overflow_one = served.get(2)
    assert overflow_one.status == pb.OFFSET_OVERFLOW_ONE and overflow_one.next_begin_offset == 2
    assert served.get(7).status == pb.OFFSET_OVERFLOW_BADLY
    assert served.get(-1).status == pb.OFFSET_TOO_SMALL
    assert served.get(0, queue_id=3).status == pb.NO_MESSAGE_IN_QUEUE


def test_look_message_by_phy_offset(served: Served) -> None:
    [result] = served.put(message(b"look"), message(b"other"))[:1]
    found = served.stub.LookMessageByPhyOffset(pb.LookMessageByPhyOffsetRequest(phy_offset=result.phy_offset))
    assert found.body == b"look" and found.offset_msg_id == result.offset_msg_id
    with pytest.raises(grpc.RpcError) as missing:
        served.stub.LookMessageByPhyOffset(pb.LookMessageByPhyOffsetRequest(phy_offset=1 << 40))
    assert missing.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as negative:
        served.stub.LookMessageByPhyOffset(pb.LookMessageByPhyOffsetRequest(phy_offset=-5))
    assert negative.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_look_message_by_offset_msg_id(served: Served) -> None:
    served.put(message(b"first"))
    [result] = served.put(message(b"second"))
    found = served.stub.LookMessageByOffsetMsgId(pb.LookMessageByOffsetMsgIdRequest(offset_msg_id=result.offset_msg_id))
    assert found.body == b"second" and found.phy_offset == result.phy_offset


@pytest.mark.parametrize("bad_id", ["", "XYZ", "Z" * 32, "0A" * 15])
def test_malformed_offset_msg_id_is_invalid_argument(served: Served, bad_id: str) -> None:
    with pytest.raises(grpc.RpcError) as error:
        served.stub.LookMessageByOffsetMsgId(pb.LookMessageByOffsetMsgIdRequest(offset_msg_id=bad_id))
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "offset_msg_id" in error.value.details()


def test_query_messages_by_key(served: Served) -> None:
    served.put(message(b"order", KEYS="order-1 order-2"), message(b"noise", KEYS="other"))
    served.wait_dispatched(2)

    def query(key: str) -> list[bytes]:
        response = served.stub.QueryMessagesByKey(pb.QueryMessagesByKeyRequest(topic=TOPIC, key=key, max_num=10))
        return [m.body for m in response.messages]

    wait_until(lambda: query("order-2") == [b"order"])
    assert query("order-1") == [b"order"]
    assert query("missing") == []


def test_queue_offsets_and_offset_by_timestamp(served: Served) -> None:
    results = served.put(message(b"1"), message(b"2"))
    served.wait_dispatched(2)
    offsets = served.stub.GetQueueOffsets(pb.GetQueueOffsetsRequest(topic=TOPIC, queue_id=0))
    assert (offsets.min_offset, offsets.max_offset) == (0, 2)
    by_time = served.stub.GetOffsetByTimestamp(
        pb.GetOffsetByTimestampRequest(topic=TOPIC, queue_id=0, timestamp_ms=results[0].store_timestamp_ms)
    )
    assert by_time.queue_offset == 0


def test_consumer_offsets(served: Served) -> None:
    query = pb.QueryConsumerOffsetRequest(group="G1", topic=TOPIC, queue_id=1)
    assert served.stub.QueryConsumerOffset(query).offset == -1
    served.stub.CommitConsumerOffset(pb.CommitConsumerOffsetRequest(group="G1", topic=TOPIC, queue_id=1, offset=42))
    served.stub.CommitConsumerOffset(pb.CommitConsumerOffsetRequest(group="G1", topic=TOPIC, queue_id=0, offset=7))
    assert served.stub.QueryConsumerOffset(query).offset == 42
    offsets = served.stub.GetGroupOffsets(pb.GetGroupOffsetsRequest(group="G1")).offsets
    assert [(o.topic, o.queue_id, o.offset) for o in offsets] == [(TOPIC, 0, 7), (TOPIC, 1, 42)]
    with pytest.raises(grpc.RpcError) as error:
        served.stub.CommitConsumerOffset(pb.CommitConsumerOffsetRequest(group="G1", topic=TOPIC, offset=-3))
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_topic_crud(served: Served) -> None:
    created = served.stub.CreateOrUpdateTopic(
        pb.CreateOrUpdateTopicRequest(
            config=pb.TopicConfig(topic_name="Orders", read_queue_nums=4, write_queue_nums=4, message_type=pb.FIFO)
        )
    )
    assert (created.read_queue_nums, created.perm, created.message_type) == (4, 6, pb.FIFO)
    assert created.topic_filter_type == pb.SINGLE_TAG
    assert served.stub.GetTopic(pb.GetTopicRequest(topic_name="Orders")) == created
    names = [t.topic_name for t in served.stub.ListTopics(pb.ListTopicsRequest()).topics]
    assert "Orders" in names and names == sorted(names)

    updated = served.stub.CreateOrUpdateTopic(
        pb.CreateOrUpdateTopicRequest(config=pb.TopicConfig(topic_name="Orders", write_queue_nums=2))
    )
    assert updated.write_queue_nums == 2 and updated.message_type == pb.NORMAL

    assert served.stub.DeleteTopic(pb.DeleteTopicRequest(topic_name="Orders")).existed
    assert not served.stub.DeleteTopic(pb.DeleteTopicRequest(topic_name="Orders")).existed
    with pytest.raises(grpc.RpcError) as error:
        served.stub.GetTopic(pb.GetTopicRequest(topic_name="Orders"))
    assert error.value.code() is grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as bad:
        served.stub.CreateOrUpdateTopic(pb.CreateOrUpdateTopicRequest(config=pb.TopicConfig(topic_name="a b")))
    assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_group_crud(served: Served) -> None:
    created = served.stub.CreateOrUpdateGroup(
        pb.CreateOrUpdateGroupRequest(config=pb.SubscriptionGroupConfig(group_name="G1", consume_message_orderly=True))
    )
    assert created.consume_enable and created.retry_max_times == 16 and created.consume_message_orderly
    assert served.stub.GetGroup(pb.GetGroupRequest(group_name="G1")) == created
    assert "G1" in [g.group_name for g in served.stub.ListGroups(pb.ListGroupsRequest()).groups]
    assert served.stub.DeleteGroup(pb.DeleteGroupRequest(group_name="G1")).existed
    assert not served.stub.DeleteGroup(pb.DeleteGroupRequest(group_name="G1")).existed
    with pytest.raises(grpc.RpcError) as error:
        served.stub.GetGroup(pb.GetGroupRequest(group_name="G1"))
    assert error.value.code() is grpc.StatusCode.NOT_FOUND


def test_delay_offsets_and_stats(served: Served) -> None:
    assert served.stub.GetDelayOffset(pb.GetDelayOffsetRequest(level=3)).offset == 0
    served.stub.UpdateDelayOffset(pb.UpdateDelayOffsetRequest(level=3, offset=9))
    assert served.stub.GetDelayOffset(pb.GetDelayOffsetRequest(level=3)).offset == 9
    [result] = served.put(message(b"counted"))
    stats = served.stub.GetStats(pb.GetStatsRequest())
    assert stats.put_messages_total == 1 and stats.put_bytes_total == result.wrote_bytes
    assert stats.commitlog_max_offset == result.wrote_bytes and stats.flush_mode == "ASYNC_FLUSH"


def test_bad_put_input(served: Served) -> None:
    with pytest.raises(grpc.RpcError) as error:
        served.put(pb.Message(topic=TOPIC, body=b"x", born_host="not-a-host"))
    assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "born_host" in error.value.details()
    [illegal] = served.put(pb.Message(topic="bad topic", body=b"x"))
    assert illegal.status == pb.TOPIC_ILLEGAL and illegal.error and illegal.phy_offset == -1
    [system] = served.put(pb.Message(topic="SCHEDULE_TOPIC_XXXX", body=b"x"))
    assert system.status == pb.TOPIC_ILLEGAL
    [allowed] = served.put(pb.Message(topic="SCHEDULE_TOPIC_XXXX", body=b"x"), allow_system_topics=True)
    assert allowed.status == pb.PUT_OK


def test_batch_results_carry_the_same_outcome_as_per_message_results(served: Served) -> None:
    """batch_results: one status and packed columns, equal to what per-message results say."""
    messages = [message(b"one", TAGS="a"), message(b"two", queue_id=1), message(b"three")]
    response = served.stub.PutMessages(
        pb.PutMessagesRequest(messages=messages, batch_results=True), timeout=RPC_TIMEOUT_S
    )
    assert not response.results and response.HasField("batch")
    batch = response.batch
    assert batch.status == pb.PUT_OK and not batch.error
    assert list(batch.queue_offset) == [0, 0, 1]
    assert batch.phy_offset[0] == 0 < batch.phy_offset[1] < batch.phy_offset[2]
    assert batch.store_timestamp_ms > 0 and all(size > 0 for size in batch.wrote_bytes)
    served.wait_dispatched(2)
    for phy_offset, wrote_bytes in zip(batch.phy_offset, batch.wrote_bytes):
        stored = served.stub.LookMessageByPhyOffset(
            pb.LookMessageByPhyOffsetRequest(phy_offset=phy_offset), timeout=RPC_TIMEOUT_S
        )
        assert stored.store_size_bytes == wrote_bytes and stored.store_timestamp_ms == batch.store_timestamp_ms
        assert stored.offset_msg_id == (batch.store_host_prefix + phy_offset.to_bytes(8, "big")).hex().upper()
    # Both answer forms count the same queues on.
    per_message = served.put(*messages)
    assert [r.queue_offset for r in per_message] == [2, 1, 3]
    again = served.stub.PutMessages(
        pb.PutMessagesRequest(messages=messages, batch_results=True), timeout=RPC_TIMEOUT_S
    ).batch
    assert list(again.queue_offset) == [4, 2, 5]
    assert again.phy_offset[0] == per_message[-1].phy_offset + per_message[-1].wrote_bytes
    # A refused batch: the status and reason, no columns, nothing written.
    before = served.store.commitlog.max_offset
    refused = served.stub.PutMessages(
        pb.PutMessagesRequest(messages=[message(b"ok"), pb.Message(topic="bad topic", body=b"x")], batch_results=True),
        timeout=RPC_TIMEOUT_S,
    ).batch
    assert refused.status == pb.TOPIC_ILLEGAL and "message 1 of the batch" in refused.error
    assert not refused.phy_offset and not refused.queue_offset and not refused.wrote_bytes
    assert served.store.commitlog.max_offset == before


def test_put_after_shutdown_is_unavailable(served: Served) -> None:
    served.store.shutdown()
    with pytest.raises(grpc.RpcError) as error:
        served.put(message(b"late"))
    assert error.value.code() is grpc.StatusCode.UNAVAILABLE


def test_watch_arrivals_announces_a_put(served: Served) -> None:
    stream = served.stub.WatchArrivals(pb.WatchArrivalsRequest(topics=[TOPIC]), timeout=RPC_TIMEOUT_S)
    try:
        assert not next(stream).arrivals  # subscribed
        served.put(pb.Message(topic="ElseWhere", body=b"ignored"))
        served.put(message(b"1", queue_id=2), message(b"2", queue_id=2))
        arrivals = []
        while not any(a.max_offset == 2 for a in arrivals):
            arrivals.extend(next(stream).arrivals)
        assert {(a.topic, a.queue_id) for a in arrivals} == {(TOPIC, 2)}
        assert all(a.store_timestamp_ms > 0 for a in arrivals)
    finally:
        stream.cancel()


def test_too_many_watchers_is_resource_exhausted(served: Served) -> None:
    streams = [served.stub.WatchArrivals(pb.WatchArrivalsRequest(), timeout=RPC_TIMEOUT_S) for _ in range(4)]
    try:
        for stream in streams[:4]:  # max_workers=8 -> at most 4 watchers
            next(stream)
        extra = served.stub.WatchArrivals(pb.WatchArrivalsRequest(), timeout=RPC_TIMEOUT_S)
        with pytest.raises(grpc.RpcError) as error:
            next(extra)
        assert error.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        for stream in streams:
            stream.cancel()


def test_arrival_watcher_coalesces_per_queue_when_full() -> None:
    watcher = ArrivalWatcher(frozenset(), buffer_arrivals_max=2)
    watcher.offer([Arrival("T", 0, 1, 10), Arrival("T", 1, 1, 10)])  # fills the buffer
    watcher.offer([Arrival("T", 0, 2, 11), Arrival("T", 0, 3, 12), Arrival("T", 1, 2, 12)])
    arrivals, coalesced = watcher.take(timeout_s=0)
    assert [(a.queue_id, a.max_offset) for a in arrivals] == [(0, 1), (1, 1), (0, 3), (1, 2)]
    assert coalesced == 1
    assert watcher.take(timeout_s=0) == ([], 0)
    watcher.close()
    assert watcher.take(timeout_s=0) is None


def test_check_put_batch_only_fails_a_wholly_unavailable_batch() -> None:
    check_put_batch([PutResult(PutStatus.PUT_OK), PutResult(PutStatus.SERVICE_NOT_AVAILABLE)])
    check_put_batch([PutResult(PutStatus.MESSAGE_ILLEGAL)])
    with pytest.raises(ServiceNotAvailableError, match="disk full"):
        check_put_batch([PutResult(PutStatus.SERVICE_NOT_AVAILABLE, error="disk full")])


def test_health_and_reflection(served: Served) -> None:
    health = health_pb2_grpc.HealthStub(served.channel)
    for service in ("", "pyrmq.store.v1.Store"):
        response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=RPC_TIMEOUT_S)
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(served.channel)
    [answer] = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {s.name for s in answer.list_services_response.service}
    assert {"pyrmq.store.v1.Store", "grpc.health.v1.Health"} <= names


def test_metrics_endpoint_after_a_put(served: Served) -> None:
    served.put(message(b"metered"))
    with pytest.raises(grpc.RpcError):
        served.stub.GetTopic(pb.GetTopicRequest(topic_name="Nope"))
    http = MetricsHttpServer(served.metrics.registry, 0)
    try:
        with urllib.request.urlopen(http.url, timeout=RPC_TIMEOUT_S) as response:
            text = response.read().decode()
    finally:
        http.close()
    for name in (
        "rocketmq_storage_size",
        "rocketmq_storage_flush_behind_bytes",
        "rocketmq_storage_dispatch_behind_bytes",
        "rocketmq_topic_number",
        "rocketmq_consumer_group_number",
        "pyrmq_store_commitlog_max_offset_bytes",
        "pyrmq_store_put_messages_total 1.0",
        "pyrmq_store_put_bytes_total",
        "pyrmq_store_put_latency_seconds_bucket",
        "pyrmq_store_put_latency_seconds_count 1.0",
    ):
        assert name in text, name
    assert 'rocketmq_rpc_latency_seconds_count{code="OK",method="/pyrmq.store.v1.Store/PutMessages"} 1.0' in text
    assert 'code="NOT_FOUND",method="/pyrmq.store.v1.Store/GetTopic"' in text


# -- PutMessages conversions (the hot path builds records positionally and caches hosts) ----


def test_messages_from_pb_copies_every_producer_field() -> None:
    msg = pb.Message(
        topic=TOPIC,
        queue_id=3,
        body=b"b",
        properties={"KEYS": "k", "TAGS": "t", "A": "1"},
        flag=7,
        sys_flag=SYSFLAG_TRANSACTION_COMMIT_TYPE,
        born_timestamp_ms=123,
        born_host="[::1]:9876",
        reconsume_times=2,
        prepared_transaction_offset=99,
        store_timestamp_ms=5,
        queue_offset=8,
        phy_offset=9,
    )  # "out" fields are ignored
    [record] = convert.messages_from_pb([msg])
    assert record == MessageRecord(
        topic=TOPIC,
        queue_id=3,
        body=b"b",
        properties={"KEYS": "k", "TAGS": "t", "A": "1"},
        flag=7,
        sys_flag=SYSFLAG_TRANSACTION_COMMIT_TYPE,
        born_timestamp_ms=123,
        born_host=(socket.inet_pton(socket.AF_INET6, "::1"), 9876),
        reconsume_times=2,
        prepared_transaction_offset=99,
    )
    assert list(record.properties) == list(dict(msg.properties))  # same key order as dict(map)
    assert type(record.properties) is dict
    assert convert.message_from_pb(msg) == record


def test_messages_from_pb_hosts_are_parsed_once_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    [empty, v4, again] = convert.messages_from_pb(
        [
            pb.Message(topic=TOPIC),
            pb.Message(topic=TOPIC, born_host="10.1.2.3:1"),
            pb.Message(topic=TOPIC, born_host="10.1.2.3:1"),
        ]
    )
    assert empty.born_host == (b"\x7f\x00\x00\x01", 0)
    assert v4.born_host == (b"\x0a\x01\x02\x03", 1) and again.born_host is v4.born_host
    assert [r.properties for r in (empty, v4, again)] == [{}, {}, {}]
    assert empty.properties is not v4.properties  # each record owns its properties dict
    monkeypatch.setattr(convert, "BORN_HOST_CACHE_MAX", 4)
    hosts = [f"10.0.0.{i}:{i}" for i in range(10)]
    records = convert.messages_from_pb([pb.Message(topic=TOPIC, born_host=h) for h in hosts])
    assert [r.born_host for r in records] == [(bytes([10, 0, 0, i]), i) for i in range(10)]
    assert len(convert._BORN_HOSTS) <= 4


@pytest.mark.parametrize("bad", ["not-a-host", "10.0.0.1:70000", "10.0.0.1:x", "[zz]:1"])
def test_messages_from_pb_rejects_bad_hosts_every_time(bad: str) -> None:
    for _ in range(2):  # a failure is not cached as a host
        with pytest.raises(ValueError, match="born_host"):
            convert.messages_from_pb(
                [pb.Message(topic=TOPIC, born_host="10.0.0.1:1"), pb.Message(topic=TOPIC, born_host=bad)]
            )
    assert bad not in convert._BORN_HOSTS


def test_put_response_to_pb_matches_put_result_to_pb() -> None:
    results = [
        PutResult(PutStatus.PUT_OK, 0, 120, 0, 1_700_000_000_000),
        PutResult(PutStatus.PUT_OK, 1 << 40, 99, 12345, 1_700_000_000_001),
        PutResult(PutStatus.FLUSH_DISK_TIMEOUT, 300, 110, 7, 1_700_000_000_002),
        PutResult(PutStatus.MESSAGE_ILLEGAL, error="message 1 of the batch: too big; nothing written"),
    ]
    for result in results:
        if hasattr(result, "store_host_prefix"):  # the offset msg id is derived from it
            result.store_host_prefix = b"\x7f\x00\x00\x01\x00\x00\x2a\x9f"
    response = convert.put_response_to_pb(results)
    expected = pb.PutMessagesResponse(results=[convert.put_result_to_pb(r) for r in results])
    assert response == expected
    assert response.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
    assert [r.status for r in response.results] == [pb.PUT_OK, pb.PUT_OK, pb.FLUSH_DISK_TIMEOUT, pb.MESSAGE_ILLEGAL]
    assert response.results[1].offset_msg_id == results[1].offset_msg_id != ""
    assert response.results[3].error == results[3].error and response.results[3].phy_offset == -1
    assert convert.put_response_to_pb([]) == pb.PutMessagesResponse()


def test_put_batch_with_several_born_hosts_round_trips(served: Served) -> None:
    hosts = ["10.1.2.3:1", "[2001:db8::1]:2", "", "10.1.2.3:1"]
    results = served.put(
        *(
            pb.Message(topic=TOPIC, body=b"%d" % i, born_host=h, properties={"KEYS": f"k{i}"})
            for i, h in enumerate(hosts)
        )
    )
    assert [r.status for r in results] == [pb.PUT_OK] * 4
    served.wait_dispatched(4)
    got = served.get(0)
    assert [m.born_host for m in got.messages] == ["10.1.2.3:1", "[2001:db8::1]:2", "127.0.0.1:0", "10.1.2.3:1"]
    assert [m.properties["KEYS"] for m in got.messages] == ["k0", "k1", "k2", "k3"]
