"""``apache.rocketmq.v2`` protobuf <-> broker core model. No logic beyond the field mapping.

Input that cannot be mapped (an enum value the schema does not know, an out-of-range
Timestamp) raises ``RequestError`` with the code the field's rule uses.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from google.protobuf import duration_pb2, timestamp_pb2

from services.broker.errors import Code, RequestError
from services.broker.model import BodyEncoding, ClientType, IncomingMessage, SendReceipt
from services.broker.producer import response_code
from services.broker.route import Route
from services.broker.telemetry import ClientSettings, ServerSettings
from services.broker.transaction import Resolution
from services.broker.v2.status import OK_STATUS, status
from services.domain.delivery import MessageType

# Pair assertions: the core's enums are the proto's.
assert {t.name: t.value for t in MessageType} == dict(d.MessageType.items())
assert {t.name: t.value for t in ClientType} == dict(d.ClientType.items())
assert {t.name: t.value for t in BodyEncoding} == dict(d.Encoding.items())
assert {r.name: r.value for r in Resolution} == dict(d.TransactionResolution.items())

# google.protobuf.Timestamp's valid range (0001-01-01 .. 9999-12-31), as Timestamps.isValid.
TIMESTAMP_SECONDS_MIN = -62_135_596_800
TIMESTAMP_SECONDS_MAX = 253_402_300_799
_MESSAGE_TYPES = {t.value: t for t in MessageType}
_ENCODINGS = {e.value: e for e in BodyEncoding}
_CLIENT_TYPES = {t.value: t for t in ClientType}


def timestamp_ms(value: timestamp_pb2.Timestamp, what: str, code: Code) -> int:
    if not (TIMESTAMP_SECONDS_MIN <= value.seconds <= TIMESTAMP_SECONDS_MAX and 0 <= value.nanos < 1_000_000_000):
        raise RequestError(f"{what} is not a valid timestamp", code)
    return value.seconds * 1000 + value.nanos // 1_000_000


def duration_s(value: duration_pb2.Duration, what: str, code: Code) -> int:
    if value.seconds < 0 or value.nanos < 0:
        raise RequestError(f"{what} must not be negative", code)
    return value.seconds


def duration_from_ms(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=ms % 1000 * 1_000_000)


# -- SendMessage -------------------------------------------------------------------------------


def incoming_message(message: d.Message) -> IncomingMessage:
    props = message.system_properties
    has = props.HasField
    message_type = _MESSAGE_TYPES.get(props.message_type)
    if message_type is None:
        raise RequestError(f"unknown message type {props.message_type}", Code.BAD_REQUEST)
    encoding = _ENCODINGS.get(props.body_encoding)
    if encoding is None:
        raise RequestError(f"unknown body encoding {props.body_encoding}", Code.BAD_REQUEST)
    user_properties: dict[str, str] = {}
    source = message.user_properties
    for key in source:  # key by key: dict(map) is twice as slow on upb maps
        user_properties[key] = source[key]
    return IncomingMessage(
        topic=message.topic.name,
        topic_namespace=message.topic.resource_namespace,
        body=message.body,
        user_properties=user_properties,
        tag=props.tag if has("tag") else None,
        keys=list(props.keys),
        message_id=props.message_id,
        message_type=message_type,
        born_timestamp_ms=timestamp_ms(props.born_timestamp, "born_timestamp", Code.BAD_REQUEST)
        if has("born_timestamp")
        else None,
        born_host=props.born_host,
        body_encoding=encoding,
        message_group=props.message_group if has("message_group") else None,
        delivery_timestamp_ms=timestamp_ms(props.delivery_timestamp, "delivery_timestamp", Code.ILLEGAL_DELIVERY_TIME)
        if has("delivery_timestamp")
        else None,
        delivery_attempt=props.delivery_attempt,
        trace_context=props.trace_context if has("trace_context") else None,
        orphaned_transaction_recovery_s=duration_s(
            props.orphaned_transaction_recovery_duration, "orphaned_transaction_recovery_duration", Code.BAD_REQUEST
        )
        if has("orphaned_transaction_recovery_duration")
        else None,
        lite_topic=props.lite_topic if has("lite_topic") else None,
        priority=props.priority if has("priority") else None,
    )


def incoming_messages(request: s.SendMessageRequest) -> list[IncomingMessage]:
    return [incoming_message(m) for m in request.messages]


def send_response(receipts: Iterable[SendReceipt]) -> s.SendMessageResponse:
    receipts = list(receipts)
    response = s.SendMessageResponse(status=status(response_code(receipts)))
    add = response.entries.add
    for receipt in receipts:
        entry = add()
        entry.status.code = receipt.code
        entry.status.message = receipt.status_message
        entry.message_id = receipt.message_id
        entry.transaction_id = receipt.transaction_id
        entry.offset = receipt.offset
        if receipt.recall_handle:
            entry.recall_handle = receipt.recall_handle
    return response


def resolution(value: int) -> Resolution:
    """An EndTransaction resolution; a value the schema does not know counts as UNSPECIFIED."""
    try:
        return Resolution(value)
    except ValueError:
        return Resolution.TRANSACTION_RESOLUTION_UNSPECIFIED


# -- QueryRoute ---------------------------------------------------------------------------------


def route_response(topic: d.Resource, route: Route) -> s.QueryRouteResponse:
    """One ``Broker`` per broker group (name = the group, id 0, this broker's endpoint)."""
    endpoints = d.Endpoints(
        scheme=d.AddressScheme.Value(route.endpoint_scheme),
        addresses=[d.Address(host=route.endpoint_host, port=route.endpoint_port)],
    )
    brokers: dict[str, d.Broker] = {}

    def broker(name: str) -> d.Broker:
        found = brokers.get(name)
        if found is None:
            found = brokers[name] = d.Broker(name=name, id=route.broker_id, endpoints=endpoints)
        return found

    # cast: the stub types the field as the proto's enum class; MessageType's numbers are its numbers
    accept = [cast(d.MessageType, int(t)) for t in route.accept_message_types]
    return s.QueryRouteResponse(
        status=OK_STATUS,
        message_queues=[
            d.MessageQueue(
                topic=topic,
                id=queue.queue_id,
                permission=d.Permission.Value(queue.permission),
                broker=broker(queue.broker_name or route.broker_name),
                accept_message_types=accept,
            )
            for queue in route.queues
        ],
    )


# -- Telemetry ----------------------------------------------------------------------------------


def client_settings(settings: d.Settings) -> ClientSettings:
    client_type = _CLIENT_TYPES.get(settings.client_type, ClientType.CLIENT_TYPE_UNSPECIFIED)
    agent = settings.user_agent
    language = d.Language.Name(agent.language) if agent.language in d.Language.values() else ""
    language = "" if language == "LANGUAGE_UNSPECIFIED" else language
    which = settings.WhichOneof("pub_sub")
    if which == "publishing":
        topics = tuple(r.name for r in settings.publishing.topics)
        return ClientSettings(client_type, publishing_topics=topics, language=language, version=agent.version)
    if which == "subscription":
        subscription = settings.subscription
        group = subscription.group.name if subscription.HasField("group") else ""
        entries = tuple((e.topic.name, e.expression.expression or "*") for e in subscription.subscriptions)
        return ClientSettings(
            client_type,
            subscription_group=group,
            subscriptions=entries,
            language=language,
            version=agent.version,
        )
    return ClientSettings(client_type, language=language, version=agent.version)


def settings_reply(client: d.Settings, server: ServerSettings) -> s.TelemetryCommand:
    """The client's settings merged with the server's decisions, with status OK (docs/v2-clients.md, section 4)."""
    merged = d.Settings()
    merged.CopyFrom(client)
    backoff = merged.backoff_policy
    backoff.Clear()
    backoff.max_attempts = server.backoff.max_attempts
    if server.backoff.exponential is not None:
        initial_ms, max_ms, multiplier = server.backoff.exponential
        backoff.exponential_backoff.initial.CopyFrom(duration_from_ms(initial_ms))
        backoff.exponential_backoff.max.CopyFrom(duration_from_ms(max_ms))
        backoff.exponential_backoff.multiplier = multiplier
    else:
        backoff.customized_backoff.SetInParent()  # the strategy is set even with no delays
        backoff.customized_backoff.next.extend(duration_from_ms(ms) for ms in server.backoff.customized_ms or ())
    if server.max_body_size is not None:
        merged.publishing.max_body_size = server.max_body_size
        merged.publishing.validate_message_type = bool(server.validate_message_type)
    if server.receive_batch_size is not None:
        subscription = merged.subscription
        subscription.fifo = bool(server.fifo)
        subscription.receive_batch_size = server.receive_batch_size
        subscription.long_polling_timeout.CopyFrom(duration_from_ms(server.long_polling_timeout_ms or 0))
        if server.lite_subscription_quota is not None:  # the Python client copies both verbatim
            subscription.lite_subscription_quota = server.lite_subscription_quota
            subscription.max_lite_topic_size = server.max_lite_topic_size or 0
    merged.metric.Clear()
    merged.metric.on = False  # on=true with endpoints would start an OTLP exporter in Py
    return s.TelemetryCommand(status=OK_STATUS, settings=merged)
