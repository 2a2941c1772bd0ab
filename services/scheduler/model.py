"""What the scheduler does with the store's statuses and records (no gRPC here): which put
outcomes count as delivered or as permanent failures, and a record copied to its destination.

The records and messages are the store client's (``services.store.client.model``);
``store_access.SchedulerStore`` names the calls the scheduler makes.
"""

from __future__ import annotations

from services.domain.statuses import PutStatus
from services.store.client.model import StoredMessage, StoreMessage

# Appended to the CommitLog (FLUSH_DISK_TIMEOUT: appended, not yet on disk): delivered.
APPENDED_STATUSES = frozenset({PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT})
# Retrying cannot help: the message is dropped and counted (TimerMessageStore's PUT_NO_RETRY).
PERMANENT_FAILURES = frozenset(
    {
        PutStatus.MESSAGE_ILLEGAL,
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
        PutStatus.TOPIC_ILLEGAL,
        PutStatus.TOPIC_NOT_FOUND,
        PutStatus.QUEUE_ID_ILLEGAL,
    }
)


def copy_to(record: StoredMessage, topic: str, queue_id: int, properties: dict[str, str]) -> StoreMessage:
    """The record as a new message for ``topic``/``queue_id`` (RocketMQ's messageTimeUp /
    convertMessage: body, flag, sys flag, born time and host, reconsume times kept)."""
    return StoreMessage(
        topic=topic,
        queue_id=queue_id,
        body=record.body,
        properties=properties,
        sys_flag=record.sys_flag,
        flag=record.flag,
        born_timestamp_ms=record.born_timestamp_ms,
        born_host=record.born_host,
        reconsume_times=record.reconsume_times,
    )
