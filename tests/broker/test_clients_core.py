"""Connected clients, the core (no servers): what a session records from headers, Settings and
heartbeats; `client list`'s views; stack and verify answered by nonce, or timed out; the
connection gauges."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from services.broker.client_admin import ClientAdmin, pick_message
from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError, Code, NotFoundError, RequestError
from services.broker.metrics import ConnectionsCollector
from services.broker.model import ClientType
from services.broker.telemetry import ClientAnswer, ClientFacts, ClientRegistry, ClientSettings, TelemetryService
from services.store.client.model import StoredMessage

NO_FACTS = ClientFacts()


class Commands:
    def stack_command(self, nonce: str) -> tuple:
        return ("stack", nonce)

    def verify_command(self, nonce: str, message: StoredMessage) -> tuple:
        return ("verify", nonce, message.topic)


class Messages:
    def __init__(self, found: list[StoredMessage]) -> None:
        self.found = found

    def query_by_id(self, message_id: str, topic: str = "", max_num: int = 0) -> list[StoredMessage]:
        found = [m for m in self.found if m.message_id == message_id and (not topic or m.topic == topic)]
        if not found:
            raise NotFoundError(f"no message with id {message_id}", Code.MESSAGE_NOT_FOUND)
        return found


def stored(topic: str, message_id: str = "ID1") -> StoredMessage:
    return StoredMessage(topic, 0, b"body", {"UNIQ_KEY": message_id}, queue_offset=3, phy_offset=100)


class World:
    def __init__(self, store_client, messages: list[StoredMessage] = ()) -> None:
        self.clock = store_client.clock
        self.telemetry = TelemetryService(BrokerConfig(), store_client, ClientRegistry(), store_client.clock)
        self.admin = ClientAdmin(self.telemetry.registry, self.telemetry.answers, Messages(list(messages)), Commands())
        self.pushed: dict[str, list] = {}

    def connect(self, client_id: str, settings: ClientSettings, facts: ClientFacts = NO_FACTS, answer=None):
        """A client whose stream records commands; ``answer(command)`` -> ClientAnswer answers at once."""
        pushed = self.pushed.setdefault(client_id, [])

        def push(command) -> bool:
            pushed.append(command)
            if answer is not None:
                self.telemetry.answered(command[1], answer(command))
            return True

        session = self.telemetry.open_session(client_id, push, facts)
        self.telemetry.apply_settings(session, settings)
        return session


def producer(*topics: str, language: str = "", version: str = "") -> ClientSettings:
    return ClientSettings(ClientType.PRODUCER, publishing_topics=topics, language=language, version=version)


def consumer(kind: ClientType, group: str, *subscriptions: tuple[str, str], language: str = "JAVA") -> ClientSettings:
    return ClientSettings(
        kind, subscription_group=group, subscriptions=subscriptions, language=language, version="5.0.7"
    )


def test_a_session_records_headers_settings_address_and_heartbeats(store_client):
    world = World(store_client)
    opened_ms = world.clock.now_ms()
    world.connect("p1", producer("T2", "T1", language="PYTHON", version="5.1.2"), ClientFacts(address="10.0.0.7:5123"))
    # Headers win over the UserAgent (the proxy's ClientActivity reads x-mq-language).
    world.connect(
        "c1",
        consumer(ClientType.PUSH_CONSUMER, "G", ("T1", "TagA"), ("T2", "*")),
        ClientFacts(language="golang", version="5.1.0", address="[::1]:9"),
    )
    world.clock.advance_ms(4_000)
    assert world.telemetry.heartbeat("c1") and not world.telemetry.heartbeat("nobody")

    views = {v.client_id: v for v in world.admin.list_clients()}
    p1, c1 = views["p1"], views["c1"]
    assert (p1.client_type, p1.group, p1.topics, p1.expressions) == ("PRODUCER", "", ("T1", "T2"), ())
    assert (p1.language, p1.version, p1.address) == ("PYTHON", "5.1.2", "10.0.0.7:5123")
    assert p1.connected_ms == p1.last_heartbeat_ms == opened_ms
    assert (c1.client_type, c1.group, c1.topics, c1.expressions) == ("PUSH_CONSUMER", "G", ("T1", "T2"), ("TagA", "*"))
    assert (c1.language, c1.version, c1.address) == ("GOLANG", "5.1.0", "[::1]:9")
    assert c1.last_heartbeat_ms == opened_ms + 4_000
    assert list(views) == ["p1", "c1"]  # by type name: PRODUCER before PUSH_CONSUMER


def test_list_by_group_and_a_closed_stream_is_gone(store_client):
    world = World(store_client)
    world.connect("p1", producer("T"))
    a = world.connect("a", consumer(ClientType.SIMPLE_CONSUMER, "G1", ("T", "*")))
    world.connect("b", consumer(ClientType.PUSH_CONSUMER, "G2", ("T", "*")))
    assert [v.client_id for v in world.admin.list_clients("G1")] == ["a"]
    assert [v.client_id for v in world.admin.list_clients()] == ["p1", "b", "a"]
    world.telemetry.close_session(a)
    assert world.admin.list_clients("G1") == []


def test_stack_is_the_answer_of_its_nonce(store_client):
    world = World(store_client)
    world.connect("j1", producer("T"), answer=lambda command: ClientAnswer(Code.OK, "OK", f"threads for {command[1]}"))
    answered = world.admin.print_stack("j1", timeout_s=1.0)
    [(kind, nonce)] = world.pushed["j1"]
    assert kind == "stack" and len(nonce) == 32
    assert answered.client_id == "j1" and answered.answer == ClientAnswer(Code.OK, "OK", f"threads for {nonce}")
    assert len(world.telemetry.answers) == 0  # nothing left waiting
    assert not world.telemetry.answered(nonce, ClientAnswer(Code.OK))  # a late, repeated answer: nobody waits


def test_a_client_that_never_answers_times_out(store_client):
    world = World(store_client)
    world.connect("py", producer("T", language="PYTHON"))
    with pytest.raises(BrokerError) as caught:
        world.admin.print_stack("py", timeout_s=0.2)
    assert caught.value.code is Code.PROXY_TIMEOUT
    assert "py (PYTHON) did not answer PrintThreadStackTraceCommand within 0.2 s" in caught.value.message
    assert len(world.pushed["py"]) == 1 and len(world.telemetry.answers) == 0
    with pytest.raises(NotFoundError, match="each broker knows only its own clients"):
        world.admin.print_stack("elsewhere", timeout_s=0.2)
    with pytest.raises(RequestError):
        world.admin.print_stack("py", timeout_s=0)


def test_verify_goes_to_a_push_consumer_of_the_group_with_the_original_message(store_client):
    messages = [stored("%RETRY%G_T"), stored("T"), stored("T", message_id="OTHER")]
    world = World(store_client, messages)
    world.connect("simple", consumer(ClientType.SIMPLE_CONSUMER, "G", ("T", "*")))
    world.connect("push", consumer(ClientType.PUSH_CONSUMER, "G", ("T", "*")), answer=lambda c: ClientAnswer(Code.OK))
    world.connect("other", consumer(ClientType.PUSH_CONSUMER, "H", ("T", "*")))
    answered, message = world.admin.verify_message("G", "ID1", "", "", timeout_s=1.0)
    assert answered.client_id == "push" and answered.answer.code == Code.OK
    assert message.topic == "T" and world.pushed["push"][0][2] == "T"
    assert world.pushed["simple"] == [] and world.pushed["other"] == []

    with pytest.raises(BrokerError) as caught:  # the simple consumer, asked by name, never answers
        world.admin.verify_message("G", "ID1", "T", "simple", timeout_s=0.1)
    assert caught.value.code is Code.PROXY_TIMEOUT
    with pytest.raises(NotFoundError, match="no consumer of group Z"):
        world.admin.verify_message("Z", "ID1", "", "", timeout_s=0.1)
    with pytest.raises(NotFoundError, match="other is not a consumer of group G"):
        world.admin.verify_message("G", "ID1", "", "other", timeout_s=0.1)
    with pytest.raises(NotFoundError, match="no message"):
        world.admin.verify_message("G", "NOPE", "", "", timeout_s=0.1)
    assert pick_message([stored("%DLQ%G")]).topic == "%DLQ%G"  # only a copy: that one


def test_connection_gauges_by_language_and_version(store_client):
    world = World(store_client)
    world.connect("p1", producer("T", language="PYTHON", version="5.1.2"))
    world.connect("p2", producer("T", language="PYTHON", version="5.1.2"))
    world.connect("p3", producer("T"))
    world.connect("c1", consumer(ClientType.PUSH_CONSUMER, "G", ("T", "*")))
    world.connect("c2", consumer(ClientType.SIMPLE_CONSUMER, "G", ("T", "*")))
    registry = CollectorRegistry()
    registry.register(ConnectionsCollector(world.telemetry.registry.sessions))
    text = generate_latest(registry).decode()
    assert 'rocketmq_producer_connections{language="python",protocol_type="grpc",version="5.1.2"} 2.0' in text
    assert 'rocketmq_producer_connections{language="unknown",protocol_type="grpc",version="unknown"} 1.0' in text
    for mode in ("push", "pull"):
        assert (
            f'rocketmq_consumer_connections{{consume_mode="{mode}",consumer_group="G",is_system="false",'
            f'language="java",protocol_type="grpc",version="5.0.7"}} 1.0'
        ) in text
