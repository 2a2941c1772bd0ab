"""The connected clients, for operators: who is connected (mqadmin consumerConnection /
producerConnection), a client's thread stacks, and a stored message verified by a consumer
(mqadmin consumeMessage). Served by the Admin RPCs ListClients, PrintClientStack and
VerifyMessage (`pyrmq client list|stack`, `pyrmq message verify`).

Each broker knows only the clients connected to it: v2 clients whose Telemetry stream it serves
(``ClientRegistry``, protocol ``grpc``) and remoting clients that heartbeat on its remoting port
(``classic_clients.ClassicClients``, protocol ``remoting``: one entry per consumer group and per
producer group a client heartbeats, as mqadmin consumerConnection / producerConnection list
them, with the language and version of its request headers; ``mq_version_name`` names the
version as RocketMQ does). With several brokers, ask each one. Stack and verify reach v2 clients
only. Stack and verify write a command with a nonce down the client's
stream and wait for the answer of that nonce (``telemetry.PendingAnswers``); a client that does
not answer in time is a DEADLINE_EXCEEDED (``Code.PROXY_TIMEOUT``), never a hang. Which official
clients answer (rocketmq-clients at da8271b5): Java, Go, C#, C++ print their threads; Node.js
answers "mock stack"; the Python client (5.1.2) ignores both commands. Verify: push consumers
of Java, Go, C#, C++ run the message through their listener; other clients answer
NOT_IMPLEMENTED, the Python client nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from services.broker import validation
from services.broker.classic_clients import ClassicClients, ConsumerClient, ProducerClient
from services.broker.errors import BrokerError, Code, NotFoundError, RequestError
from services.broker.model import ClientType
from services.broker.telemetry import ClientAnswer, ClientRegistry, ClientSession, PendingAnswers
from services.domain.names import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX
from services.store.client.model import StoredMessage

ANSWER_WAIT_S_MAX = 60.0  # an operator's wait for a client's answer holds a gRPC worker
NOBODY = "each broker knows only its own clients: is it connected to another broker?"
GRPC = "grpc"  # ClientView.protocol: RocketMQ 5's v2 protocol (metrics' protocol_type values)
REMOTING = "remoting"  # RocketMQ's RemotingCommand protocol, on the remoting port

# ConsumerData.consumeType of a remoting consumer -> the v2 ClientType name it is listed as.
CONSUME_TYPE_CLIENT_TYPES = {
    "CONSUME_PASSIVELY": ClientType.PUSH_CONSUMER.name,  # DefaultMQPushConsumer
    "CONSUME_ACTIVELY": ClientType.PULL_CONSUMER.name,  # DefaultMQPullConsumer, DefaultLitePullConsumer
    "CONSUME_POP": ClientType.PUSH_CONSUMER.name,  # a 5.x push consumer in pop mode
}


def _mq_version_names() -> tuple[str, ...]:
    """RocketMQ's ``MQVersion.Version`` constants in ordinal order: V3_0_0's pre-releases, then a
    SNAPSHOT and a release per version (V3_0_1 .. V3_0_15; V3_1 and V3_2 from patch 0, V3_3 ..
    V3_9 from patch 1; V4_0_0 .. V5_9_9 every patch 0..9), then HIGHER_VERSION. So V4_0_0 is 213,
    V4_9_4 401 and V5_3_3 479, as ``services/domain/remoting/codes.py`` has them."""
    names = ["V3_0_0_SNAPSHOT", "V3_0_0_ALPHA1", *(f"V3_0_0_BETA{i}" for i in range(1, 6))]
    for beta in range(6, 10):
        names += [f"V3_0_0_BETA{beta}_SNAPSHOT", f"V3_0_0_BETA{beta}"]
    names.append("V3_0_0_FINAL")
    releases = [(3, 0, patch) for patch in range(1, 16)]
    releases += [(3, minor, patch) for minor in range(1, 10) for patch in range(0 if minor < 3 else 1, 10)]
    releases += [(major, minor, patch) for major in (4, 5) for minor in range(10) for patch in range(10)]
    for major, minor, patch in releases:
        names += [f"V{major}_{minor}_{patch}_SNAPSHOT", f"V{major}_{minor}_{patch}"]
    return (*names, "HIGHER_VERSION")


MQ_VERSION_NAMES = _mq_version_names()
# The ordinals this module names must be the ones the protocol code uses.
assert MQ_VERSION_NAMES[401] == "V4_9_4" and MQ_VERSION_NAMES[479] == "V5_3_3" and MQ_VERSION_NAMES[399] == "V4_9_3"


def mq_version_name(version: int) -> str:
    """A remoting header's ``version`` (an ``MQVersion.Version`` ordinal) as RocketMQ names it
    (``MQVersion.getVersionDesc``: 401 -> V4_9_4; past the last, HIGHER_VERSION); a negative
    one as its number."""
    if version < 0:
        return str(version)
    return MQ_VERSION_NAMES[min(version, len(MQ_VERSION_NAMES) - 1)]


@dataclass(frozen=True, slots=True)
class ClientView:
    """One connected client, as `pyrmq client list` shows it."""

    client_id: str
    client_type: str  # ClientType name: PRODUCER, PUSH_CONSUMER, SIMPLE_CONSUMER, ...
    group: str  # the consumer group; a remoting producer's producer group; "" for v2 producers
    topics: tuple[str, ...]  # v2 producers: the topics they publish; consumers: subscribed topics
    expressions: tuple[str, ...]  # consumers: each subscription's filter expression
    language: str
    version: str  # v2: the client's own (5.1.2); remoting: RocketMQ's version name (V4_9_4)
    address: str
    connected_ms: int  # 0 for remoting clients (only their heartbeats are known)
    last_heartbeat_ms: int
    protocol: str = GRPC  # GRPC or REMOTING
    message_model: str = ""  # consumers: CLUSTERING or BROADCASTING (v2 consumers: CLUSTERING)


@dataclass(frozen=True, slots=True)
class Answered:
    client_id: str
    answer: ClientAnswer


class MessageFinder(Protocol):
    def query_by_id(self, message_id: str, topic: str = "", max_num: int = 0) -> list[StoredMessage]: ...


class ClientCommands(Protocol):
    """The v2 commands (built by the gRPC layer)."""

    def stack_command(self, nonce: str) -> Any: ...
    def verify_command(self, nonce: str, message: StoredMessage) -> Any: ...


class ClientAdmin:
    def __init__(
        self,
        registry: ClientRegistry,
        answers: PendingAnswers,
        messages: MessageFinder,
        commands: ClientCommands,
        classic: ClassicClients | None = None,
    ) -> None:
        self._registry = registry
        self._answers = answers
        self._messages = messages
        self._commands = commands
        self._classic = classic  # the remoting door's clients (None: a broker without that door)

    def list_clients(self, group: str = "") -> list[ClientView]:
        """Every v2 client with a live stream and every remoting client heartbeating here (only
        ``group``'s if given: its consumers, or a remoting producer group's producers), by type,
        then group, then client id, then protocol."""
        views = [_view(s) for s in self._registry.sessions() if not group or s.group == group]
        if self._classic is not None:
            views += [
                _classic_view(consumer) for consumer in self._classic.all_consumers() if group in ("", consumer.group)
            ]
            views += [_classic_view(producer) for producer in self._classic.producers(group or None)]
        return sorted(views, key=lambda v: (v.client_type, v.group, v.client_id, v.protocol))

    def print_stack(self, client_id: str, timeout_s: float) -> Answered:
        """PrintThreadStackTraceCommand to ``client_id``; its ThreadStackTrace."""
        if validation.is_blank(client_id):
            raise RequestError("client id cannot be empty")
        session = self._registry.get(client_id)
        if session is None:
            if self._classic is not None and self._classic.find_channel(client_id) is not None:
                raise NotFoundError(f"client {client_id} is a remoting client: stack and verify reach v2 clients only")
            raise NotFoundError(f"no client {client_id} is connected to this broker ({NOBODY})")
        return self._ask(session, self._commands.stack_command, "PrintThreadStackTraceCommand", timeout_s)

    def verify_message(
        self, group: str, message_id: str, topic: str, client_id: str, timeout_s: float
    ) -> tuple[Answered, StoredMessage]:
        """VerifyMessageCommand with the stored message ``message_id`` to a consumer of ``group``
        (``client_id`` if given, else a push consumer, else any); the client's answer."""
        if validation.is_blank(group):
            raise RequestError("consumer group cannot be empty")
        message = pick_message(self._messages.query_by_id(message_id, topic))
        session = self._consumer_of(group, client_id)
        command = self._commands.verify_command
        return self._ask(session, lambda nonce: command(nonce, message), "VerifyMessageCommand", timeout_s), message

    def _consumer_of(self, group: str, client_id: str) -> ClientSession:
        consumers = [s for s in self._registry.sessions() if s.is_consumer and s.group == group]
        if client_id:
            consumers = [s for s in consumers if s.client_id == client_id]
            if not consumers:
                raise NotFoundError(f"client {client_id} is not a consumer of group {group} on this broker ({NOBODY})")
        if not consumers:
            raise NotFoundError(f"no consumer of group {group} is connected to this broker ({NOBODY})")
        push = [s for s in consumers if s.client_type is ClientType.PUSH_CONSUMER]
        return min(push or consumers, key=lambda s: s.client_id)

    def _ask(self, session: ClientSession, command: Callable[[str], Any], what: str, timeout_s: float) -> Answered:
        if not timeout_s > 0:
            raise RequestError(f"the wait for the client's answer must be more than 0 s, not {timeout_s}")
        timeout_s = min(timeout_s, ANSWER_WAIT_S_MAX)
        answer = self._answers.ask(session, command, timeout_s)
        if answer is None:
            raise BrokerError(
                f"client {session.client_id} ({session.language or 'language unknown'}) did not answer "
                f"{what} within {timeout_s:g} s (not every client implements it)",
                Code.PROXY_TIMEOUT,
            )
        return Answered(session.client_id, answer)


def pick_message(found: list[StoredMessage]) -> StoredMessage:
    """The original of a message id's copies: not a %RETRY% / %DLQ% copy when there is one."""
    originals = [m for m in found if not m.topic.startswith((RETRY_TOPIC_PREFIX, DLQ_TOPIC_PREFIX))]
    return (originals or found)[0]


def _view(session: ClientSession) -> ClientView:
    if session.is_consumer:
        topics = tuple(topic for topic, _ in session.subscriptions)
        expressions = tuple(expression for _, expression in session.subscriptions)
    else:
        topics, expressions = tuple(sorted(session.producer_topics)), ()
    return ClientView(
        client_id=session.client_id,
        client_type=session.client_type.name,
        group=session.group or "",
        topics=topics,
        expressions=expressions,
        language=session.language,
        version=session.version,
        address=session.facts.address,
        connected_ms=session.opened_ms,
        last_heartbeat_ms=session.last_seen_ms,
        message_model="CLUSTERING" if session.is_consumer else "",
    )


def _classic_view(client: ConsumerClient | ProducerClient) -> ClientView:
    """A remoting client of one consumer or producer group (``ClassicClients``)."""
    if isinstance(client, ConsumerClient):
        subscriptions = sorted(client.subscriptions.values(), key=lambda sub: sub.topic)
        client_type = CONSUME_TYPE_CLIENT_TYPES.get(client.consume_type, ClientType.PUSH_CONSUMER.name)
        topics, expressions = tuple(s.topic for s in subscriptions), tuple(s.expression for s in subscriptions)
        message_model = client.message_model
    else:
        client_type, topics, expressions, message_model = ClientType.PRODUCER.name, (), (), ""
    return ClientView(
        client_id=client.client_id,
        client_type=client_type,
        group=client.group,
        topics=topics,
        expressions=expressions,
        language=client.language,
        version=mq_version_name(client.version),
        address=client.address,
        connected_ms=0,
        last_heartbeat_ms=client.last_heartbeat_ms,
        protocol=REMOTING,
        message_model=message_model,
    )
