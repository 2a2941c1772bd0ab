"""Consumer codes other than pulls (../shared/docs/remoting.md §2.3): HEART_BEAT 34,
UNREGISTER_CLIENT 35, GET_CONSUMER_LIST_BY_GROUP 38, the offsets (QUERY_CONSUMER_OFFSET 14,
UPDATE_CONSUMER_OFFSET 15, SEARCH_OFFSET_BY_TIMESTAMP 29, GET_MAX_OFFSET 30, GET_MIN_OFFSET 31,
GET_EARLIEST_MSG_STORETIME 32), LOCK_BATCH_MQ 41 / UNLOCK_BATCH_MQ 42 and CHECK_CLIENT_CONFIG 46.

A heartbeat registers its consumers and producers in ``classic_clients.ClassicClients`` and, the
first time this broker sees a consumer group, creates the subscription group and its retry topic
``%RETRY%<group>`` (1 queue) in the store, as RocketMQ's broker does with
``autoCreateSubscriptionGroup``. Members joining or leaving a group get
NOTIFY_CONSUMER_IDS_CHANGED (oneway), so they rebalance at once.

QUERY_CONSUMER_OFFSET follows ``ConsumerManageProcessor``: the stored offset; else
QUERY_NOT_FOUND (22) when ``setZeroIfNotFound`` is false; else 0 when the queue's min offset is 0
(RocketMQ also asks whether offset 0 is still in memory: pyrmq's page cache is the OS's, so a
queue that still holds its first message counts); else 22. Offsets are the same table v2
consumers, ``pyrmq consumer progress`` and the store's pop use.
"""

from __future__ import annotations

import logging
from typing import Any

from services.broker.classic_clients import ConsumerClient, ProducerClient, Subscription
from services.broker.consumer import FilterType, parse_filter, validate_group
from services.broker.errors import FAILURES, BrokerError, as_broker_error
from services.broker.remoting.context import RemotingContext
from services.broker.remoting.dispatch import (
    Dispatcher,
    RemotingError,
    json_body,
    required,
    required_int,
)
from services.broker.remoting.server import Channel
from services.domain.remoting.bodies import LockBatchRequest, encode_lock_batch_response, parse_lock_batch_request
from services.domain.remoting.codes import RequestCode, ResponseCode
from services.domain.remoting.command import RemotingCommand
from services.domain.remoting.fastjson_codec import fastjson_dumpb
from services.domain.remoting.heartbeat import ConsumerData, parse_heartbeat
from services.domain.remoting.tags import TagExpressionError, parse_tag_expression

log = logging.getLogger(__name__)


class Consumers:
    def __init__(self, context: RemotingContext) -> None:
        self._context = context

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(RequestCode.HEART_BEAT, self.heartbeat)
        dispatcher.register(RequestCode.UNREGISTER_CLIENT, self.unregister, inline=True)
        dispatcher.register(RequestCode.GET_CONSUMER_LIST_BY_GROUP, self.consumer_list, inline=True)
        dispatcher.register(RequestCode.QUERY_CONSUMER_OFFSET, self.query_offset)
        dispatcher.register(RequestCode.UPDATE_CONSUMER_OFFSET, self.update_offset)
        dispatcher.register(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset)
        dispatcher.register(RequestCode.GET_MAX_OFFSET, self.max_offset)
        dispatcher.register(RequestCode.GET_MIN_OFFSET, self.min_offset)
        dispatcher.register(RequestCode.GET_EARLIEST_MSG_STORETIME, self.earliest_store_time)
        dispatcher.register(RequestCode.LOCK_BATCH_MQ, self.lock, inline=True)
        dispatcher.register(RequestCode.UNLOCK_BATCH_MQ, self.unlock, inline=True)
        dispatcher.register(RequestCode.CHECK_CLIENT_CONFIG, self.check_client_config, inline=True)
        dispatcher.on_closed(self._context.clients.channel_closed)

    # -- HEART_BEAT 34 --------------------------------------------------------------------------
    def heartbeat(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            data = parse_heartbeat(request.body)
        except ValueError as exc:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, f"the heartbeat body does not decode: {exc}") from None
        channel.client_ids.add(data.client_id)
        channel.language, channel.version = request.language, request.version
        clients = self._context.clients
        for consumer_data in data.consumers:
            consumer = self._consumer(channel, request, data.client_id, consumer_data)
            clients.consumer_heartbeat(consumer)  # in memory first: a store outage must not drop it
            try:
                self._context.ensure_group(consumer.group)
            except FAILURES as exc:  # the next heartbeat (30 s) or route query tries again
                log.warning(
                    "cannot create group %s for a heartbeat yet: %s", consumer.group, as_broker_error(exc).message
                )
        for group in data.producer_groups:
            clients.producer_heartbeat(
                ProducerClient(data.client_id, group, channel, request.language, request.version, channel.peer_address)
            )
        return request.response(ResponseCode.SUCCESS)

    @staticmethod
    def _consumer(channel: Channel, request: RemotingCommand, client_id: str, data: ConsumerData) -> ConsumerClient:
        validate_group(data.group)
        subscriptions: dict[str, Subscription] = {}
        for sub in data.subscriptions:
            tags: frozenset[str] = frozenset()
            codes: frozenset[int] = frozenset()
            if sub.expression_type.upper() == "TAG":
                # The tags are rebuilt from the expression: the C++ client's codeSet is not the
                # tags' Java hash codes.
                try:
                    parsed = parse_tag_expression(sub.sub_string)
                except TagExpressionError as exc:
                    raise RemotingError(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(exc)) from None
                tags, codes = parsed.tags, parsed.codes
            subscriptions[sub.topic] = Subscription(
                sub.topic, sub.sub_string, sub.expression_type, sub.sub_version, tags, codes
            )
        return ConsumerClient(
            client_id,
            data.group,
            channel,
            subscriptions,
            data.message_model,
            data.consume_type,
            data.consume_from_where,
            request.language,
            request.version,
            channel.peer_address,
        )

    # -- UNREGISTER_CLIENT 35 / GET_CONSUMER_LIST_BY_GROUP 38 -----------------------------------
    def unregister(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        client_id = required(fields, "clientID")
        self._context.clients.unregister(
            client_id, fields.get("consumerGroup") or "", fields.get("producerGroup") or ""
        )
        return request.response(ResponseCode.SUCCESS)

    def consumer_list(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        group = required(request.ext_fields, "consumerGroup")
        ids = sorted(c.client_id for c in self._context.clients.consumers(group))
        if not ids:
            return request.response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb({"consumerIdList": ids}))

    # -- offsets ------------------------------------------------------------------------------------
    def query_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        group = required(fields, "consumerGroup")
        topic = required(fields, "topic")
        queue_id = required_int(fields, "queueId")
        core = self._context.group_core(self._context.broker_name(channel, fields))
        not_found = "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first"
        try:
            core.offsets.check_queue(topic, queue_id)
        except BrokerError:  # a queue that does not exist holds no offset (checkInMemByConsumeOffset)
            return request.response(ResponseCode.QUERY_NOT_FOUND, not_found)
        held = self._context.core.classic_offsets.get(core.name, group, topic, queue_id)
        offset = held if held is not None else core.store.query_consumer_offset(group, topic, queue_id)
        if offset < 0:
            if fields.get("setZeroIfNotFound", "").strip().lower() == "false":
                return request.response(ResponseCode.QUERY_NOT_FOUND, not_found)
            min_offset, _ = core.store.queue_offsets(topic, queue_id)
            if min_offset > 0:
                return request.response(ResponseCode.QUERY_NOT_FOUND, not_found)
            offset = 0
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def update_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        group = required(fields, "consumerGroup")
        topic = required(fields, "topic")
        queue_id = required_int(fields, "queueId")
        offset = required_int(fields, "commitOffset")
        validate_group(group)
        core = self._context.group_core(self._context.broker_name(channel, fields))
        core.offsets.check_queue(topic, queue_id)
        if core.store.get_group(group) is None:
            raise RemotingError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} not exist!")
        core.offsets.update_offset(group, topic, queue_id, offset)
        self._context.core.classic_offsets.stored(core.name, group, topic, queue_id, offset)
        return request.response(ResponseCode.SUCCESS)

    def _queue(self, channel: Channel, request: RemotingCommand) -> tuple[Any, str, int]:
        fields = request.ext_fields
        topic = required(fields, "topic")
        queue_id = required_int(fields, "queueId")
        core = self._context.group_core(self._context.broker_name(channel, fields))
        core.offsets.check_queue(topic, queue_id)
        return core, topic, queue_id

    def max_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        core, topic, queue_id = self._queue(channel, request)
        _, high = core.store.queue_offsets(topic, queue_id)
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(high)})

    def min_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        core, topic, queue_id = self._queue(channel, request)
        low, _ = core.store.queue_offsets(topic, queue_id)
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(low)})

    def search_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        core, topic, queue_id = self._queue(channel, request)
        timestamp = required_int(request.ext_fields, "timestamp")
        offset = core.store.offset_by_timestamp(topic, queue_id, timestamp)
        return request.response(ResponseCode.SUCCESS, ext_fields={"offset": str(offset)})

    def earliest_store_time(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        core, topic, queue_id = self._queue(channel, request)
        low, high = core.store.queue_offsets(topic, queue_id)
        timestamp = -1
        if high > low:
            got = core.store.get_messages(topic, queue_id, low, 1, 0, [])
            if got.messages:
                timestamp = got.messages[0].store_timestamp_ms
        return request.response(ResponseCode.SUCCESS, ext_fields={"timestamp": str(timestamp)})

    # -- locks ---------------------------------------------------------------------------------------
    def lock(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        body = _lock_body(request)
        held = self._context.clients.lock(body.consumer_group, body.client_id, body.mq_set)
        return request.response(ResponseCode.SUCCESS, body=encode_lock_batch_response(held))

    def unlock(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        body = _lock_body(request)
        self._context.clients.unlock(body.consumer_group, body.client_id, body.mq_set)
        return request.response(ResponseCode.SUCCESS)

    # -- CHECK_CLIENT_CONFIG 46 ------------------------------------------------------------------------
    def check_client_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        data = json_body(request)
        sub = data.get("subscriptionData") or {}
        if not isinstance(sub, dict):
            raise RemotingError(ResponseCode.SYSTEM_ERROR, "the body's subscriptionData is not an object")
        kind = str(sub.get("expressionType") or "TAG").upper()
        expression = str(sub.get("subString") or "*")
        try:
            parse_filter(FilterType.SQL if kind == "SQL92" else FilterType.TAG, expression)
        except BrokerError as exc:
            return request.response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, exc.message)
        return request.response(ResponseCode.SUCCESS)


def _lock_body(request: RemotingCommand) -> LockBatchRequest:
    try:
        body = parse_lock_batch_request(request.body or b"{}")
    except ValueError as exc:
        raise RemotingError(ResponseCode.SYSTEM_ERROR, f"the body is not the JSON of a lock request: {exc}") from None
    if not body.consumer_group or not body.client_id:
        raise RemotingError(ResponseCode.SYSTEM_ERROR, "the lock body needs consumerGroup and clientId")
    return body
