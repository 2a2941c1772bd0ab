"""Client sessions and the settings handshake (Telemetry, Heartbeat, NotifyClientTermination).

Settings (docs/v2-clients.md, section 4). Each client opens one Telemetry stream per broker
endpoint and writes its ``Settings``; the server answers every settings command, on the same
stream, with ``status OK`` and the client's settings merged with the server's decisions, and
keeps the stream open: a client ignores an answer without status OK, refuses every send without
``max_body_size``, and Node waits forever for the first answer and reconnects every second when
a stream ends (pitfalls 2-4 there). ``settings_for`` makes those decisions; ``v2/convert.py``
merges them into the client's message. Values are the proxy's defaults:

* producer: ``publishing.max_body_size`` = body limit (4 MiB), ``validate_message_type``,
  ``backoff_policy`` = max 3 attempts, exponential 10 ms .. 1 s x2 (Node crashes without it);
* consumer: ``receive_batch_size`` 32, ``long_polling_timeout`` 20 s, ``fifo`` from the
  group's ``consume_message_orderly``, ``backoff_policy`` = ``retry_max_times + 1`` attempts
  with the group's retry policy (``GroupRetryPolicy.backoff``: its customized delays or its
  exponential parameters); a group with RocketMQ's default policy (or none stored yet) gets
  ``BrokerConfig.consumer_retry_delays_ms`` (by default the same 1 s .. 2 h delays).

Sessions. ``ClientRegistry`` keeps one ``ClientSession`` per client id with a live stream:
its type, the topics it publishes (producer group = topic, as in the proxy), its consumer
group and subscriptions, who it says it is (language and version: the x-mq-language /
x-mq-client-version headers of its Telemetry call, else its Settings' UserAgent), the address
it connects from, and ``push`` to write a server command (RecoverOrphanedTransactionCommand,
...) onto its stream. A session ends with its stream; a newer stream of the same client
replaces it. Each broker knows only the clients connected to it (`pyrmq client list`).

Answers. PrintThreadStackTraceCommand and VerifyMessageCommand carry a nonce; the client
answers on its stream with a ThreadStackTrace / VerifyMessageResult of that nonce (the proxy's
``GrpcChannelManager.addResponseFuture``). ``PendingAnswers.ask`` writes the command and waits
for the answer of its nonce; the stream's reader hands answers in through ``answered``.

Termination. NotifyClientTermination calls ``on_terminate`` (the ``renewal.ReceiptRenewer``:
the client's in-flight push-consumer messages are released within about a second); a client
whose stream ended and did not come back is released by the renewer's own scan.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from services.broker.config import BrokerConfig
from services.broker.errors import Code, RequestError
from services.broker.model import ClientType
from services.domain.group_attributes import lite_client_quota
from services.domain.lite import LITE_TOPIC_SIZE_MAX_BYTES
from services.domain.retry_policy import ExponentialRetryPolicy
from services.runtime.clock import Clock
from services.store.client.model import GroupInfo

LITE_CLIENT_TYPES = frozenset({ClientType.LITE_PUSH_CONSUMER, ClientType.LITE_SIMPLE_CONSUMER})


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """What a client's Settings command says about itself."""

    client_type: ClientType
    publishing_topics: tuple[str, ...] | None = None  # None: no publishing block
    subscription_group: str | None = None  # None: no subscription block
    subscriptions: tuple[tuple[str, str], ...] = ()  # (topic, filter expression)
    language: str = ""  # the UserAgent's Language name (JAVA, PYTHON, ...); "" if unset
    version: str = ""  # the UserAgent's client version


@dataclass(frozen=True, slots=True)
class ClientFacts:
    """What a Telemetry call's headers and connection say about its client."""

    language: str = ""  # x-mq-language
    version: str = ""  # x-mq-client-version
    address: str = ""  # host:port of the client (through the front: the client's own)


@dataclass(frozen=True, slots=True)
class RetryPolicySettings:
    max_attempts: int
    exponential: tuple[int, int, float] | None = None  # (initial ms, max ms, multiplier)
    customized_ms: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The server's part of a settings reply."""

    backoff: RetryPolicySettings
    max_body_size: int | None = None  # publishing only
    validate_message_type: bool | None = None
    fifo: bool | None = None  # subscription only
    receive_batch_size: int | None = None
    long_polling_timeout_ms: int | None = None
    lite_subscription_quota: int | None = None  # lite consumers only
    max_lite_topic_size: int | None = None


class GroupSource(Protocol):
    def get_group(self, name: str) -> GroupInfo | None: ...


@dataclass(eq=False)
class ClientSession:
    """One client's live Telemetry stream."""

    client_id: str
    push: Callable[[Any], bool]  # enqueue a server command; False if the stream is gone
    opened_ms: int
    client_type: ClientType = ClientType.CLIENT_TYPE_UNSPECIFIED
    producer_topics: frozenset[str] = field(default_factory=frozenset)
    group: str | None = None
    last_seen_ms: int = 0  # the last Settings or Heartbeat
    facts: ClientFacts = ClientFacts()
    subscriptions: tuple[tuple[str, str], ...] = ()
    language: str = ""  # the headers' claim, else the UserAgent's
    version: str = ""

    @property
    def is_consumer(self) -> bool:
        return self.client_type not in (ClientType.PRODUCER, ClientType.CLIENT_TYPE_UNSPECIFIED)


class ClientRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, ClientSession] = {}
        self._turn = 0  # rotates transaction checks over a group's producers

    def register(self, session: ClientSession) -> ClientSession | None:
        """Make ``session`` the client's live one; the one it replaces, if any."""
        with self._lock:
            previous = self._sessions.get(session.client_id)
            self._sessions[session.client_id] = session
        return previous if previous is not session else None

    def unregister(self, session: ClientSession) -> None:
        """Forget ``session`` (its stream ended) unless a newer stream replaced it."""
        with self._lock:
            if self._sessions.get(session.client_id) is session:
                del self._sessions[session.client_id]

    def get(self, client_id: str) -> ClientSession | None:
        with self._lock:
            return self._sessions.get(client_id)

    def sessions(self) -> list[ClientSession]:
        with self._lock:
            return list(self._sessions.values())

    def producers_of(self, topic: str) -> list[ClientSession]:
        """Live producers that publish ``topic``: where transaction checks for it can go."""
        with self._lock:
            return [
                s
                for s in self._sessions.values()
                if s.client_type is ClientType.PRODUCER and topic in s.producer_topics
            ]

    def push_to_producer(self, group: str, command: Any) -> str | None:
        """Write ``command`` on the stream of one live producer of ``group`` (v2 producers'
        group is the topic they publish); the producers take turns. The client id of the
        producer it went to, or None if none is connected (or every stream just ended)."""
        producers = self.producers_of(group)
        if not producers:
            return None
        with self._lock:
            self._turn += 1
            start = self._turn % len(producers)
        for session in producers[start:] + producers[:start]:
            if session.push(command):
                return session.client_id
        return None

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)


@dataclass(frozen=True, slots=True)
class ClientAnswer:
    """A client's answer to a command with a nonce: its status and, for a stack trace, the text."""

    code: int  # the answer's v2 Code (OK, NOT_IMPLEMENTED, FAILED_TO_CONSUME_MESSAGE ...)
    message: str = ""
    text: str = ""  # ThreadStackTrace.thread_stack_trace


class _Waiter:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: ClientAnswer | None = None


class PendingAnswers:
    """Commands written to a client's stream that wait for the answer of their nonce."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, _Waiter] = {}

    def ask(self, session: ClientSession, command: Callable[[str], Any], timeout_s: float) -> ClientAnswer | None:
        """Write ``command(nonce)`` on the session's stream and wait up to ``timeout_s`` for the
        answer; None if none came (or the stream ended before the command went out)."""
        nonce = uuid.uuid4().hex
        waiter = _Waiter()
        with self._lock:
            self._waiting[nonce] = waiter
        try:
            if not session.push(command(nonce)):
                return None
            waiter.done.wait(timeout_s)
            return waiter.answer
        finally:
            with self._lock:
                self._waiting.pop(nonce, None)

    def answer(self, nonce: str, answer: ClientAnswer) -> bool:
        with self._lock:
            waiter = self._waiting.get(nonce)
        if waiter is None:
            return False  # late (the asker gave up), repeated, or never asked
        waiter.answer = answer
        waiter.done.set()
        return True

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)


def consumer_backoff(group: GroupInfo, default_delays_ms: tuple[int, ...]) -> RetryPolicySettings:
    """A consumer's ``backoff_policy`` (GrpcClientSettingsManager.mergeSubscriptionData)."""
    attempts = group.retry_max_times + 1
    if group.retry_policy.is_default:
        return RetryPolicySettings(max_attempts=attempts, customized_ms=default_delays_ms)
    backoff = group.retry_policy.backoff()
    if isinstance(backoff, ExponentialRetryPolicy):
        return RetryPolicySettings(
            max_attempts=attempts, exponential=(backoff.initial_ms, backoff.max_ms, float(backoff.multiplier))
        )
    return RetryPolicySettings(max_attempts=attempts, customized_ms=backoff.next_ms)


class TelemetryService:
    def __init__(
        self,
        config: BrokerConfig,
        groups: GroupSource,
        registry: ClientRegistry,
        clock: Clock,
        on_terminate: Callable[[str], None] | None = None,
    ) -> None:
        self._config = config
        self._on_terminate = on_terminate
        self._groups = groups
        self.registry = registry
        self._clock = clock
        self.answers = PendingAnswers()

    def settings_for(self, settings: ClientSettings) -> ServerSettings:
        """The server's decisions for a settings command (may read the group from the store)."""
        config = self._config
        if settings.publishing_topics is not None:
            return ServerSettings(
                backoff=RetryPolicySettings(
                    max_attempts=config.producer_max_attempts,
                    exponential=(
                        config.producer_backoff_initial_ms,
                        config.producer_backoff_max_ms,
                        config.producer_backoff_multiplier,
                    ),
                ),
                max_body_size=config.body_size_max_bytes,
                validate_message_type=config.validate_message_type,
            )
        if settings.subscription_group is not None:
            group = self._groups.get_group(settings.subscription_group) if settings.subscription_group else None
            if group is None:
                group = GroupInfo(name=settings.subscription_group)
            lite = settings.client_type in LITE_CLIENT_TYPES
            return ServerSettings(
                backoff=consumer_backoff(group, config.consumer_retry_delays_ms),
                fifo=group.consume_message_orderly,
                receive_batch_size=config.consumer_receive_batch_size,
                long_polling_timeout_ms=config.consumer_long_polling_timeout_ms,
                lite_subscription_quota=(
                    lite_client_quota(group.attributes, config.lite_subscription_quota) if lite else None
                ),
                max_lite_topic_size=LITE_TOPIC_SIZE_MAX_BYTES if lite else None,
            )
        raise RequestError("settings must carry publishing or subscription", Code.BAD_REQUEST)

    def open_session(
        self, client_id: str, push: Callable[[Any], bool], facts: ClientFacts = ClientFacts()
    ) -> ClientSession:
        now_ms = self._clock.now_ms()
        return ClientSession(
            client_id=client_id,
            push=push,
            opened_ms=now_ms,
            last_seen_ms=now_ms,
            facts=facts,
            language=facts.language.upper(),
            version=facts.version,
        )

    def apply_settings(self, session: ClientSession, settings: ClientSettings) -> None:
        """Record what the client said and make its session the live one. The headers' language
        and version win over the UserAgent's, as the proxy's ClientActivity reads the headers."""
        session.client_type = settings.client_type
        session.producer_topics = frozenset(settings.publishing_topics or ())
        session.group = settings.subscription_group
        session.subscriptions = settings.subscriptions
        session.language = session.facts.language.upper() or settings.language
        session.version = session.facts.version or settings.version
        session.last_seen_ms = self._clock.now_ms()
        self.registry.register(session)

    def close_session(self, session: ClientSession) -> None:
        self.registry.unregister(session)

    def heartbeat(self, client_id: str) -> bool:
        """Mark the client alive; False if it has no session (it never sent Settings)."""
        session = self.registry.get(client_id)
        if session is not None:
            session.last_seen_ms = self._clock.now_ms()
        return session is not None

    def answered(self, nonce: str, answer: ClientAnswer) -> bool:
        """A ThreadStackTrace / VerifyMessageResult came in; False if nobody waits for it."""
        return self.answers.answer(nonce, answer)

    def terminate(self, client_id: str) -> None:
        """NotifyClientTermination: release the client's in-flight messages (``on_terminate``);
        always succeeds. The client closes its stream right after, which ends the session."""
        if self._on_terminate is not None and client_id:
            self._on_terminate(client_id)
