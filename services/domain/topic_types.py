"""Topic message types (RocketMQ's ``TopicMessageType``, the ``message.type`` topic attribute)
and the rules of priority messages (RIP-80, RocketMQ 5.4). Pure: imports nothing else of the
project but the domain.

A topic's type decides which message types a send may carry (the proxy's
``DefaultTopicMessageTypeValidator``: equal, or any of NORMAL/FIFO/DELAY/TRANSACTION on a MIXED
topic) and what its route advertises in ``accept_message_types`` (a client refuses to send a type
the route does not list). MIXED does not take PRIORITY, as in RocketMQ.

Priority messages (``_SYS_MSG_PRIORITY_``, a non-negative decimal):

* the levels of a PRIORITY topic are its queues: a message of priority ``p`` is stored in queue
  ``min(p, write_queue_nums - 1)`` of the broker group its send went to (RocketMQ's
  ``SendMessageProcessor``), whatever queue was picked for it, so a priority above the topic's
  ``max priority`` (``write_queue_nums - 1``) is stored at the top level, as RocketMQ clamps it;
* a non-FIFO pop of a PRIORITY topic scans the queues from the highest level down (RocketMQ's
  ``priorityOrderAsc``, its default: a larger number is more urgent) and takes the group's retry
  messages only when that leaves room in the batch (``popFromRetryProbabilityForPriority`` 0), so
  a backlog is served highest priority first within a broker group;
* a consumer group's ``priority.factor`` attribute (0-100, default 100) is the share of its pops
  that go in priority order; the others start at a rotating queue like any pop, so a group may
  trade strict priority for progress on the lower levels.
"""

from __future__ import annotations

from services.domain.attributes import long_range_attribute
from services.domain.delivery import MessageType
from services.domain.format.properties_format import PRIORITY

# TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE ("+message.type" in an admin request).
MESSAGE_TYPE_ATTRIBUTE = "message.type"
TOPIC_MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE", "MIXED")
ACCEPT_MESSAGE_TYPES: dict[str, tuple[MessageType, ...]] = {
    "NORMAL": (MessageType.NORMAL,),
    "FIFO": (MessageType.FIFO,),
    "DELAY": (MessageType.DELAY,),
    "TRANSACTION": (MessageType.TRANSACTION,),
    "PRIORITY": (MessageType.PRIORITY,),
    "LITE": (MessageType.LITE,),  # a parent of lite topics (services/domain/lite.py)
    "MIXED": (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION),
}
assert set(ACCEPT_MESSAGE_TYPES) == set(TOPIC_MESSAGE_TYPES)

# The queues (priority levels 0..9) of a PRIORITY topic created without a queue count.
DEFAULT_MAX_PRIORITY = 9
# SubscriptionGroupAttributes.PRIORITY_FACTOR_ATTRIBUTE: LongRangeAttribute 0..100, default 100.
PRIORITY_FACTOR_ATTRIBUTE = "priority.factor"
PRIORITY_FACTOR_DEFAULT = 100


def topic_accepts(topic_type: str, message_type: MessageType) -> bool:
    return message_type in ACCEPT_MESSAGE_TYPES.get(topic_type, ())


def priority_queue_id(priority: int, write_queue_nums: int) -> int:
    """The queue (level) of a message of ``priority`` in a group with ``write_queue_nums`` queues."""
    return max(0, min(priority, write_queue_nums - 1))


def message_priority(properties: dict[str, str]) -> int | None:
    """The stored priority of a message (None: not a priority message, or not a number)."""
    value = properties.get(PRIORITY)
    if value is None:
        return None
    try:
        priority = int(value)
    except ValueError:
        return None
    return priority if priority >= 0 else None


def priority_factor(attributes: dict[str, str]) -> int:
    """A consumer group's ``priority.factor`` (a value out of range or not a number: the default)."""
    return long_range_attribute(attributes, PRIORITY_FACTOR_ATTRIBUTE, 0, 100, PRIORITY_FACTOR_DEFAULT)


def priority_scan_order(read_queue_nums: int) -> list[int]:
    """Queue ids in the order a priority pop takes them: the highest level first."""
    return list(range(read_queue_nums - 1, -1, -1))
