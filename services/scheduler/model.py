"""What the scheduler does with the store's statuses and records (no gRPC here): which put
outcomes count as delivered or as permanent failures.

The records and messages are the store client's (``services.store.client.model``);
``store_access.SchedulerStore`` names the calls the scheduler makes.
"""

from __future__ import annotations

from services.domain.statuses import PutStatus

# Appended to the CommitLog (FLUSH_DISK_TIMEOUT: appended, not yet on disk): delivered.
APPENDED_STATUSES = frozenset({PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT})
# Retrying cannot help: the message is dropped and counted (TimerMessageStore's PUT_NO_RETRY).
PERMANENT_FAILURES = frozenset(
    {
        PutStatus.MESSAGE_ILLEGAL,
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
        PutStatus.TOPIC_ILLEGAL,
        PutStatus.TOPIC_NOT_FOUND,
        PutStatus.QUEUE_ID_ILLEGAL,
        PutStatus.LMQ_QUOTA_EXCEEDED,
    }
)
