"""RecallMessage: cancel a delayed message before its time (RocketMQ 5.3).

A delay message's send receipt carries a recall handle: URL-safe Base64 of
``"v1 <topic> <brokerName> <TIMER_OUT_MS + 1> <message id>"`` (RocketMQ's
``RecallMessageHandle.HandleV1``; ``producer.recall_handle`` builds it). Recalling puts a
DELETE marker into ``rmq_sys_wheel_timer`` for the same wheel slot (RocketMQ's
``RecallMessageProcessor`` + the timer put hook): ``TIMER_DEL_UNIQKEY`` = ``topic+messageId``,
``TIMER_DELIVER_MS`` = the handle's timestamp (so ``TIMER_OUT_MS`` rounds to the message's),
``UNIQ_KEY`` = the message id, tag ``_RECALL_TAG_``, body ``"0"``. The scheduler
(services/scheduler/timer_dequeue.py) skips the message whose key a marker of its slot names.

Checks, in the proxy's and broker's order, with the codes we answer (the proxy answers
INTERNAL_SERVER_ERROR for every broker-side refusal; we give the client a code it can act on):

| check | code |
|---|---|
| topic name, system topic | ILLEGAL_TOPIC |
| topic unknown (never auto-created here) | TOPIC_NOT_FOUND |
| topic type neither DELAY nor MIXED | MESSAGE_PROPERTY_CONFLICT_WITH_TYPE |
| handle empty, not Base64, not ``v1`` with 5 fields | BAD_REQUEST "recall handle is invalid" |
| handle for another topic / broker | BAD_REQUEST |
| ``now >= timestamp`` (the message's slot has begun) or beyond the max delay | ILLEGAL_DELIVERY_TIME |
| the store refused the marker | the send path's mapping (``producer.PUT_STATUS_TO_V2_CODE``) |
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from services.broker import validation
from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError, Code, RequestError
from services.domain.contracts.delay import delete_key, park_timer
from services.domain.delivery import MessageType
from services.domain.format.properties_format import (
    BORN_TIMESTAMP,
    CLUSTER,
    TAGS,
    TIMER_DEL_UNIQKEY,
    TIMER_DELIVER_MS,
    UNIQ_KEY,
)
from services.store.client.model import MessageToPut, PutStatus, TopicInfo

HANDLE_VERSION = "v1"
RECALL_TAG = "_RECALL_TAG_"
RECALL_BODY = b"0"


@dataclass(frozen=True, slots=True)
class RecallHandle:
    topic: str
    broker_name: str
    timestamp_text: str  # TIMER_OUT_MS + 1 of the message, as written
    message_id: str


def decode_handle(handle: str) -> RecallHandle:
    """RecallMessageHandle.decodeHandle; RequestError(BAD_REQUEST) if malformed."""
    invalid = RequestError("recall handle is invalid", Code.BAD_REQUEST)
    if not handle:
        raise invalid
    try:
        raw = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4)).decode("utf-8")
    except (binascii.Error, ValueError):
        raise invalid from None
    items = raw.split(" ")
    if items[0] != HANDLE_VERSION or len(items) < 5:
        raise invalid
    return RecallHandle(items[1], items[2], items[3], items[4])


def check_recall(config: BrokerConfig, topic: TopicInfo, handle: RecallHandle, now_ms: int) -> int:
    """The message's wheel timestamp (``TIMER_OUT_MS + 1``) if ``handle`` may be recalled now."""
    if config.validate_message_type:
        validation.validate_topic_accepts(topic.name, topic.message_type, MessageType.DELAY)
    if handle.topic != topic.name:
        raise RequestError("recall failed, topic not match", Code.BAD_REQUEST)
    if handle.broker_name != config.broker_name:
        raise RequestError(f"recall failed, the handle is for broker {handle.broker_name}", Code.BAD_REQUEST)
    try:
        timestamp_ms = int(handle.timestamp_text)
    except ValueError:
        timestamp_ms = -1
    time_left_ms = timestamp_ms - now_ms
    if (
        timestamp_ms < 0
        or time_left_ms <= 0
        or time_left_ms >= config.delivery_delay_max_ms + config.timer_precision_ms
    ):
        raise RequestError("recall failed, timestamp invalid", Code.ILLEGAL_DELIVERY_TIME)
    return timestamp_ms


def marker_message(
    config: BrokerConfig, handle: RecallHandle, timestamp_ms: int, timer_out_ms: int, peer_address: str, now_ms: int
) -> MessageToPut:
    """The DELETE marker, already parked in rmq_sys_wheel_timer as the timer put hook would."""
    properties = {
        TAGS: RECALL_TAG,
        TIMER_DEL_UNIQKEY: delete_key(handle.topic, handle.message_id),
        UNIQ_KEY: handle.message_id,
        TIMER_DELIVER_MS: str(timestamp_ms),
        BORN_TIMESTAMP: str(now_ms),
        CLUSTER: config.cluster_name,
    }
    topic, queue_id = park_timer(properties, handle.topic, 0, timer_out_ms)
    return MessageToPut(
        topic=topic,
        queue_id=queue_id,
        body=RECALL_BODY,
        properties=properties,
        born_timestamp_ms=now_ms,
        born_host=peer_address,
        allow_system_topic=True,
    )


def recall_outcome_error(status: PutStatus, error: str, codes: dict[PutStatus, Code]) -> BrokerError | None:
    """None when the marker was appended (FLUSH_DISK_TIMEOUT counts, as in RocketMQ)."""
    if status in (PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT):
        return None
    return BrokerError(f"recall failed, store status {status.name}: {error}", codes[status])
