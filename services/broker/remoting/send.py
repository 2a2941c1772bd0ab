"""Producer codes: SEND_MESSAGE 10 (long field names), SEND_MESSAGE_V2 310 (one-letter keys),
SEND_BATCH_MESSAGE 320 and the request-reply sends 324/325 (../shared/docs/remoting.md §2.2),
END_TRANSACTION 37. Each converts its header into ``classic_producer.ClassicMessage`` and calls
the core; the queue is the client's, unless its broker group is down and the send may move to
another group (services/broker/broker_group_router.py ``RoutedClassicSends``: not ordered, not a
transaction's half): then the answer names the queue and offsetMsgId it was stored at.

* A batch is decided by the header's ``batch`` flag, not by the code (SendMessageProcessor): its
  body is RocketMQ's inner-batch encoding, each inner message with its own properties.
* A send to ``%RETRY%<group>`` whose ``reconsumeTimes`` has reached ``maxReconsumeTimes`` (16
  unless sent) goes to ``%DLQ%<group>`` instead (the Java client's own fallback after a failed
  CONSUMER_SEND_MSG_BACK sends there).
* The answer: ``msgId`` is the offsetMsgId (store host + commit-log offset; for a batch the ids
  joined by ","), ``queueId``, ``queueOffset``, ``transactionId`` = the UNIQ_KEY, and the
  extFields ``MSG_REGION`` and ``TRACE_ON`` the Java client reads without a null check.
"""

from __future__ import annotations

from collections.abc import Callable

from services.broker.broker_group_router import RoutedClassicSends
from services.broker.classic_producer import ClassicMessage, ClassicReceipt
from services.broker.errors import Code, RequestError
from services.broker.remoting.context import RemotingContext
from services.broker.remoting.dispatch import (
    Dispatcher,
    RemotingError,
    optional_bool,
    optional_int,
    remoting_code,
    required,
    required_int,
)
from services.broker.remoting.server import Channel
from services.broker.transaction import Resolution
from services.domain.format.properties_format import REAL_TOPIC, TRANSACTION_ID, decode_properties
from services.domain.names import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX, dlq_topic, retry_topic
from services.domain.remoting.batch import BatchFormatError, decode_batch
from services.domain.remoting.codes import RequestCode, ResponseCode
from services.domain.remoting.command import RemotingCommand

MAX_RECONSUME_TIMES_DEFAULT = 16
MSG_REGION_DEFAULT = "DefaultRegion"

# SendMessageRequestHeaderV2's one-letter keys -> SendMessageRequestHeader's names.
V2_KEYS = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}
_COMMIT_OR_ROLLBACK = {0: Resolution.TRANSACTION_RESOLUTION_UNSPECIFIED, 8: Resolution.COMMIT, 12: Resolution.ROLLBACK}


def long_names(request: RemotingCommand) -> dict[str, str]:
    """The send header under SendMessageRequestHeader's names, whichever form came."""
    fields = request.ext_fields
    if request.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_REPLY_MESSAGE_V2):
        if "b" in fields or "a" in fields:
            named = {V2_KEYS.get(k, k): v for k, v in fields.items()}
            return named
    return fields


class Sends:
    def __init__(self, context: RemotingContext) -> None:
        self._context = context
        self._timeout_s = context.config.store_rpc_timeout_ms / 1000
        self._routed = RoutedClassicSends(context.core.broker_groups, context.clock)

    def register(self, dispatcher: Dispatcher) -> None:
        for code in (
            RequestCode.SEND_MESSAGE,
            RequestCode.SEND_MESSAGE_V2,
            RequestCode.SEND_BATCH_MESSAGE,
            RequestCode.SEND_REPLY_MESSAGE,
            RequestCode.SEND_REPLY_MESSAGE_V2,
        ):
            dispatcher.register(code, self.send)
        dispatcher.register(RequestCode.END_TRANSACTION, self.end_transaction)
        dispatcher.register(RequestCode.CONSUMER_SEND_MSG_BACK, self.send_back)

    # -- CONSUMER_SEND_MSG_BACK 36 ----------------------------------------------------------------
    def send_back(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        """The consumed message (looked up by its commit-log offset) to the group's retry topic,
        or its DLQ after the last attempt (ClassicProducer.send_back)."""
        fields = request.ext_fields
        phy_offset = required_int(fields, "offset")
        group = required(fields, "group")
        delay_level = required_int(fields, "delayLevel")
        broker_name = self._context.broker_name(channel, fields)
        core = self._context.group_core(broker_name)
        info = core.store.get_group(group)
        if info is None:
            raise RemotingError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        max_times = optional_int(fields, "maxReconsumeTimes", info.retry_max_times)
        message = core.store.look_message(phy_offset)
        if message is None:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, f"look message by offset failed, {phy_offset}")
        dead = delay_level < 0 or message.reconsume_times >= max_times
        self._ensure_topic(dlq_topic(group) if dead else retry_topic(group), broker_name)
        receipt = core.classic_producer.send_back(
            message,
            group,
            delay_level,
            max_times,
            channel.peer_address,
            self._timeout_s,
            self._context.offset_msg_id(core.name, message.phy_offset),
        )
        if receipt.code is not Code.OK:
            return request.response(remoting_code(receipt.code), receipt.message)
        return request.response(ResponseCode.SUCCESS)

    def send(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = long_names(request)
        required(fields, "producerGroup")
        topic = required(fields, "topic")
        queue_id = required_int(fields, "queueId")
        sys_flag = required_int(fields, "sysFlag")
        born_ms = required_int(fields, "bornTimestamp")
        flag = required_int(fields, "flag")
        reconsume_times = optional_int(fields, "reconsumeTimes", 0)
        broker_name = fields.get("brokerName") or self._context.broker_name(channel, fields)
        self._context.check_broker_name(broker_name)
        if topic.startswith(RETRY_TOPIC_PREFIX):
            max_times = optional_int(fields, "maxReconsumeTimes", MAX_RECONSUME_TIMES_DEFAULT)
            if reconsume_times >= max_times:
                topic, queue_id = DLQ_TOPIC_PREFIX + topic[len(RETRY_TOPIC_PREFIX) :], 0
        if optional_bool(fields, "batch") or request.code == RequestCode.SEND_BATCH_MESSAGE:
            try:
                inner = decode_batch(request.body)
            except BatchFormatError as exc:
                raise RemotingError(ResponseCode.MESSAGE_ILLEGAL, f"the batch body does not decode: {exc}") from None
            messages = [
                ClassicMessage(topic, body, properties, queue_id, sys_flag, inner_flag, born_ms, reconsume_times)
                for inner_flag, body, properties in inner
            ]
        else:
            text = fields.get("properties") or ""
            if not text.isascii():
                try:
                    text.encode()
                except UnicodeEncodeError:
                    raise RemotingError(
                        ResponseCode.MESSAGE_ILLEGAL, "the message properties are not valid UTF-8 (a lone surrogate)"
                    ) from None
            properties = decode_properties(text)
            messages = [
                ClassicMessage(topic, request.body, properties, queue_id, sys_flag, flag, born_ms, reconsume_times)
            ]
        if topic.startswith((DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX)):
            self._ensure_topic(topic, broker_name)
        # The client's group, or another one if that one is down and the send may move.
        group_name, receipts = self._routed.send(broker_name, messages, channel.peer_address, self._timeout_s)
        return self.answer(request, receipts, lambda phy: self._context.offset_msg_id(group_name, phy))

    def _ensure_topic(self, topic: str, broker_name: str) -> None:
        """A group's retry or DLQ topic (1 queue), created when first needed, as RocketMQ's
        broker does."""
        topics = self._context.group_core(broker_name).topics
        if topics.find(topic) is None:
            self._context.core.admin.create_topic(topic, queue_nums=1, message_type="NORMAL")

    @staticmethod
    def answer(
        request: RemotingCommand, receipts: list[ClassicReceipt], msg_id: Callable[[int], str]
    ) -> RemotingCommand:
        """The send's answer; ``msg_id``: a stored message's offsetMsgId by commit-log offset (the
        door's address, which serves it, not the store's)."""
        failed = [r for r in receipts if r.code is not Code.OK]
        if failed:
            first = failed[0]
            return request.response(remoting_code(first.code), first.message)
        first = receipts[0]
        ext = {
            "msgId": ",".join(msg_id(r.phy_offset) for r in receipts),
            "queueId": str(first.queue_id),
            "queueOffset": str(first.queue_offset),
            "MSG_REGION": MSG_REGION_DEFAULT,
            "TRACE_ON": "true",
        }
        if len(receipts) == 1 and first.transaction_id:
            ext["transactionId"] = first.transaction_id
        return request.response(ResponseCode.SUCCESS, ext_fields=ext)

    # -- END_TRANSACTION 37 ---------------------------------------------------------------------
    def end_transaction(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        fields = request.ext_fields
        required(fields, "producerGroup")
        phy_offset = required_int(fields, "commitLogOffset")
        required_int(fields, "tranStateTableOffset")
        state = required_int(fields, "commitOrRollback")
        transaction_id = fields.get("msgId") or fields.get("transactionId") or ""
        if not transaction_id:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, "the custom field <msgId> is null")
        resolution = _COMMIT_OR_ROLLBACK.get(state)
        if resolution is None:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, f"commitOrRollback {state} is not 0, 8 or 12")
        broker_name = self._context.broker_name(channel, fields)
        topic = fields.get("topic") or self._half_topic(phy_offset, broker_name, transaction_id)
        if resolution is not Resolution.TRANSACTION_RESOLUTION_UNSPECIFIED:
            self._context.core.transactions.end_transaction(topic, transaction_id, resolution, self._timeout_s)
        return request.response(ResponseCode.SUCCESS)

    def _half_topic(self, phy_offset: int, broker_name: str, transaction_id: str) -> str:
        """A 4.x client names no topic: the half message's real topic, read at its offset."""
        half = self._context.group_core(broker_name).store.look_message(phy_offset)
        if half is None or half.properties.get(TRANSACTION_ID, transaction_id) != transaction_id:
            raise RequestError(f"no half message at commit-log offset {phy_offset}", Code.INVALID_TRANSACTION_ID)
        return half.properties.get(REAL_TOPIC, half.topic)
