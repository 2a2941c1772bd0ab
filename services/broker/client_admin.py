"""The connected clients, for operators: who is connected (mqadmin consumerConnection /
producerConnection), a client's thread stacks, and a stored message verified by a consumer
(mqadmin consumeMessage). Served by the Admin RPCs ListClients, PrintClientStack and
VerifyMessage (`pyrmq client list|stack`, `pyrmq message verify`).

Each broker knows only the clients whose Telemetry stream it serves (``ClientRegistry``): with
several brokers, ask each one. Stack and verify write a command with a nonce down the client's
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
from services.broker.errors import BrokerError, Code, NotFoundError, RequestError
from services.broker.model import ClientType
from services.broker.telemetry import ClientAnswer, ClientRegistry, ClientSession, PendingAnswers
from services.domain.names import DLQ_TOPIC_PREFIX, RETRY_TOPIC_PREFIX
from services.store.client.model import StoredMessage

ANSWER_WAIT_S_MAX = 60.0  # an operator's wait for a client's answer holds a gRPC worker
NOBODY = "each broker knows only its own clients: is it connected to another broker?"


@dataclass(frozen=True, slots=True)
class ClientView:
    """One connected client, as `pyrmq client list` shows it."""

    client_id: str
    client_type: str  # ClientType name: PRODUCER, PUSH_CONSUMER, SIMPLE_CONSUMER, ...
    group: str  # the consumer group; "" for producers
    topics: tuple[str, ...]  # producers: the topics they publish; consumers: subscribed topics
    expressions: tuple[str, ...]  # consumers: each subscription's filter expression
    language: str
    version: str
    address: str
    connected_ms: int
    last_heartbeat_ms: int


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
        self, registry: ClientRegistry, answers: PendingAnswers, messages: MessageFinder, commands: ClientCommands
    ) -> None:
        self._registry = registry
        self._answers = answers
        self._messages = messages
        self._commands = commands

    def list_clients(self, group: str = "") -> list[ClientView]:
        """Every client with a live stream (only ``group``'s consumers if given), by type, then
        group, then client id."""
        sessions = [s for s in self._registry.sessions() if not group or s.group == group]
        return sorted((_view(s) for s in sessions), key=lambda v: (v.client_type, v.group, v.client_id))

    def print_stack(self, client_id: str, timeout_s: float) -> Answered:
        """PrintThreadStackTraceCommand to ``client_id``; its ThreadStackTrace."""
        if validation.is_blank(client_id):
            raise RequestError("client id cannot be empty")
        session = self._registry.get(client_id)
        if session is None:
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
    )
