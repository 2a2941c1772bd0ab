"""Protobuf <-> core model conversions for the Store service. No logic, no I/O.

Status enums convert by member name: the proto's ``PutStatus``/``GetStatus`` mirror the
model's, and the import-time assertions below fail the process if the two ever drift apart.

Input that cannot be converted (a malformed host string, a missing config) raises
``ValueError``, which ``rpc.status`` turns into INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from pyrmq.store.v1 import store_pb2 as pb

from services.domain.format.commitlog_format import MessageRecord, host_from_string, host_to_string
from services.domain.lite import LITE_TOPIC_PREFIX
from services.domain.statuses import APPENDED_PUT_STATUSES, GetStatus, PutStatus
from services.store.client.retry_policy_convert import retry_policy_from_pb, retry_policy_to_pb
from services.store.metadata.auth_config import StoredAcl, StoredPolicy, StoredUser
from services.store.metadata.config_files import SubscriptionGroupConfig, TopicConfig
from services.store.model import Arrival, GetResult, PutResult, StoreStats
from services.store.pop.model import AckStatus, PopResult, PopStatus
from services.store.pop.service import POP_BATCH_MAX

_T = TypeVar("_T")

# Pair assertions: every model status has a proto value of the same name (and vice versa).
assert {s.name for s in PutStatus} == set(pb.PutStatus.keys()) - {"PUT_STATUS_UNSPECIFIED"}
assert {s.name for s in GetStatus} == set(pb.GetStatus.keys()) - {"GET_STATUS_UNSPECIFIED"}

DEFAULT_BORN_HOST = (b"\x7f\x00\x00\x01", 0)
GET_MAX_COUNT_DEFAULT = 32
GET_MAX_BYTES_DEFAULT = 4 << 20
QUERY_MAX_NUM_DEFAULT = 32
TIMESTAMP_MS_MAX = (1 << 63) - 1


def host_from_pb(text: str, field_name: str) -> tuple[bytes, int]:
    """``"ip:port"`` -> (ip bytes, port); empty -> 127.0.0.1:0. ValueError names the field."""
    if not text:
        return DEFAULT_BORN_HOST
    try:
        ip, port = host_from_string(text)
    except (OSError, ValueError):
        raise ValueError(f"{field_name} must be 'ip:port' or '[ipv6]:port', got {text!r}") from None
    if not 0 <= port <= 0xFFFF:
        raise ValueError(f"{field_name} port out of range in {text!r}")
    return ip, port


class _BornHosts(dict[str, tuple[bytes, int]]):
    """``born_host`` text -> parsed host, parsed once: a producer's messages share its address.

    ``_BORN_HOSTS[text]`` is a plain dict lookup on a hit. Malformed text raises (and is not
    cached). Bounded: emptied when full (one entry per producer connection, so rarely).
    Workers share it without a lock: each dict operation is atomic, and a race only parses twice.
    """

    def __missing__(self, text: str) -> tuple[bytes, int]:
        host = host_from_pb(text, "born_host")
        if len(self) >= BORN_HOST_CACHE_MAX:
            self.clear()
        self[text] = host
        return host


BORN_HOST_CACHE_MAX = 4096
_BORN_HOSTS = _BornHosts()

# messages_from_pb builds MessageRecord positionally (keywords cost twice as much): this is the
# order it passes, checked against the dataclass so a reordered field fails the import.
_RECORD_POSITIONAL_FIELDS = (
    "topic",
    "queue_id",
    "body",
    "properties",
    "flag",
    "sys_flag",
    "born_timestamp_ms",
    "born_host",
    "store_timestamp_ms",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
)
assert tuple(MessageRecord.__dataclass_fields__)[: len(_RECORD_POSITIONAL_FIELDS)] == _RECORD_POSITIONAL_FIELDS


def _record_default(name: str, kind: type[_T]) -> _T:
    """A MessageRecord field's default (read once, at import)."""
    value = MessageRecord.__dataclass_fields__[name].default
    assert isinstance(value, kind), (name, value)
    return value


_RECORD_STORE_TIMESTAMP_DEFAULT = _record_default("store_timestamp_ms", int)
_RECORD_STORE_HOST_DEFAULT: tuple[bytes, int] = _record_default("store_host", tuple)

# PutStatus -> proto enum value, by name (the pair assertions above guarantee every one exists).
_PUT_STATUS_TO_PB = {s: pb.PutStatus.Value(s.name) for s in PutStatus}


# -- messages ------------------------------------------------------------------------------


def messages_from_pb(messages: Iterable[pb.Message]) -> list[MessageRecord]:
    """The producer-side fields of messages to put; the store fills in the rest.

    The hot path of PutMessages, hence the locals and the positional constructor. Properties
    are copied key by key: ``dict(map)`` goes through the pure-Python ``Mapping.keys()`` view
    and costs about twice as much on upb's map container. Same key order either way.
    """
    record = MessageRecord
    born_hosts = _BORN_HOSTS
    store_timestamp_ms = _RECORD_STORE_TIMESTAMP_DEFAULT
    store_host = _RECORD_STORE_HOST_DEFAULT
    records: list[MessageRecord] = []
    append = records.append
    for msg in messages:
        pb_properties = msg.properties
        properties = {}
        for key in pb_properties:
            properties[key] = pb_properties[key]
        append(
            record(
                msg.topic,
                msg.queue_id,
                msg.body,
                properties,
                msg.flag,
                msg.sys_flag,
                msg.born_timestamp_ms,
                born_hosts[msg.born_host],
                store_timestamp_ms,
                store_host,
                msg.reconsume_times,
                msg.prepared_transaction_offset,
            )
        )
    return records


def message_from_pb(msg: pb.Message) -> MessageRecord:
    """The producer-side fields of a message to put; the store fills in the rest."""
    return messages_from_pb((msg,))[0]


def message_to_pb(record: MessageRecord) -> pb.Message:
    return pb.Message(
        topic=record.topic,
        queue_id=record.queue_id,
        body=record.body,
        properties=record.properties,
        flag=record.flag,
        sys_flag=record.sys_flag,
        born_timestamp_ms=record.born_timestamp_ms,
        born_host=host_to_string(record.born_host),
        store_timestamp_ms=record.store_timestamp_ms,
        store_host=host_to_string(record.store_host),
        reconsume_times=record.reconsume_times,
        prepared_transaction_offset=record.prepared_transaction_offset,
        queue_offset=record.queue_offset,
        phy_offset=record.phy_offset,
        body_crc=record.body_crc,
        offset_msg_id=record.offset_msg_id,
        store_size_bytes=record.total_size,
    )


def put_result_to_pb(result: PutResult) -> pb.PutResult:
    return pb.PutResult(
        status=_PUT_STATUS_TO_PB[result.status],
        phy_offset=result.phy_offset,
        queue_offset=result.queue_offset,
        offset_msg_id=result.offset_msg_id,
        store_timestamp_ms=result.store_timestamp_ms,
        wrote_bytes=result.wrote_bytes,
        error=result.error,
    )


def put_response_to_pb(results: Iterable[PutResult]) -> pb.PutMessagesResponse:
    """The PutMessages response: one ``put_result_to_pb`` per result, built in place.

    ``results.add()`` and attribute stores cost half of building each ``pb.PutResult`` with
    keywords and copying it into the list. ``error`` is only set when non-empty (proto3: an
    empty string is the default either way, so the bytes on the wire are the same).
    """
    response = pb.PutMessagesResponse()
    add = response.results.add
    status_to_pb = _PUT_STATUS_TO_PB
    for result in results:
        out = add()
        out.status = status_to_pb[result.status]
        out.phy_offset = result.phy_offset
        out.queue_offset = result.queue_offset
        out.offset_msg_id = result.offset_msg_id
        out.store_timestamp_ms = result.store_timestamp_ms
        out.wrote_bytes = result.wrote_bytes
        if result.error:
            out.error = result.error
    return response


def put_batch_response_to_pb(
    status: PutStatus, error: str, records: list[MessageRecord], store_host_prefix: bytes
) -> pb.PutMessagesResponse:
    """The PutMessages response with ``batch`` (``batch_results``): packed columns, filled by C
    ``extend`` calls instead of a PutResult message per record."""
    response = pb.PutMessagesResponse()
    batch = response.batch
    batch.status = _PUT_STATUS_TO_PB[status]
    if error:
        batch.error = error
    if records and status in APPENDED_PUT_STATUSES:
        batch.phy_offset.extend([rec.phy_offset for rec in records])
        batch.queue_offset.extend([rec.queue_offset for rec in records])
        batch.wrote_bytes.extend([rec.total_size for rec in records])
        batch.store_timestamp_ms = records[0].store_timestamp_ms
        batch.store_host_prefix = store_host_prefix
    return response


def get_result_to_pb(result: GetResult) -> pb.GetMessagesResponse:
    return pb.GetMessagesResponse(
        status=pb.GetStatus.Value(result.status.name),
        messages=[message_to_pb(m) for m in result.messages],
        next_begin_offset=result.next_begin_offset,
        min_offset=result.min_offset,
        max_offset=result.max_offset,
    )


@dataclass(frozen=True, slots=True)
class GetArgs:
    """``FileStore.get_messages``'s arguments, checked, 0 limits replaced by the defaults."""

    topic: str
    queue_id: int
    queue_offset: int
    max_count: int
    max_bytes: int
    tags_codes: frozenset[int] | None


def get_request_from_pb(request: pb.GetMessagesRequest) -> GetArgs:
    if request.max_count < 0 or request.max_bytes < 0:
        raise ValueError("max_count and max_bytes must not be negative")
    return GetArgs(
        request.topic,
        request.queue_id,
        request.queue_offset,
        request.max_count or GET_MAX_COUNT_DEFAULT,
        request.max_bytes or GET_MAX_BYTES_DEFAULT,
        frozenset(request.tags_codes) if request.tags_codes else None,
    )


@dataclass(frozen=True, slots=True)
class QueryArgs:
    """``FileStore.query_messages_by_key``'s arguments, checked and defaulted."""

    topic: str
    key: str
    max_num: int
    begin_timestamp_ms: int
    end_timestamp_ms: int


def query_request_from_pb(request: pb.QueryMessagesByKeyRequest) -> QueryArgs:
    if not request.key:
        raise ValueError("key must not be empty")
    if request.max_num < 0:
        raise ValueError("max_num must not be negative")
    return QueryArgs(
        request.topic,
        request.key,
        request.max_num or QUERY_MAX_NUM_DEFAULT,
        request.begin_timestamp_ms,
        request.end_timestamp_ms or TIMESTAMP_MS_MAX,
    )


# -- arrivals and stats ---------------------------------------------------------------------


def arrival_to_pb(arrival: Arrival) -> pb.Arrival:
    return pb.Arrival(
        topic=arrival.topic,
        queue_id=arrival.queue_id,
        max_offset=arrival.max_offset,
        store_timestamp_ms=arrival.store_timestamp_ms,
    )


def stats_to_pb(stats: StoreStats) -> pb.StoreStats:
    return pb.StoreStats(
        put_messages_total=stats.put_messages_total,
        put_bytes_total=stats.put_bytes_total,
        commitlog_min_offset=stats.commitlog_min_offset,
        commitlog_max_offset=stats.commitlog_max_offset,
        flushed_offset=stats.flushed_offset,
        confirm_offset=stats.confirm_offset,
        reput_from_offset=stats.reput_from_offset,
        dispatch_behind_bytes=stats.dispatch_behind_bytes,
        flush_behind_bytes=stats.flush_behind_bytes,
        storage_size_bytes=stats.storage_size_bytes,
        topic_count=stats.topic_count,
        group_count=stats.group_count,
        flush_mode=stats.flush_mode,
        lite_topic_count=stats.lite_topic_count,
    )


def group_offsets_to_pb(offsets: dict[tuple[str, int], int]) -> pb.GetGroupOffsetsResponse:
    return pb.GetGroupOffsetsResponse(
        offsets=[
            pb.QueueOffset(topic=topic, queue_id=queue_id, offset=offset)
            for (topic, queue_id), offset in sorted(offsets.items())
        ]
    )


# -- topic and group configs ----------------------------------------------------------------

# Optional proto fields copied only when set, so an unset one keeps the dataclass default.
_TOPIC_OPTIONAL_FIELDS = ("read_queue_nums", "write_queue_nums", "perm", "order", "topic_sys_flag")
_GROUP_OPTIONAL_FIELDS = (
    "consume_enable",
    "consume_from_min_enable",
    "consume_broadcast_enable",
    "consume_message_orderly",
    "retry_queue_nums",
    "retry_max_times",
    "broker_id",
    "which_broker_when_consume_slowly",
    "notify_consumer_ids_changed_enable",
    "group_sys_flag",
    "consume_timeout_minute",
)
assert set(_GROUP_OPTIONAL_FIELDS) < set(SubscriptionGroupConfig.__dataclass_fields__)
assert set(_TOPIC_OPTIONAL_FIELDS) < set(TopicConfig.__dataclass_fields__)


def _set_fields(message: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {name: getattr(message, name) for name in names if message.HasField(name)}


def topic_to_pb(config: TopicConfig) -> pb.TopicConfig:
    return pb.TopicConfig(
        topic_name=config.topic_name,
        read_queue_nums=config.read_queue_nums,
        write_queue_nums=config.write_queue_nums,
        perm=config.perm,
        order=config.order,
        topic_filter_type=pb.TopicFilterType.Value(config.topic_filter_type),
        topic_sys_flag=config.topic_sys_flag,
        attributes=config.attributes,
        message_type=pb.MessageType.Value(config.message_type),
    )


def topic_from_pb(message: pb.TopicConfig) -> TopicConfig:
    if not message.topic_name:
        raise ValueError("config.topic_name must not be empty")
    config = TopicConfig(
        topic_name=message.topic_name,
        attributes=dict(message.attributes),
        **_set_fields(message, _TOPIC_OPTIONAL_FIELDS),
    )
    if message.HasField("topic_filter_type") and message.topic_filter_type != pb.TOPIC_FILTER_TYPE_UNSPECIFIED:
        config.topic_filter_type = pb.TopicFilterType.Name(message.topic_filter_type)
    if message.message_type != pb.MESSAGE_TYPE_UNSPECIFIED:
        config.message_type = pb.MessageType.Name(message.message_type)
    return config


def group_to_pb(config: SubscriptionGroupConfig) -> pb.SubscriptionGroupConfig:
    return pb.SubscriptionGroupConfig(
        group_name=config.group_name,
        attributes=config.attributes,
        group_retry_policy=retry_policy_to_pb(config.group_retry_policy),
        **{name: getattr(config, name) for name in _GROUP_OPTIONAL_FIELDS},
    )


def group_from_pb(message: pb.SubscriptionGroupConfig) -> SubscriptionGroupConfig:
    if not message.group_name:
        raise ValueError("config.group_name must not be empty")
    config = SubscriptionGroupConfig(
        group_name=message.group_name,
        attributes=dict(message.attributes),
        **_set_fields(message, _GROUP_OPTIONAL_FIELDS),
    )
    if message.HasField("group_retry_policy"):
        config.group_retry_policy = retry_policy_from_pb(message.group_retry_policy)
    return config


# -- pop consumption ---------------------------------------------------------------------------

# Proto enum values are package-scoped, hence the prefixes; the tables below are total.
_POP_STATUS_TO_PB = {PopStatus.FOUND: pb.POP_FOUND, PopStatus.NO_MESSAGE: pb.POP_NO_MESSAGE}
_ACK_STATUS_TO_PB: dict[AckStatus, pb.AckStatus] = {
    AckStatus.OK: pb.ACK_OK,
    AckStatus.INVALID_RECEIPT_HANDLE: pb.INVALID_RECEIPT_HANDLE,
    AckStatus.DLQ_PUT_FAILED: pb.DLQ_PUT_FAILED,
}
assert set(_POP_STATUS_TO_PB) == set(PopStatus) and len(pb.PopStatus.keys()) == len(PopStatus) + 1
assert set(_ACK_STATUS_TO_PB) == set(AckStatus) and len(pb.AckStatus.keys()) == len(AckStatus) + 1
POP_MAX_COUNT_DEFAULT = POP_BATCH_MAX


def _group_and_topic(request: Any) -> None:
    if not request.group or not request.topic:
        raise ValueError("group and topic must not be empty")


@dataclass(frozen=True, slots=True)
class PopArgs:
    """``PopService.pop``'s arguments, checked (max_count 0 means 32)."""

    group: str
    topic: str
    queue_id: int
    max_count: int
    invisible_ms: int
    tags_codes: frozenset[int] | None
    fifo: bool
    sql_expression: str


def pop_request_from_pb(request: pb.PopMessagesRequest) -> PopArgs:
    _group_and_topic(request)
    if request.max_count < 0:
        raise ValueError(f"max_count must not be negative, got {request.max_count}")
    if request.invisible_duration_ms < 0:
        raise ValueError(f"invisible_duration_ms must not be negative, got {request.invisible_duration_ms}")
    return PopArgs(
        request.group,
        request.topic,
        request.queue_id,
        request.max_count or POP_MAX_COUNT_DEFAULT,
        request.invisible_duration_ms,
        frozenset(request.tags_codes) if request.tags_codes else None,
        request.fifo,
        request.sql_expression,
    )


LITE_POP_QUEUES_MAX = 10_000


@dataclass(frozen=True, slots=True)
class PopLiteArgs:
    """``PopService.pop_lite``'s arguments, checked and defaulted."""

    group: str
    lmqs: list[str]
    max_count: int
    invisible_ms: int
    per_queue_max: int


def pop_lite_request_from_pb(request: pb.PopLiteMessagesRequest) -> PopLiteArgs:
    if not request.group:
        raise ValueError("group is required")
    if len(request.lmq_topics) > LITE_POP_QUEUES_MAX:
        raise ValueError(f"at most {LITE_POP_QUEUES_MAX} lite topics per pop, not {len(request.lmq_topics)}")
    if request.max_count < 0 or request.per_queue_max_count < 0 or request.invisible_duration_ms < 0:
        raise ValueError("max_count, per_queue_max_count and invisible_duration_ms must not be negative")
    max_count = request.max_count or POP_MAX_COUNT_DEFAULT
    return PopLiteArgs(
        request.group,
        list(request.lmq_topics),
        max_count,
        request.invisible_duration_ms,
        request.per_queue_max_count or max_count,
    )


def pop_result_to_pb(result: PopResult) -> pb.PopMessagesResponse:
    response = pb.PopMessagesResponse(
        status=_POP_STATUS_TO_PB[result.status],
        examined_queues=[pb.QueueRef(topic=topic, queue_id=queue_id) for topic, queue_id in result.examined],
    )
    for popped in result.messages:
        message = message_to_pb(popped.record)
        if not popped.topic.startswith(LITE_TOPIC_PREFIX):
            message.topic = popped.topic  # the original topic, also for a retry copy (an LMQ's: its parent)
        response.messages.add(
            message=message,
            queue_id=popped.queue_id,
            queue_offset=popped.queue_offset,
            delivery_attempt=popped.delivery_attempt,
            receipt_handle=popped.receipt_handle,
            source_topic=popped.source_topic,
        )
    return response


def receipt_request_from_pb(request: Any) -> tuple[str, str, str]:
    """(group, topic, receipt handle) of an Ack / ChangeInvisibleDuration / ForwardToDLQ request.

    An empty handle is not an argument error: it is an invalid handle (a status)."""
    _group_and_topic(request)
    return request.group, request.topic, request.receipt_handle


ACK_MESSAGES_HANDLES_MAX = 1024


def receipts_request_from_pb(request: Any) -> tuple[str, str, list[str]]:
    """(group, topic, receipt handles) of an AckMessages request."""
    _group_and_topic(request)
    if len(request.receipt_handles) > ACK_MESSAGES_HANDLES_MAX:
        raise ValueError(
            f"at most {ACK_MESSAGES_HANDLES_MAX} receipt handles per call, got {len(request.receipt_handles)}"
        )
    return request.group, request.topic, list(request.receipt_handles)


def ack_status_to_pb(status: AckStatus) -> pb.AckStatus:
    return _ACK_STATUS_TO_PB[status]


# -- users and ACLs ----------------------------------------------------------------------------------


def user_to_pb(user: StoredUser) -> pb.AuthUser:
    return pb.AuthUser(
        username=user.username, password=user.password, user_type=user.user_type, user_status=user.user_status
    )


def user_from_pb(user: pb.AuthUser) -> StoredUser:
    return StoredUser(user.username, user.password, user.user_type or "Normal", user.user_status or "enable")


def acl_to_pb(acl: StoredAcl) -> pb.AuthAcl:
    return pb.AuthAcl(
        username=acl.username,
        policies=[
            pb.AuthPolicy(
                resource=p.resource, actions=list(p.actions), decision=p.decision, source_ips=list(p.source_ips)
            )
            for p in acl.policies
        ],
    )


def acl_from_pb(acl: pb.AuthAcl) -> StoredAcl:
    return StoredAcl(
        acl.username,
        tuple(StoredPolicy(p.resource, tuple(p.actions), p.decision, tuple(p.source_ips)) for p in acl.policies),
    )
