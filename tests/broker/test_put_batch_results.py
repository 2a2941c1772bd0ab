"""The broker asks the store for batch_results (one status, packed offset columns) and turns them
into the same PutOutcomes a per-message answer gives; a store that predates the field still works."""

from __future__ import annotations

import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.store.client.client import GrpcStoreClient
from services.store.client.convert import put_outcomes_from_pb
from services.store.client.errors import StoreError
from services.store.client.model import MessageToPut, PutStatus


def _messages(count: int) -> list[MessageToPut]:
    return [
        MessageToPut(topic="Batched", queue_id=i % 2, body=b"body-%d" % i, properties={"KEYS": f"k{i}"})
        for i in range(count)
    ]


def test_batch_answers_equal_per_message_answers(store_address: str, store_stub) -> None:
    store_stub.CreateOrUpdateTopic(
        pb.CreateOrUpdateTopicRequest(
            config=pb.TopicConfig(topic_name="Batched", read_queue_nums=2, write_queue_nums=2, perm=6)
        ),
        timeout=5,
    )
    client = GrpcStoreClient(store_address, put_stream=False)
    try:
        outcomes = client.put_messages(_messages(5), False)
        assert [o.status for o in outcomes] == [PutStatus.PUT_OK] * 5
        assert [o.queue_offset for o in outcomes] == [0, 0, 1, 1, 2]
        for outcome in outcomes:  # the offset message id the broker computes is the store's own
            stored = store_stub.LookMessageByPhyOffset(
                pb.LookMessageByPhyOffsetRequest(phy_offset=outcome.phy_offset), timeout=5
            )
            assert stored.offset_msg_id == outcome.offset_msg_id
        [refused] = client.put_messages([MessageToPut(topic="bad topic", queue_id=0, body=b"x", properties={})], False)
        assert refused.status is PutStatus.TOPIC_ILLEGAL and refused.error and refused.phy_offset == -1
    finally:
        client.close()


def test_a_store_answering_per_message_results_is_still_understood() -> None:
    old = pb.PutMessagesResponse(
        results=[pb.PutResult(status=pb.PUT_OK, phy_offset=7, queue_offset=3, offset_msg_id="ID")]
    )
    client = GrpcStoreClient("127.0.0.1:1", put_stream=False)
    try:
        client._put = lambda request, timeout_s=None: old  # the store answers in the old form
        [outcome] = client.put_messages(_messages(1), False)
    finally:
        client.close()
    assert (outcome.status, outcome.phy_offset, outcome.queue_offset, outcome.offset_msg_id) == (
        PutStatus.PUT_OK,
        7,
        3,
        "ID",
    )


def test_columns_that_do_not_match_the_batch_are_a_store_error() -> None:
    batch = pb.PutBatchResult(status=pb.PUT_OK, phy_offset=[1], queue_offset=[1], wrote_bytes=[1])
    with pytest.raises(StoreError, match="1 offsets for 2 messages"):
        put_outcomes_from_pb(batch, 2)
    refused = put_outcomes_from_pb(pb.PutBatchResult(status=pb.SERVICE_NOT_AVAILABLE, error="down"), 2)
    assert [(o.status, o.error, o.phy_offset) for o in refused] == [(PutStatus.SERVICE_NOT_AVAILABLE, "down", -1)] * 2
