"""Classic sends: a message whose client built its properties and chose its queue, as RocketMQ's
``SendMessageProcessor`` takes them (the remoting door's SEND_MESSAGE, SEND_MESSAGE_V2 and
SEND_BATCH_MESSAGE). No protocol here: the door converts its headers to a ``ClassicMessage``.

Unlike a v2 send (``producer.py``), the client's properties string is kept as it came (``UNIQ_KEY``,
``TAGS``, ``KEYS``, ``__SHARDINGKEY`` and everything else it set), the queue is the client's
(an orderly producer's selector decides it), and the body is stored as sent, compressed or not
(sysFlag COMPRESSED with its compression type). What the broker adds:

* ``CLUSTER`` (the cluster name), as RocketMQ's broker does;
* the put hooks shared with v2 sends (``services/domain/contracts``): a ``DELAY`` level above 0
  parks the message in ``SCHEDULE_TOPIC_XXXX`` queue level - 1 (the scheduler delivers it);
  ``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` / ``TIMER_DELAY_MS`` in the future park it in the
  timer wheel (a ``DELAY`` level wins over them, as RocketMQ's ``timerInterceptDelayLevel`` off);
  a PREPARED message (sysFlag transaction bits 0x4) parks in ``RMQ_SYS_TRANS_HALF_TOPIC`` with
  ``__transactionId__`` = its ``UNIQ_KEY`` and transaction type NOT, as RocketMQ 4.3+ does.

Checks, with the error each raises (``errors.Code``; the door maps them to its codes): topic name
(ILLEGAL_TOPIC), the broker's own system topics (FORBIDDEN: "Sending message to topic[X] is forbidden."; RMQ_SYS_TRACE_TOPIC takes traces), missing
topic (TOPIC_NOT_FOUND), unwritable topic (FORBIDDEN), queue id beyond the topic's queues
(BAD_REQUEST, RocketMQ's "request queueId[N] is illegal"), empty or too large body
(MESSAGE_BODY_EMPTY / MESSAGE_BODY_TOO_LARGE), properties the store cannot hold or an empty
property key (MESSAGE_PROPERTIES_TOO_LARGE / BAD_REQUEST), a delivery time too far ahead
(ILLEGAL_DELIVERY_TIME).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.broker import validation
from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError, Code, ForbiddenError, RequestError
from services.broker.producer import _HOOK_PROPERTIES_RESERVE_BYTES, PUT_STATUS_TO_V2_CODE, HalfStored
from services.broker.put_coalescer import PendingPut, PutSink
from services.broker.topics import TopicRegistry
from services.domain.contracts.delay import park_delay_level, park_timer, timer_out_ms
from services.domain.contracts.transaction import park_half
from services.domain.format.commitlog_format import (
    PROPERTIES_SIZE_MAX_BYTES,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED_TYPE,
)
from services.domain.format.properties_format import (
    CLUSTER,
    DELAY_TIME_LEVEL,
    ORIGIN_MESSAGE_ID,
    REAL_QUEUE_ID,
    REAL_TOPIC,
    RETRY_TOPIC,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
    UNIQ_KEY,
    WAIT_STORE_MSG_OK,
)
from services.domain.names import (
    CHECKPOINT_TOPIC,
    OFFSET_MOVED_EVENT_TOPIC,
    REVIVE_TOPIC_PREFIX,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TIMER_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    dlq_topic,
    is_system_topic,
    retry_topic,
    validate_topic_name,
)
from services.runtime.clock import Clock
from services.store.client.model import MessageToPut, PutOutcome, StoredMessage, TopicInfo

DELAY_LEVEL_MAX = 18  # messageDelayLevel's 18 levels: a higher level counts as the last
# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET (and the revive topics): the broker's own. Other system
# topics take sends (RMQ_SYS_TRACE_TOPIC: the clients' message traces).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT_TOPIC,
        TIMER_TOPIC,
        CHECKPOINT_TOPIC,
    }
)
RETRY_FIRST_LEVEL = 3  # a send-back without a level: 3 + reconsume times (10 s, 30 s, 1 min, ...)


@dataclass(slots=True)
class ClassicMessage:
    """One message of a classic send, as its client built it."""

    topic: str
    body: bytes
    properties: dict[str, str]
    queue_id: int  # the client's choice; < 0: the broker picks (round-robin)
    sys_flag: int = 0
    flag: int = 0
    born_timestamp_ms: int = 0
    reconsume_times: int = 0


@dataclass(slots=True)
class ClassicReceipt:
    """The outcome of one classic message: ``code`` OK or the error's."""

    code: Code
    message: str
    queue_id: int = -1
    queue_offset: int = -1
    phy_offset: int = -1
    offset_msg_id: str = ""
    transaction_id: str = ""  # the UNIQ_KEY


class ClassicProducer:
    """Classic sends into one broker group."""

    def __init__(
        self,
        config: BrokerConfig,
        topics: TopicRegistry,
        sink: PutSink,
        clock: Clock,
        on_half_stored: HalfStored | None = None,
    ) -> None:
        self._config = config
        self._topics = topics
        self._sink = sink
        self._clock = clock
        self._on_half_stored = on_half_stored
        self._next_queue = 0

    def send(self, messages: list[ClassicMessage], peer_address: str, timeout_s: float) -> list[ClassicReceipt]:
        """Put the messages (one request: one topic, one queue), one receipt each. Raises
        BrokerError when the request fails as a whole (topic, queue, a message's content)."""
        if not messages:
            raise RequestError("no message to send", Code.MESSAGE_CORRUPTED)
        first = messages[0]
        topic = self.check_topic(first.topic)
        queue_id = first.queue_id
        if queue_id < 0:
            queue_id = self._next_queue % topic.write_queue_nums
            self._next_queue += 1
        elif queue_id >= max(topic.write_queue_nums, topic.read_queue_nums):
            raise RequestError(
                f"request queueId[{queue_id}] is illegal, topic {topic.name} has {topic.write_queue_nums} write queues",
                Code.BAD_REQUEST,
            )
        now_ms = self._clock.now_ms()
        records = [self.to_store_message(m, queue_id, peer_address, now_ms) for m in messages]
        deadline_s = self._clock.monotonic_s() + timeout_s
        pendings = self._sink.submit_many(records)
        return [
            self._receipt(topic, message, pending, deadline_s, queue_id) for message, pending in zip(messages, pendings)
        ]

    def send_back(
        self,
        message: StoredMessage,
        group: str,
        delay_level: int,
        max_reconsume_times: int,
        peer_address: str,
        timeout_s: float,
        origin_msg_id: str = "",
    ) -> ClassicReceipt:
        """CONSUMER_SEND_MSG_BACK (RocketMQ's ``consumerSendMsgBack``): the consumed ``message``
        again, to ``%RETRY%<group>`` with delay level ``delay_level`` (0: 3 + its reconsume
        times, at most 18), or to ``%DLQ%<group>`` once its reconsume times reach
        ``max_reconsume_times`` or for a negative level; reconsume times + 1, ``RETRY_TOPIC``
        and ``ORIGIN_MESSAGE_ID`` (``origin_msg_id``: the offsetMsgId the client knows the message
        by) kept from the first failure. The two topics must exist."""
        properties = dict(message.properties)
        properties.setdefault(RETRY_TOPIC, message.topic)
        properties.setdefault(ORIGIN_MESSAGE_ID, origin_msg_id or message.offset_msg_id)
        properties[WAIT_STORE_MSG_OK] = "false"
        properties.pop(DELAY_TIME_LEVEL, None)
        for key in (REAL_TOPIC, REAL_QUEUE_ID):
            properties.pop(key, None)
        if delay_level < 0 or message.reconsume_times >= max_reconsume_times:
            topic = dlq_topic(group)
        else:
            topic = retry_topic(group)
            properties[DELAY_TIME_LEVEL] = str(
                min(delay_level or RETRY_FIRST_LEVEL + message.reconsume_times, DELAY_LEVEL_MAX)
            )
        retry = ClassicMessage(
            topic,
            message.body,
            properties,
            0,
            message.sys_flag,
            message.flag,
            message.born_timestamp_ms,
            message.reconsume_times + 1,
        )
        [receipt] = self.send([retry], peer_address or message.born_host, timeout_s)
        return receipt

    def check_topic(self, name: str) -> TopicInfo:
        reason = validate_topic_name(name)
        if reason:
            raise RequestError(reason, Code.ILLEGAL_TOPIC)
        if name in NOT_ALLOWED_SEND_TOPICS or name.startswith(REVIVE_TOPIC_PREFIX):
            raise ForbiddenError(f"Sending message to topic[{name}] is forbidden.", Code.FORBIDDEN)
        topic = self._topics.get(name)
        if not topic.writable or topic.write_queue_nums <= 0:
            raise ForbiddenError(f"the topic[{name}] sending message is forbidden", Code.FORBIDDEN)
        return topic

    def to_store_message(self, message: ClassicMessage, queue_id: int, peer_address: str, now_ms: int) -> MessageToPut:
        """Check one message and build its record, after the put hooks."""
        config = self._config
        validation.validate_body(message.body, config.body_size_max_bytes)
        properties = message.properties
        if "" in properties:
            raise RequestError("a message property has an empty name", Code.BAD_REQUEST)
        properties[CLUSTER] = config.cluster_name
        size = (
            validation.utf8_len("".join(properties))
            + validation.utf8_len("".join(properties.values()))
            + 2 * len(properties)
        )
        if size + _HOOK_PROPERTIES_RESERVE_BYTES > PROPERTIES_SIZE_MAX_BYTES:
            raise RequestError(
                f"message properties take {size} bytes, more than the store can hold",
                Code.MESSAGE_PROPERTIES_TOO_LARGE,
            )
        record = MessageToPut(
            topic=message.topic,
            queue_id=queue_id,
            body=message.body,
            properties=properties,
            sys_flag=message.sys_flag,
            born_timestamp_ms=message.born_timestamp_ms or now_ms,
            born_host=peer_address,
            reconsume_times=message.reconsume_times,
            flag=message.flag,
        )
        record.allow_system_topic = is_system_topic(record.topic)  # RMQ_SYS_TRACE_TOPIC: message traces
        parked = self._park(record, now_ms)
        if parked is not None:
            record.topic, record.queue_id = parked
            record.allow_system_topic = True
        return record

    def _park(self, record: MessageToPut, now_ms: int) -> tuple[str, int] | None:
        properties = record.properties
        if record.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_PREPARED_TYPE:
            record.sys_flag &= ~SYSFLAG_TRANSACTION_MASK  # a half is stored as type NOT
            return park_half(properties, record.topic, record.queue_id, properties.get(UNIQ_KEY, ""))
        level = _int_property(properties, DELAY_TIME_LEVEL)
        if level > 0:
            for key in (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS):
                properties.pop(key, None)
            return park_delay_level(properties, record.topic, record.queue_id, min(level, DELAY_LEVEL_MAX))
        deliver_ms = self._delivery_time(properties, now_ms)
        if deliver_ms is None or deliver_ms <= now_ms:
            return None
        validation.validate_delivery_timestamp(deliver_ms, now_ms, self._config.delivery_delay_max_ms)
        properties[TIMER_DELIVER_MS] = str(deliver_ms)
        properties.pop(TIMER_DELAY_SEC, None)
        properties.pop(TIMER_DELAY_MS, None)
        tick_ms = timer_out_ms(deliver_ms, self._config.timer_precision_ms)
        return park_timer(properties, record.topic, record.queue_id, tick_ms)

    @staticmethod
    def _delivery_time(properties: dict[str, str], now_ms: int) -> int | None:
        if TIMER_DELAY_SEC in properties:
            return now_ms + _int_property(properties, TIMER_DELAY_SEC, strict=True) * 1000
        if TIMER_DELAY_MS in properties:
            return now_ms + _int_property(properties, TIMER_DELAY_MS, strict=True)
        if TIMER_DELIVER_MS in properties:
            return _int_property(properties, TIMER_DELIVER_MS, strict=True)
        return None

    def _receipt(
        self,
        topic: TopicInfo,
        message: ClassicMessage,
        pending: PendingPut | BrokerError,
        deadline_s: float,
        queue: int,
    ) -> ClassicReceipt:
        try:
            if isinstance(pending, BrokerError):
                raise pending
            outcome = pending.wait(deadline_s - self._clock.monotonic_s())
        except BrokerError as exc:
            return ClassicReceipt(exc.code, exc.message)
        uniq_key = message.properties.get(UNIQ_KEY, "")
        if not outcome.ok:
            if outcome.status.name in ("QUEUE_ID_ILLEGAL", "TOPIC_NOT_FOUND"):
                self._topics.invalidate(topic.name)
            return ClassicReceipt(
                PUT_STATUS_TO_V2_CODE[outcome.status],
                f"send message failed, store status {outcome.status.name}: {outcome.error}",
            )
        if message.sys_flag & SYSFLAG_TRANSACTION_MASK == SYSFLAG_TRANSACTION_PREPARED_TYPE:
            self._half_stored(uniq_key, topic.name, outcome)
        return ClassicReceipt(
            Code.OK, "OK", queue, outcome.queue_offset, outcome.phy_offset, outcome.offset_msg_id, uniq_key
        )

    def _half_stored(self, transaction_id: str, topic: str, outcome: PutOutcome) -> None:
        if self._on_half_stored is not None and transaction_id:
            self._on_half_stored(transaction_id, topic, outcome)


def _int_property(properties: dict[str, str], key: str, strict: bool = False) -> int:
    """An integer property; 0 when absent (or, unless ``strict``, not a number)."""
    text = properties.get(key)
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        if strict:
            raise RequestError(f"property {key} is not a number: {text!r}", Code.ILLEGAL_DELIVERY_TIME) from None
        return 0
