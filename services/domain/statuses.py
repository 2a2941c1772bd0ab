"""The outcome of a put and of a read, as RocketMQ names them (PutMessageStatus,
GetMessageStatus): the store answers with them, and every caller of the store acts on them.
The names are the store API's enum names (store.proto ``PutStatus`` and ``GetStatus``)."""

from __future__ import annotations

import enum


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # SYNC flush did not cover it in time
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"  # store shutting down / not writable / disk full
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"  # body or record too large, bad fields
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    TOPIC_ILLEGAL = "TOPIC_ILLEGAL"  # bad characters, too long, reserved
    TOPIC_NOT_FOUND = "TOPIC_NOT_FOUND"  # unknown topic and auto-create is off
    QUEUE_ID_ILLEGAL = "QUEUE_ID_ILLEGAL"  # outside the topic's write queues
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"  # I/O error: the write did not land
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # SYNC_MASTER: appended, slaves did not confirm it in time
    HA_NOT_AVAILABLE = (
        "HA_NOT_AVAILABLE"  # controller mode: too few replicas in sync (min_in_sync_replicas); nothing written
    )
    LMQ_QUOTA_EXCEEDED = "LMQ_QUOTA_EXCEEDED"  # a new lite topic past lite_topics_max; nothing written


# How a replica that is not its group's writable master words every refusal (a put's
# SERVICE_NOT_AVAILABLE, a state-changing call's UNAVAILABLE): a caller that follows the master
# (services/store/client/master.py) retries on the new master only then, not on a disk full.
NOT_MASTER = "not the master"

# The batch was appended to the CommitLog (the records have offsets), whatever the wait after it said.
APPENDED_PUT_STATUSES = frozenset({PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT})


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # units read, none passed the tag filter
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"  # CommitLog data already deleted
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"  # offset > max
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # offset == max: caught up
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"  # offset < min
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"  # no such topic/queue
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"  # queue exists but max == 0
