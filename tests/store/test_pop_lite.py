"""A lite consumer's pop (issue 18): ``PopService.pop_lite`` takes the LMQs of several lite topics
in one call, each in order with one batch in flight, and PopLiteMessages serves it over gRPC with
the parent topic on each message and the LMQ as its source topic."""

from __future__ import annotations

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.domain.lite import LITE_TOPIC, lmq_name
from services.store.metadata.config_files import TopicConfig
from tests.support.lite_store import PARENT, create_parent, lite, put_ok
from tests.support.store_pop_rpc import RPC_TIMEOUT_S, Served, pop_served  # noqa: F401 - the "served" fixture

A, B, C = (lmq_name(PARENT, name) for name in ("a", "b", "c"))


def bodies(result) -> list[bytes]:
    return [m.record.body for m in result.messages]


def test_pop_lite_takes_each_lite_topic_in_order_up_to_its_share(make_store, clock):
    store = make_store()
    store.pop.revive.halt()
    create_parent(store)
    put_ok(store, *(lite("a", b"a%d" % i) for i in range(3)), lite("b", b"b0"), lite("c", b"c0"))
    first = store.pop.pop_lite("G", [A, B], max_count=32, invisible_ms=30_000, per_queue_max=2)
    assert bodies(first) == [b"a0", b"a1", b"b0"]
    assert first.examined == [(A, 0), (B, 0)]
    assert {m.topic for m in first.messages} == {A, B} and first.messages[0].source_topic == A
    # a and b are locked while their batches are in flight; c was not asked for
    assert store.pop.pop_lite("G", [A, B], 32, 30_000).messages == []
    again = store.pop.pop_lite("G", [A, B, C], max_count=1, invisible_ms=30_000)
    assert bodies(again) == [b"c0"] and again.examined == [(A, 0), (B, 0), (C, 0)]
    for m in first.messages[:2]:
        store.pop.ack("G", A, m.receipt_handle)
    assert bodies(store.pop.pop_lite("G", [A], 32, 30_000)) == [b"a2"]
    # an expired batch comes back from the same offset, counting the attempt
    clock.advance_ms(30_001)
    store.pop.revive.run_once()
    redelivered = store.pop.pop_lite("G", [B], 32, 30_000)
    assert [(m.record.body, m.delivery_attempt) for m in redelivered.messages] == [(b"b0", 2)]


def test_the_total_stops_the_scan(make_store):
    store = make_store()
    create_parent(store)
    put_ok(store, lite("a", b"a0"), lite("a", b"a1"), lite("b", b"b0"))
    result = store.pop.pop_lite("G", [A, B], max_count=2, invisible_ms=30_000)
    assert bodies(result) == [b"a0", b"a1"] and result.examined == [(A, 0)]


@pytest.mark.parametrize("lmqs", [[PARENT], ["%LMQ%$LiteParent$bad name"], ["%LMQ%$$x"]])
def test_pop_lite_refuses_anything_but_legal_lmq_names(make_store, lmqs):
    store = make_store()
    with pytest.raises(ValueError):
        store.pop.pop_lite("G", lmqs, 32, 30_000)


def test_pop_lite_messages_rpc(served: Served) -> None:
    config = TopicConfig(topic_name=PARENT, read_queue_nums=2, write_queue_nums=2)
    config.message_type = "LITE"
    served.store.topics.create_or_update(config)
    served.put(*(pb.Message(topic=PARENT, queue_id=0, body=b"m%d" % i, properties={LITE_TOPIC: "a"}) for i in range(3)))
    request = pb.PopLiteMessagesRequest(
        group="G", lmq_topics=[A, B], per_queue_max_count=2, invisible_duration_ms=30_000
    )
    response = served.stub.PopLiteMessages(request, timeout=RPC_TIMEOUT_S)
    assert response.status == pb.POP_FOUND
    assert [m.message.body for m in response.messages] == [b"m0", b"m1"]
    assert {(m.message.topic, m.source_topic) for m in response.messages} == {(PARENT, A)}
    assert [m.message.properties[LITE_TOPIC] for m in response.messages] == ["a", "a"]
    assert [(q.topic, q.queue_id) for q in response.examined_queues] == [(A, 0), (B, 0)]
    handles = [m.receipt_handle for m in response.messages]
    # a lite message is acked by its LMQ or by its parent topic (what the broker has), not another
    wrong = pb.AckMessagesRequest(group="G", topic="OtherParent", receipt_handles=handles)
    assert list(served.stub.AckMessages(wrong, timeout=RPC_TIMEOUT_S).statuses) == [pb.INVALID_RECEIPT_HANDLE] * 2
    ack = pb.AckMessagesRequest(group="G", topic=PARENT, receipt_handles=handles[:1])
    assert list(served.stub.AckMessages(ack, timeout=RPC_TIMEOUT_S).statuses) == [pb.ACK_OK]
    ack = pb.AckMessagesRequest(group="G", topic=A, receipt_handles=handles[1:])
    assert list(served.stub.AckMessages(ack, timeout=RPC_TIMEOUT_S).statuses) == [pb.ACK_OK]
    for bad in (
        pb.PopLiteMessagesRequest(lmq_topics=[A]),
        pb.PopLiteMessagesRequest(group="G", lmq_topics=[PARENT]),
        pb.PopLiteMessagesRequest(group="G", lmq_topics=[A], max_count=-1),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            served.stub.PopLiteMessages(bad, timeout=RPC_TIMEOUT_S)
        assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_the_store_counts_its_lite_topics(make_store):
    store = make_store()
    create_parent(store)
    assert store.stats().lite_topic_count == 0
    put_ok(store, lite("a"), lite("b"), lite("a"))
    assert store.stats().lite_topic_count == 2


def test_a_suspended_message_comes_back_without_counting_an_attempt(make_store, clock):
    """ChangeInvisibleDuration with suspend (a lite consumer's ConsumeResult.suspend): the batch is
    redelivered from the same offset after the time given, as the same attempt; without suspend the
    attempt counts."""
    store = make_store()
    store.pop.revive.halt()
    create_parent(store)
    put_ok(store, lite("a", b"a0"), lite("a", b"a1"))
    [first, second] = store.pop.pop_lite("G", [A], 32, 30_000).messages
    status, _ = store.pop.change_invisible_duration("G", PARENT, first.receipt_handle, 1_000, suspend=True)
    assert status.name == "OK"
    store.pop.change_invisible_duration("G", PARENT, second.receipt_handle, 1_000)
    clock.advance_ms(1_001)
    store.pop.revive.run_once()
    again = store.pop.pop_lite("G", [A], 32, 30_000).messages
    assert [(m.record.body, m.delivery_attempt) for m in again] == [(b"a0", 1), (b"a1", 2)]


def test_list_lite_topics_pages_a_parents_lite_topics_with_a_groups_backlog(make_store):
    from services.store.lite.queue import list_lite_topics

    store = make_store()
    create_parent(store)
    put_ok(store, lite("a"), lite("a"), lite("b"), lite("c"), lite("other", topic="OtherParent"))
    offsets = store.consumer_offsets

    def listing(**kwargs):
        rows, after = list_lite_topics(store.lite, offsets.query_offset, PARENT, **kwargs)
        return [(r.lite_topic, r.max_offset, r.consumer_offset) for r in rows], after

    assert listing() == ([("a", 2, -1), ("b", 1, -1), ("c", 1, -1)], "")
    assert listing(limit=2) == ([("a", 2, -1), ("b", 1, -1)], "b")
    assert listing(after="b") == ([("c", 1, -1)], "")
    store.pop.commit_offset("G", A, 0, 2)  # the group read all of "a"
    store.pop.commit_offset("G", B, 0, 0)
    assert listing(group="G", backlog_only=True) == ([("b", 1, 0), ("c", 1, -1)], "")


def test_a_lite_topics_pop_state_is_dropped_once_nothing_is_pending(make_store):
    """A group on many lite topics keeps pop state only where a batch is in flight: after the ack
    (the offset stored) the state goes, and the next pop starts again from the stored offset."""
    store = make_store()
    create_parent(store)
    put_ok(store, lite("a", b"a0"), lite("a", b"a1"))
    [m0, m1] = store.pop.pop_lite("G", [A], 32, 30_000).messages
    assert ("G", A, 0) in store.pop._queues
    store.pop.ack_many("G", PARENT, [m0.receipt_handle])
    assert ("G", A, 0) in store.pop._queues  # a1 still in flight
    store.pop.ack_many("G", PARENT, [m1.receipt_handle])
    assert ("G", A, 0) not in store.pop._queues
    assert store.consumer_offsets.query_offset("G", A, 0) == 2
    put_ok(store, lite("a", b"a2"))
    assert bodies(store.pop.pop_lite("G", [A], 32, 30_000)) == [b"a2"]


def test_lite_offsets_live_in_their_own_lmdb_not_in_consumer_offset_json(make_store, tmp_path):
    """A group's offsets in lite topics go to config/liteOffsets (a million of them would make
    consumerOffset.json re-encode for seconds every 5 s); they survive a restart, an older JSON
    file's lite entries move there, the group's parents are found by seeking, and removing a
    lite topic or the group removes them."""
    store = make_store()
    create_parent(store)
    offsets = store.consumer_offsets
    offsets.commit_offset("G", A, 0, 5)
    offsets.commit_offset("G", lmq_name("OtherParent", "x"), 0, 1)
    offsets.commit_offset("G2", B, 0, 2)
    offsets.commit_offset("G", "PlainTopic", 3, 9)
    assert offsets.offset_table() == {"PlainTopic@G": {3: 9}}  # the JSON table: no lite entries
    assert (offsets.query_offset("G", A, 0), offsets.query_offset("G", B, 0)) == (5, -1)
    assert store.lite_consumer_offsets.parents_of_group("G") == ["LiteParent", "OtherParent"]
    assert store.lite_consumer_offsets.parents_of_group("G2") == ["LiteParent"]
    store.shutdown()
    store = make_store()
    offsets = store.consumer_offsets
    assert offsets.query_offset("G", A, 0) == 5 and offsets.query_offset("G", "PlainTopic", 3) == 9
    offsets.remove_topics([A])
    assert offsets.query_offset("G", A, 0) == -1 and offsets.query_offset("G2", B, 0) == 2
    assert offsets.remove_group("G2") == 1 and store.lite_consumer_offsets.parents_of_group("G2") == []
    store.shutdown()
    # a consumerOffset.json written before (lite entries in it) moves them on start
    path = store.config.config_dir / "consumerOffset.json"
    text = path.read_text().replace('"offsetTable":{', '"offsetTable":{"%LMQ%$LiteParent$c@G3":{0:7},', 1)
    path.write_text(text)
    store = make_store()
    assert store.consumer_offsets.query_offset("G3", C, 0) == 7
    assert "%LMQ%$LiteParent$c@G3" not in store.consumer_offsets.offset_table()
