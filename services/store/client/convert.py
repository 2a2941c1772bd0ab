"""Protobuf answers of the store's API as ``model``'s types (the client's side of the wire)."""

from __future__ import annotations

from pyrmq.store.v1 import store_pb2 as pb

from services.domain.format.commitlog_format import offset_msg_id_with_prefix
from services.store.client.errors import StoreError
from services.store.client.model import (
    AckResult,
    Delivery,
    GroupInfo,
    PutOutcome,
    PutStatus,
    StoredMessage,
    TopicInfo,
)
from services.store.client.retry_policy_convert import retry_policy_from_pb

PUT_STATUS = {pb.PutStatus.Value(s.name): s for s in PutStatus}
_ACK_RESULT: dict[int, AckResult] = {
    pb.ACK_OK: AckResult.OK,
    pb.INVALID_RECEIPT_HANDLE: AckResult.INVALID_RECEIPT_HANDLE,
    pb.DLQ_PUT_FAILED: AckResult.DLQ_PUT_FAILED,
}


def stored_from_pb(record: pb.Message) -> StoredMessage:
    return StoredMessage(
        topic=record.topic,
        queue_id=record.queue_id,
        body=record.body,
        properties=dict(record.properties),
        queue_offset=record.queue_offset,
        phy_offset=record.phy_offset,
        sys_flag=record.sys_flag,
        flag=record.flag,
        born_timestamp_ms=record.born_timestamp_ms,
        born_host=record.born_host,
        store_timestamp_ms=record.store_timestamp_ms,
        store_host=record.store_host,
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
        offset_msg_id=record.offset_msg_id,
        store_size_bytes=record.store_size_bytes,
        body_crc=record.body_crc,
    )


def delivery_from_pb(popped: pb.PoppedMessage) -> Delivery:
    record = popped.message
    return Delivery(
        topic=record.topic,
        body=record.body,
        properties=dict(record.properties),
        queue_id=popped.queue_id,
        queue_offset=popped.queue_offset,
        delivery_attempt=max(1, popped.delivery_attempt),
        receipt_handle=popped.receipt_handle,
        sys_flag=record.sys_flag,
        born_timestamp_ms=record.born_timestamp_ms,
        born_host=record.born_host,
        store_timestamp_ms=record.store_timestamp_ms,
        store_host=record.store_host,
        offset_msg_id=record.offset_msg_id,
    )


def ack_result_from_pb(status: int) -> AckResult:
    result = _ACK_RESULT.get(status)
    if result is None:
        raise StoreError(f"store answered an unknown ack status {status}")
    return result


def put_outcomes_from_pb(batch: pb.PutBatchResult, count: int) -> list[PutOutcome]:
    """One PutOutcome per message from a PutBatchResult (one status, packed offset columns)."""
    status = PUT_STATUS[batch.status]
    phy_offsets = list(batch.phy_offset)
    if len(phy_offsets) != count:  # not appended (the columns are empty): the same refusal for all
        if status is PutStatus.PUT_OK and count:
            raise StoreError(f"store answered {len(phy_offsets)} offsets for {count} messages")
        return [PutOutcome(status, error=batch.error) for _ in range(count)]
    prefix = batch.store_host_prefix
    error = batch.error
    stored_ms = batch.store_timestamp_ms
    return [
        PutOutcome(status, queue_offset, phy_offset, offset_msg_id_with_prefix(prefix, phy_offset), error, stored_ms)
        for queue_offset, phy_offset in zip(batch.queue_offset, phy_offsets)
    ]


def topic_info_from_pb(config: pb.TopicConfig) -> TopicInfo:
    return TopicInfo(
        name=config.topic_name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        message_type=pb.MessageType.Name(config.message_type),
        attributes={k: v for k, v in config.attributes.items() if k != "message.type"},
    )


def group_info_from_pb(config: pb.SubscriptionGroupConfig) -> GroupInfo:
    return GroupInfo(
        name=config.group_name,
        consume_message_orderly=config.consume_message_orderly,
        retry_max_times=config.retry_max_times,
        retry_policy=retry_policy_from_pb(config.group_retry_policy),
        attributes=dict(config.attributes),
    )
