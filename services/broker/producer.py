"""SendMessage: validate, map a v2 message onto a store record, pick the queue, put, answer.

Mapping (RocketMQ 5 proxy ``SendMessageActivity.buildMessageProperty`` plus the broker's put
hooks):

| v2 field | store record |
|---|---|
| user_properties | copied verbatim |
| tag | ``TAGS`` |
| keys | ``KEYS``, joined with one space |
| message_id | ``UNIQ_KEY`` (the receipt's message_id, and its transaction_id for every type) |
| message_type TRANSACTION | ``TRAN_MSG=true`` (+ ``CHECK_IMMUNITY_TIME_IN_SECONDS`` from orphaned_transaction_recovery_duration) |
| delivery_timestamp | ``TIMER_DELIVER_MS`` (epoch ms) |
| delivery_attempt | ``RECONSUME_TIME`` (``0`` for a fresh send) |
| (topic) | ``PGROUP`` = topic: the proxy's producer group, used for transaction checks |
| message_group | ``__SHARDINGKEY`` |
| priority (PRIORITY) | ``_SYS_MSG_PRIORITY_``; the queue is the priority's level: ``min(priority, write_queue_nums - 1)`` |
| lite_topic (LITE) | ``__LITE_TOPIC``; the store adds the lite topic's LMQ and offset (services/domain/lite.py) |
| trace_context | ``TRACE_CONTEXT`` |
| born_host | ``__BORNHOST`` (the peer address when blank); the record's born host is the peer |
| born_timestamp | ``BORN_TIMESTAMP`` (ms) and the record's born timestamp (now when absent) |
| body_encoding GZIP | the same DEFLATE data re-wrapped as ZLIB, sysflag COMPRESSED + type ZLIB (remoting consumers inflate it; services/domain/compression.py) |
| (broker) | ``CLUSTER`` = cluster name |

Then the broker's put hooks, which park messages that must not be visible yet in system topics
for the scheduler and the transaction checker (the writers of ``services.domain.contracts``):

* DELAY with a delivery time in the future: topic ``rmq_sys_wheel_timer`` queue 0, plus
  ``TIMER_OUT_MS`` (rounded down to ``timer_precision_ms``; a time exactly on a tick moves one
  tick earlier, as RocketMQ does), ``REAL_TOPIC``, ``REAL_QID``. The receipt gets a
  ``recall_handle``. A time in the past is stored normally (delivered at once).
* TRANSACTION: topic ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, plus ``__transactionId__`` = UNIQ_KEY,
  ``REAL_TOPIC``, ``REAL_QID``; transaction type NOT (RocketMQ 4.3+ half messages).

The write queue is chosen here (``queue_selection``), never by the client.

Receipts: an OK one carries the message id as its ``message_id`` and its ``transaction_id``,
whatever the type: the broker's ``SendMessageProcessor`` answers every put with transactionId = the
UNIQ_KEY and the proxy's ``convertToSendMessageResponse`` copies it. A batch has one receipt per
message, each with its own id. A refused message's receipt has neither (the proxy fills them for
SEND_OK only).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable

from services.broker import recall, validation
from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError, Code, ForbiddenError, RequestError
from services.broker.model import BodyEncoding, IncomingMessage, SendReceipt
from services.broker.put_coalescer import PendingPut, PutSink
from services.broker.queue_selection import RoundRobin, fifo_queue_id
from services.broker.topics import TopicRegistry
from services.domain.compression import ZLIB_SYSFLAG, CompressionError, gzip_to_zlib
from services.domain.contracts.delay import park_timer, timer_out_ms
from services.domain.contracts.transaction import park_half
from services.domain.delivery import BROKER_PROPERTY_KEYS, MessageType
from services.domain.format.commitlog_format import (
    PROP_CRC_RESERVED_LEN,
    PROPERTIES_SIZE_MAX_BYTES,
    SYSFLAG_COMPRESSED,
)
from services.domain.format.properties_format import (
    BORN_HOST,
    BORN_TIMESTAMP,
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    CLUSTER,
    KEY_SEPARATOR,
    KEYS,
    LITE_TOPIC,
    PRIORITY,
    PRODUCER_GROUP,
    RECONSUME_TIME,
    RESERVED_PROPERTY_KEYS,
    SHARDING_KEY,
    TAGS,
    TIMER_DELIVER_MS,
    TRACE_CONTEXT,
    TRANSACTION_PREPARED,
    UNIQ_KEY,
)
from services.domain.topic_types import priority_queue_id
from services.runtime.clock import Clock
from services.store.client.model import MessageToPut, PutOutcome, PutStatus, TopicInfo

log = logging.getLogger(__name__)

# Room left in the 32767-byte properties string for what the put hooks add (REAL_TOPIC,
# REAL_QID, TIMER_OUT_MS / __transactionId__) and the store's CRC trailer.
_HOOK_PROPERTIES_RESERVE_BYTES = 3 * 32 + 127 + 128 + PROP_CRC_RESERVED_LEN

# Store outcome -> the v2 code of the message's SendResultEntry (the proxy's mapping, store statuses named).
PUT_STATUS_TO_V2_CODE: dict[PutStatus, Code] = {
    PutStatus.PUT_OK: Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,  # appended, not yet on disk
    PutStatus.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
    PutStatus.CREATE_MAPPED_FILE_FAILED: Code.INTERNAL_SERVER_ERROR,
    PutStatus.MESSAGE_ILLEGAL: Code.BAD_REQUEST,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: Code.MESSAGE_PROPERTIES_TOO_LARGE,
    PutStatus.TOPIC_ILLEGAL: Code.ILLEGAL_TOPIC,
    PutStatus.TOPIC_NOT_FOUND: Code.TOPIC_NOT_FOUND,
    PutStatus.QUEUE_ID_ILLEGAL: Code.INTERNAL_SERVER_ERROR,  # stale queue count; a retry re-reads it
    PutStatus.OS_PAGE_CACHE_BUSY: Code.TOO_MANY_REQUESTS,
    PutStatus.UNKNOWN_ERROR: Code.INTERNAL_SERVER_ERROR,
    PutStatus.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,  # appended, slaves did not confirm in time
    PutStatus.HA_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,  # too few replicas in sync: nothing written
    PutStatus.LMQ_QUOTA_EXCEEDED: Code.LITE_TOPIC_QUOTA_EXCEEDED,  # a new lite topic past the store's quota
}
assert set(PUT_STATUS_TO_V2_CODE) == set(PutStatus), "every PutStatus needs a code"
_STALE_TOPIC_STATUSES = frozenset({PutStatus.QUEUE_ID_ILLEGAL, PutStatus.TOPIC_NOT_FOUND})
_has_control = validation.has_control_character
# The broker's own property names and short values (RECONSUME_TIME, BORN_TIMESTAMP) in a plain message, bounded.
_PLAIN_FIXED_BYTES = 160
_PLAIN_USER_KEYS = (RESERVED_PROPERTY_KEYS | BROKER_PROPERTY_KEYS).isdisjoint


def recall_handle(topic: str, broker_name: str, timer_out_ms: int, message_id: str) -> str:
    """RocketMQ's RecallMessageHandle.HandleV1: URL-safe Base64 of "v1 topic broker ts id"."""
    raw = f"v1 {topic} {broker_name} {timer_out_ms + 1} {message_id}"
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii")


def response_code(receipts: list[SendReceipt]) -> int:
    """The top-level status: the entries' code if they agree, else MULTIPLE_RESULTS."""
    codes = {r.code for r in receipts}
    return codes.pop() if len(codes) == 1 else Code.MULTIPLE_RESULTS


# (transaction id, real topic, outcome of the half message's put): transaction.HalfMessageTable.
HalfStored = Callable[[str, str, PutOutcome], None]


class Producer:
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
        self._round_robin = RoundRobin()

    def send(
        self, messages: list[IncomingMessage], peer_address: str, timeout_s: float, queue_id: int | None = None
    ) -> list[SendReceipt]:
        """One receipt per message. Raises BrokerError when the request fails as a whole.

        ``peer_address`` is the client's "ip:port" ("" if unknown); ``timeout_s`` bounds the
        wait for the store (the caller's remaining deadline); ``queue_id``: the write queue
        chosen over every broker group of the topic (broker_group_router.py), else chosen here.
        """
        if not messages:
            raise RequestError("no message to send", Code.MESSAGE_CORRUPTED)
        first = messages[0]
        validation.validate_topic(first.topic)
        now_ms = self._clock.now_ms()
        built: list[tuple[IncomingMessage, MessageType, dict[str, str]]] = []
        plain = self._build_plain
        for message in messages:
            if message.topic != first.topic or message.topic_namespace != first.topic_namespace:
                raise RequestError("topic in message is not same", Code.MESSAGE_CORRUPTED)
            typed = plain(message, now_ms)
            if typed is None:  # anything unusual: the full checks, which raise the exact error
                typed = self.build_properties(message, peer_address, now_ms)
            built.append((message, typed[0], typed[1]))

        topic = self._topics.get(first.topic)
        if not topic.writable or topic.write_queue_nums <= 0:
            raise ForbiddenError(f"topic {topic.name} is not writable", Code.FORBIDDEN)
        for message_type in {message_type for _, message_type, _ in built}:
            validation.validate_topic_accepts(topic.name, topic.message_type, message_type)
        if queue_id is None:
            queue_id = self.select_queue(topic, messages)

        deadline_s = self._clock.monotonic_s() + timeout_s
        records = []
        handles = []
        for message, message_type, properties in built:
            queue = queue_id
            if message_type is MessageType.PRIORITY:  # the level is the queue (SendMessageProcessor)
                queue = priority_queue_id(message.priority or 0, topic.write_queue_nums)
            record, handle = self.to_store_message(message, message_type, properties, queue, peer_address, now_ms)
            records.append(record)
            handles.append(handle)
        pendings = self._sink.submit_many(records)  # queue full or shutting down: a BrokerError in place
        receipt = self._receipt
        return [
            receipt(topic, message, message_type, handle, pending, deadline_s, record.queue_id)
            for (message, message_type, _), handle, pending, record in zip(built, handles, pendings, records)
        ]

    # -- mapping -------------------------------------------------------------------------------
    def _build_plain(self, message: IncomingMessage, now_ms: int) -> tuple[MessageType, dict[str, str]] | None:
        """:meth:`build_properties` for the usual message (NORMAL or FIFO, no delivery time),
        with its checks done at once: one control-character search over all its strings, the
        blank checks on first characters, sizes bounded by 4 UTF-8 bytes a code point. None
        when anything is unusual, or merely might be: then :meth:`build_properties` decides,
        raising the proxy's first error, so the outcome is the same either way."""
        body = message.body
        config = self._config
        if (
            not body
            or len(body) > config.body_size_max_bytes
            or message.delivery_timestamp_ms is not None
            or message.lite_topic
            or message.priority is not None
        ):
            return None
        group = message.message_group or ""
        stated = message.message_type
        derived = MessageType.FIFO if group else MessageType.NORMAL
        if stated is not derived and stated is not MessageType.MESSAGE_TYPE_UNSPECIFIED:
            return None  # TRANSACTION, DELAY, or a type conflict
        tag = message.tag or ""
        message_id = message.message_id
        born_host = message.born_host
        trace = message.trace_context or ""
        keys = message.keys
        user = message.user_properties
        if (
            not message_id
            or message_id[0].isspace()
            or not born_host
            or born_host[0].isspace()
            or (tag and (tag[0].isspace() or "|" in tag))
            or (group and group[0].isspace())
        ):
            return None
        texts = [tag, message_id, group, trace, born_host, *keys]
        user_chars = 0
        if user:
            if len(user) > config.user_property_count_max or "" in user or not _PLAIN_USER_KEYS(user):
                return None
            texts += user
            texts += user.values()
            user_chars = sum(map(len, user)) + sum(map(len, user.values()))
        if _has_control(" ".join(texts)):
            return None
        key_chars = 0
        for key in keys:
            if key:
                if key[0].isspace():
                    return None
                key_chars += len(key)
        if 4 * (len(tag) + key_chars + user_chars) > config.user_properties_size_max_bytes:
            return None  # maybe too large (4 UTF-8 bytes a code point at most): counted exactly by the full checks
        if group and validation.utf8_len(group) >= config.message_group_size_max_bytes:
            return None
        properties = dict(user) if user else {}
        if tag:
            properties[TAGS] = tag
        if key_chars:
            properties[KEYS] = KEY_SEPARATOR.join(key for key in keys if key)
        properties[UNIQ_KEY] = message_id
        properties[RECONSUME_TIME] = str(message.delivery_attempt)
        properties[PRODUCER_GROUP] = message.topic
        if group:
            properties[SHARDING_KEY] = group
        if trace:
            properties[TRACE_CONTEXT] = trace
        properties[BORN_HOST] = born_host
        if message.born_timestamp_ms is not None:
            properties[BORN_TIMESTAMP] = str(message.born_timestamp_ms)
        properties[CLUSTER] = config.cluster_name
        if (
            4
            * (
                user_chars
                + len(tag)
                + key_chars
                + len(message_id)
                + len(group)
                + len(trace)
                + len(born_host)
                + len(message.topic)
                + len(config.cluster_name)
            )
            + 2 * len(properties)
            + _PLAIN_FIXED_BYTES
            + _HOOK_PROPERTIES_RESERVE_BYTES
            > PROPERTIES_SIZE_MAX_BYTES
        ):
            return None  # maybe too large for the store: measured exactly by the full checks
        return derived, properties

    def build_properties(
        self, message: IncomingMessage, peer_address: str, now_ms: int
    ) -> tuple[MessageType, dict[str, str]]:
        """Validate one message (in the proxy's order) and build its store properties."""
        config = self._config
        validation.validate_body(message.body, config.body_size_max_bytes)
        user_size = validation.validate_user_properties(message.user_properties, config.user_property_count_max)
        properties = dict(message.user_properties)
        validation.validate_tag(message.tag)
        if message.tag:
            properties[TAGS] = message.tag
            user_size += validation.utf8_len(message.tag)
        for key in message.keys:
            validation.validate_key(key)
            user_size += validation.utf8_len(key)
        if user_size > config.user_properties_size_max_bytes:
            raise RequestError(
                f"the total size of user property is too large, max is {config.user_properties_size_max_bytes}",
                Code.MESSAGE_PROPERTIES_TOO_LARGE,
            )
        keys = KEY_SEPARATOR.join(key for key in message.keys if key)
        if keys:
            properties[KEYS] = keys
        validation.validate_message_id(message.message_id)
        properties[UNIQ_KEY] = message.message_id
        if message.message_type is MessageType.TRANSACTION:
            properties[TRANSACTION_PREPARED] = "true"
            if message.orphaned_transaction_recovery_s is not None:
                validation.validate_transaction_recovery(
                    message.orphaned_transaction_recovery_s, config.transaction_recovery_max_s
                )
                properties[CHECK_IMMUNITY_TIME_IN_SECONDS] = str(message.orphaned_transaction_recovery_s)
        if message.delivery_timestamp_ms is not None:
            validation.validate_delivery_timestamp(message.delivery_timestamp_ms, now_ms, config.delivery_delay_max_ms)
            properties[TIMER_DELIVER_MS] = str(message.delivery_timestamp_ms)
        properties[RECONSUME_TIME] = str(message.delivery_attempt)
        properties[PRODUCER_GROUP] = message.topic
        if message.message_group:
            validation.validate_message_group(message.message_group, config.message_group_size_max_bytes)
            properties[SHARDING_KEY] = message.message_group
        if message.trace_context:
            if validation.has_control_character(message.trace_context):
                raise RequestError("trace context cannot contain control character", Code.BAD_REQUEST)
            properties[TRACE_CONTEXT] = message.trace_context
        born_host = message.born_host
        if validation.is_blank(born_host) or validation.has_control_character(born_host):
            born_host = peer_address
        if born_host:
            properties[BORN_HOST] = born_host
        if message.born_timestamp_ms is not None:
            properties[BORN_TIMESTAMP] = str(message.born_timestamp_ms)
        properties[CLUSTER] = config.cluster_name
        if message.lite_topic is not None:
            validation.validate_lite_topic(message.lite_topic)
        if message.priority is not None:
            validation.validate_priority(message.priority)
        message_type = validation.effective_message_type(message)
        if message_type is MessageType.PRIORITY:
            properties[PRIORITY] = str(message.priority)
        elif message_type is MessageType.LITE:
            properties[LITE_TOPIC] = message.lite_topic or ""  # the store adds its LMQ and offset
        self._check_properties_size(properties)
        return message_type, properties

    @staticmethod
    def _check_properties_size(properties: dict[str, str]) -> None:
        """(pyrmq) The store refuses a properties string over 32767 bytes, batch and all."""
        # The UTF-8 size of all keys and of all values, each joined once (not per entry: this
        # runs for every message sent), plus a separator and a terminator per property.
        size = (
            validation.utf8_len("".join(properties))
            + validation.utf8_len("".join(properties.values()))
            + 2 * len(properties)
        )
        if size + _HOOK_PROPERTIES_RESERVE_BYTES > PROPERTIES_SIZE_MAX_BYTES:
            raise RequestError(
                f"message properties take {size} bytes, more than the store can hold", Code.MESSAGE_PROPERTIES_TOO_LARGE
            )

    def select_queue(self, topic: TopicInfo, messages: list[IncomingMessage]) -> int:
        """FIFO: hash of the message group; otherwise round-robin. One queue per request."""
        groups = {m.message_group for m in messages}
        if len(groups) == 1 and (group := groups.pop()):
            return fifo_queue_id(group, topic.write_queue_nums)
        return self._round_robin.next_queue_id(topic.name, topic.write_queue_nums)

    def to_store_message(
        self,
        message: IncomingMessage,
        message_type: MessageType,
        properties: dict[str, str],
        queue_id: int,
        peer_address: str,
        now_ms: int,
    ) -> tuple[MessageToPut, str]:
        """The record to put (after the put hooks) and its recall handle ("" if none)."""
        record = MessageToPut(
            topic=message.topic,
            queue_id=queue_id,
            body=message.body,
            properties=properties,
            sys_flag=0,
            born_timestamp_ms=message.born_timestamp_ms if message.born_timestamp_ms is not None else now_ms,
            born_host=peer_address,
            reconsume_times=message.delivery_attempt,
        )
        if message.body_encoding is BodyEncoding.GZIP:
            # Stored as ZLIB, which remoting consumers inflate (services/domain/compression.py);
            # a body that is not GZIP after all is kept as sent, as before.
            try:
                record.body, record.sys_flag = gzip_to_zlib(message.body), ZLIB_SYSFLAG
            except CompressionError:
                record.sys_flag = SYSFLAG_COMPRESSED
        handle = ""
        if message_type is MessageType.TRANSACTION:
            parked = park_half(properties, record.topic, record.queue_id, message.message_id)
        elif message.delivery_timestamp_ms is not None and message.delivery_timestamp_ms > now_ms:
            tick_ms = timer_out_ms(message.delivery_timestamp_ms, self._config.timer_precision_ms)
            parked = park_timer(properties, record.topic, record.queue_id, tick_ms)
            handle = recall_handle(message.topic, self._config.broker_name, tick_ms, message.message_id)
        else:
            return record, handle
        record.topic, record.queue_id = parked
        record.allow_system_topic = True
        return record, handle

    # -- recall (services/broker/recall.py) --------------------------------------------------
    def recall(self, topic_name: str, handle_text: str, peer_address: str, timeout_s: float) -> str:
        """RecallMessage: put the DELETE marker for a delayed message; its message id."""
        validation.validate_topic(topic_name)
        topic = self._topics.get(topic_name, create=False)
        handle = recall.decode_handle(handle_text)
        now_ms = self._clock.now_ms()
        timestamp_ms = recall.check_recall(self._config, topic, handle, now_ms)
        marker = recall.marker_message(
            self._config,
            handle,
            timestamp_ms,
            timer_out_ms(timestamp_ms, self._config.timer_precision_ms),
            peer_address,
            now_ms,
        )
        outcome = self._sink.submit(marker).wait(timeout_s)
        error = recall.recall_outcome_error(outcome.status, outcome.error, PUT_STATUS_TO_V2_CODE)
        if error is not None:
            raise error
        return handle.message_id

    # -- outcomes ----------------------------------------------------------------------------
    def _receipt(
        self,
        topic: TopicInfo,
        message: IncomingMessage,
        message_type: MessageType,
        handle: str,
        pending: PendingPut | BrokerError,
        deadline_s: float,
        queue_id: int = -1,
    ) -> SendReceipt:
        try:
            if isinstance(pending, BrokerError):
                raise pending
            outcome = pending.wait(deadline_s - self._clock.monotonic_s())
        except BrokerError as exc:
            return SendReceipt(code=exc.code, status_message=exc.message)
        return self._receipt_for(topic, message, message_type, handle, outcome, queue_id)

    def _receipt_for(
        self,
        topic: TopicInfo,
        message: IncomingMessage,
        message_type: MessageType,
        handle: str,
        outcome: PutOutcome,
        queue_id: int = -1,
    ) -> SendReceipt:
        if outcome.ok:
            if message_type is MessageType.TRANSACTION and self._on_half_stored is not None:
                self._on_half_stored(message.message_id, topic.name, outcome)
            return SendReceipt(
                code=Code.OK,
                status_message="OK",
                message_id=message.message_id,
                transaction_id=message.message_id,  # every send, as the broker's SendMessageProcessor
                offset=outcome.queue_offset,
                recall_handle=handle,
                queue_id=queue_id,
            )
        if outcome.status in _STALE_TOPIC_STATUSES:
            self._topics.invalidate(topic.name)
        log.warning("store refused a message of topic %s: %s %s", topic.name, outcome.status.name, outcome.error)
        return SendReceipt(
            code=PUT_STATUS_TO_V2_CODE[outcome.status],
            status_message=f"send message failed, store status {outcome.status.name}: {outcome.error}",
        )
