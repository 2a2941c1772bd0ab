"""Operator codes about connected clients (../shared/docs/remoting.md §2.3 "Broker→client
queries", §3), registered by ``admin.Admin``: who is connected, and the two requests an operator
has relayed to a consumer over its own connection.

| code | answer |
|---|---|
| GET_CONSUMER_CONNECTION_LIST 203 | ConsumerConnection: the group's remoting consumers (heartbeats, ``ClassicClients``) and v2 consumers (Telemetry sessions): ``connectionSet`` [{clientId, clientAddr, language, version}], ``subscriptionTable`` {topic: SubscriptionData}, and the group's consumeType, messageModel, consumeFromWhere (a remoting consumer's heartbeat, else a v2 session's: CLUSTERING, CONSUME_FROM_LAST_OFFSET); CONSUMER_NOT_ONLINE 206 "the consumer group[G] not online" |
| GET_PRODUCER_CONNECTION_LIST 204 | ProducerConnection ``{connectionSet}``: the group's remoting producers and the v2 producers publishing a topic of that name (the proxy's producer group of a v2 producer is its topic); SYSTEM_ERROR "the producer group[G] not exist" |
| GET_ALL_PRODUCER_INFO 328 | ProducerTableInfo ``{data:{group:[{clientId, remoteIP, language, version, lastUpdateTimestamp}]}}``, the same producers |
| GET_CONSUMER_RUNNING_INFO 307 | relayed to the remoting consumer ``clientId`` of ``consumerGroup`` (the request's header and body), its answer relayed back (ConsumerRunningInfo JSON); waits 5 s |
| CONSUME_MESSAGE_DIRECTLY 309 | relayed likewise with ``brokerName`` added and the record the header's offsetMsgId names as the body; waits 10 s (``Broker2Client.callClient``) |

A consumer not heartbeating on this door is SYSTEM_ERROR "The Consumer <G> <id> not online" (v2
consumers are not reached: `pyrmq client stack` / `pyrmq message verify` ask them); no answer in
time is CONSUME_MSG_TIMEOUT 207 "consumer <G> <id> Timeout: ...", a closed connection
SYSTEM_ERROR "invoke consumer <G> <id> Exception: ...", as RocketMQ's ``callConsumer`` words them.

A v2 client's version is RocketMQ's ``MQVersion`` ordinal of its version when it names one
(``V5_0_7``), else this broker's (the proxy's ``parseClientVersion``); its language is a
``LanguageCode`` name (GOLANG is GO, others OTHER).
"""

from __future__ import annotations

import re
from concurrent.futures import Future
from typing import Any

from services.broker.classic_clients import ConsumerClient, Subscription
from services.broker.model import ClientType
from services.broker.remoting.context import RemotingContext
from services.broker.remoting.dispatch import Dispatcher, RemotingError, required
from services.broker.remoting.queries import group_cores, raw_record
from services.broker.remoting.server import Channel
from services.broker.telemetry import ClientSession
from services.domain.remoting.codes import SERVER_VERSION, LanguageCode, RequestCode, ResponseCode
from services.domain.remoting.command import RemotingCommand
from services.domain.remoting.fastjson_codec import fastjson_dumpb
from services.domain.remoting.message_id import decode_offset_msg_id
from services.domain.remoting.tags import TagExpressionError, parse_tag_expression

RUNNING_INFO_WAIT_S = 5.0
CONSUME_DIRECTLY_WAIT_S = 10.0  # Broker2Client.callClient
V5_0_0 = 413  # MQVersion.Version.V5_0_0.ordinal(); V5_x_y = V5_0_0 + 2 * (10x + y) up to V5_9_9
_V5_NAME = re.compile(r"V5_(\d)_(\d)")
_LANGUAGE_ALIASES = {"GOLANG": "GO", "NODEJS": "NODE_JS", "CSHARP": "DOTNET", "C#": "DOTNET", "C++": "CPP"}
_PUSH_TYPES = frozenset({ClientType.PUSH_CONSUMER, ClientType.LITE_PUSH_CONSUMER})


class Connections:
    def __init__(self, context: RemotingContext) -> None:
        self._context = context

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(RequestCode.GET_CONSUMER_CONNECTION_LIST, self.consumer_connections, inline=True)
        dispatcher.register(RequestCode.GET_PRODUCER_CONNECTION_LIST, self.producer_connections, inline=True)
        dispatcher.register(RequestCode.GET_ALL_PRODUCER_INFO, self.all_producers, inline=True)
        dispatcher.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self.running_info)
        dispatcher.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self.consume_directly)

    def _sessions(self) -> list[ClientSession]:
        return self._context.core.telemetry.registry.sessions()

    # -- GET_CONSUMER_CONNECTION_LIST 203 ----------------------------------------------------------
    def consumer_connections(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        group = required(request.ext_fields, "consumerGroup")
        classic = sorted(self._context.clients.consumers(group), key=lambda c: c.client_id)
        sessions = sorted(
            (s for s in self._sessions() if s.is_consumer and s.group == group), key=lambda s: s.client_id
        )
        if not classic and not sessions:
            return request.response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        connections = [_connection(c.client_id, c.address, c.language, c.version) for c in classic]
        connections += [
            _connection(s.client_id, s.facts.address, _language(s.language), _version(s.version)) for s in sessions
        ]
        table: dict[str, dict[str, Any]] = {}
        newest: dict[str, int] = {}
        for consumer in classic:
            for topic, sub in consumer.subscriptions.items():
                if topic not in newest or sub.sub_version > newest[topic]:
                    newest[topic] = sub.sub_version
                    table[topic] = _subscription_data(sub)
        for session in sessions:
            for topic, expression in session.subscriptions:
                table.setdefault(topic, _v2_subscription_data(topic, expression, session.opened_ms))
        if classic:
            first: ConsumerClient = classic[0]
            kind, model, where = first.consume_type, first.message_model, first.consume_from_where
        else:
            push = sessions[0].client_type in _PUSH_TYPES
            kind, model, where = (
                ("CONSUME_PASSIVELY" if push else "CONSUME_ACTIVELY"),
                "CLUSTERING",
                "CONSUME_FROM_LAST_OFFSET",
            )
        body = {
            "connectionSet": connections,
            "consumeFromWhere": where,
            "consumeType": kind,
            "messageModel": model,
            "subscriptionTable": table,
        }
        return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb(body))

    # -- GET_PRODUCER_CONNECTION_LIST 204 / GET_ALL_PRODUCER_INFO 328 ------------------------------
    def _producers(self, group: str | None) -> dict[str, list[dict[str, Any]]]:
        """Producer group -> its producers as ProducerInfo fields."""
        found: dict[str, list[dict[str, Any]]] = {}
        for producer in self._context.clients.producers(group):
            found.setdefault(producer.group, []).append(
                _producer_info(
                    producer.client_id,
                    producer.address,
                    producer.language,
                    producer.version,
                    producer.last_heartbeat_ms,
                )
            )
        for session in self._sessions():
            if session.client_type is not ClientType.PRODUCER:
                continue
            for topic in sorted(session.producer_topics):
                if group is None or topic == group:
                    found.setdefault(topic, []).append(
                        _producer_info(
                            session.client_id,
                            session.facts.address,
                            _language(session.language),
                            _version(session.version),
                            session.last_seen_ms,
                        )
                    )
        return found

    def producer_connections(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        group = required(request.ext_fields, "producerGroup")
        producers = self._producers(group).get(group)
        if not producers:
            return request.response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        connections = [
            _connection(p["clientId"], p["remoteIP"], p["language"], p["version"])
            for p in sorted(producers, key=lambda p: str(p["clientId"]))
        ]
        return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb({"connectionSet": connections}))

    def all_producers(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb({"data": self._producers(None)}))

    # -- GET_CONSUMER_RUNNING_INFO 307 / CONSUME_MESSAGE_DIRECTLY 309 ------------------------------
    def running_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        group = required(fields, "consumerGroup")
        client_id = required(fields, "clientId")
        return self._call_consumer(request, group, client_id, dict(fields), request.body, RUNNING_INFO_WAIT_S)

    def consume_directly(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = dict(request.ext_fields)
        group = required(fields, "consumerGroup")
        client_id = fields.get("clientId") or ""
        msg_id = fields.get("msgId") or ""
        body = request.body
        try:
            _, _, phy_offset = decode_offset_msg_id(msg_id)
        except ValueError:
            phy_offset = -1
        scope = self._context.broker_name(channel, request.ext_fields)
        for core in group_cores(self._context, scope) if phy_offset >= 0 else ():
            message = core.store.look_message(phy_offset)
            if message is not None:
                fields["brokerName"] = core.name
                body = raw_record(core.store, message)
                break
        else:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, f"can not find message by the msgId, {msg_id}")
        return self._call_consumer(request, group, client_id, fields, body, CONSUME_DIRECTLY_WAIT_S)

    def _call_consumer(
        self, request: RemotingCommand, group: str, client_id: str, fields: dict[str, str], body: bytes, wait_s: float
    ) -> RemotingCommand:
        consumer = self._context.clients.consumer(group, client_id)
        target = consumer.channel if consumer is not None else None
        if not isinstance(target, Channel) or target.closed:
            return request.response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online")
        future: Future[RemotingCommand] = target.request(RemotingCommand(request.code, ext_fields=fields, body=body))
        try:
            answer = future.result(wait_s)
        except TimeoutError:
            future.cancel()
            return request.response(
                ResponseCode.CONSUME_MSG_TIMEOUT,
                f"consumer <{group}> <{client_id}> Timeout: no answer within {wait_s:g} s",
            )
        except ConnectionError as exc:
            return request.response(
                ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client_id}> Exception: {exc}"
            )
        return request.response(answer.code, answer.remark, dict(answer.ext_fields), answer.body)


def _connection(client_id: str, address: str, language: str, version: int) -> dict[str, Any]:
    return {"clientAddr": address, "clientId": client_id, "language": language or "JAVA", "version": version}


def _producer_info(client_id: str, address: str, language: str, version: int, last_ms: int) -> dict[str, Any]:
    return {
        "clientId": client_id,
        "language": language or "JAVA",
        "lastUpdateTimestamp": last_ms,
        "remoteIP": address,
        "version": version,
    }


def _subscription_data(sub: Subscription) -> dict[str, Any]:
    return {
        "classFilterMode": False,
        "codeSet": sorted(sub.codes),
        "expressionType": sub.expression_type,
        "subString": sub.expression,
        "subVersion": sub.sub_version,
        "tagsSet": sorted(sub.tags),
        "topic": sub.topic,
    }


def _v2_subscription_data(topic: str, expression: str, sub_version: int) -> dict[str, Any]:
    tags: frozenset[str] = frozenset()
    codes: frozenset[int] = frozenset()
    try:
        parsed = parse_tag_expression(expression)
        tags, codes = parsed.tags, parsed.codes
    except TagExpressionError:
        pass  # an SQL92 expression: no tags
    return _subscription_data(Subscription(topic, expression, "TAG", sub_version, tags, codes))


def _language(name: str) -> str:
    """A v2 client's language as a ``LanguageCode`` name."""
    upper = _LANGUAGE_ALIASES.get(name.upper(), name.upper())
    return upper if upper in LanguageCode.__members__ else "OTHER"


def _version(text: str) -> int:
    """A v2 client's version as an ``MQVersion`` ordinal (the proxy's ``parseClientVersion``)."""
    match = _V5_NAME.fullmatch(text.upper())
    if match is None:
        return SERVER_VERSION
    return V5_0_0 + 2 * (10 * int(match.group(1)) + int(match.group(2)))
