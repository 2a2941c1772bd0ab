"""Receipt-handle renewal and the release of a departed client's messages (services/broker/renewal.py),
driven through the consumer core on the real store (tests/support/store_double.py) and a manual
clock: ``run_once(now)`` is the renewer's scan, ``file_store.pop.revive.run_once()`` the store's
redelivery."""

from __future__ import annotations

import pytest

from services.broker.config import BrokerConfig
from services.broker.consumer import ArrivalHub, ConsumerLimits, ConsumerService, ReceiveRequest
from services.broker.errors import BrokerError, Code
from services.broker.model import ClientType
from services.broker.renewal import ReceiptHandleTable, ReceiptRenewer
from services.broker.telemetry import ClientRegistry, ClientSession, ClientSettings, TelemetryService
from services.domain.names import dlq_topic
from services.runtime.clock import ManualClock
from services.store.client.model import Delivery, MessageToPut, TopicInfo
from tests.support.store_double import StoreDouble

TOPIC, GROUP, CLIENT = "RenewTopic", "RenewGroup", "push-client-1"
CHANGE = "ChangeInvisibleDuration"
INVISIBLE_MS = 60_000  # auto_renew_invisible_ms
AHEAD_MS = 10_000


class Topics:
    def get(self, name: str) -> TopicInfo:
        return TopicInfo(name, 4, 4, 6, "MIXED")


class World:
    """The consumer core, the renewer and the client registry over one store and clock."""

    def __init__(self, store_client: StoreDouble, clock: ManualClock, **config: object) -> None:
        self.store, self.clock = store_client, clock
        self.config = BrokerConfig(**config)  # type: ignore[arg-type]
        self.registry = ClientRegistry()
        self.renewer = ReceiptRenewer(
            store_client, ReceiptHandleTable(self.config.renew_handles_max), self.registry, self.config, clock
        )
        self.telemetry = TelemetryService(
            self.config, store_client, self.registry, clock, on_terminate=self.renewer.client_terminated
        )
        limits = ConsumerLimits(auto_renew_invisible_ms=self.config.auto_renew_invisible_ms)
        self.consumer = ConsumerService(
            store_client, Topics(), ArrivalHub(), clock, "broker-a", ("127.0.0.1", 8081), limits, self.renewer
        )
        store_client.create_topic(Topics().get(TOPIC))  # topics are made explicitly (no auto-create)

    def connect(self, client_id: str = CLIENT, client_type: ClientType = ClientType.PUSH_CONSUMER) -> ClientSession:
        session = self.telemetry.open_session(client_id, lambda command: True)
        self.telemetry.apply_settings(session, ClientSettings(client_type, subscription_group=GROUP))
        return session

    def send(self, body: bytes, queue_id: int = 0) -> None:
        self.store.append(MessageToPut(TOPIC, queue_id, body, {"UNIQ_KEY": body.decode()}))

    def receive(self, client_id: str = CLIENT, auto_renew: bool = True, **extra: object) -> list[Delivery]:
        request = ReceiveRequest(
            GROUP,
            TOPIC,
            auto_renew=auto_renew,
            client_id=client_id,
            invisible_ms=None if auto_renew else 30_000,
            **extra,  # type: ignore[arg-type]
        )
        messages = self.consumer.receive(request).messages
        assert messages, "a message was stored: the receive must find it without waiting"
        return messages

    def advance_to(self, offset_ms: int, start_ms: int) -> None:
        self.clock.set_ms(start_ms + offset_ms)

    def dispatch(self) -> None:
        """Let the store's reput index what it put itself (retry and DLQ copies)."""
        reput = self.store.file_store.reput
        assert reput is not None
        reput.run_once()

    def changes(self) -> int:
        return len(self.store.requests_of(CHANGE))

    def others_pop(self) -> list[Delivery]:
        """What another consumer of the group would get now (after the store's revive ran)."""
        self.store.file_store.pop.revive.run_once()
        self.dispatch()
        return self.store.pop_messages(GROUP, TOPIC, -1, 32, 30_000, [], False).messages


@pytest.fixture
def world(store_client: StoreDouble, clock: ManualClock) -> World:
    return World(store_client, clock)


def test_renews_ahead_of_expiry_and_the_original_handle_still_acks(world: World, clock: ManualClock) -> None:
    world.connect()
    world.send(b"slow")
    start = clock.now_ms()
    [got] = world.receive()
    original = got.receipt_handle
    assert world.renewer.run_once(start) == 0 and world.changes() == 0  # 60 s left: not due
    world.advance_to(INVISIBLE_MS - AHEAD_MS - 1, start)
    assert world.renewer.run_once() == 0  # just outside the renew-ahead window
    world.advance_to(INVISIBLE_MS - AHEAD_MS + 1, start)
    assert world.renewer.run_once() == 1 and world.changes() == 1
    [renewal] = world.store.requests_of(CHANGE)
    assert renewal.receipt_handle == original and renewal.invisible_duration_ms == 60_000  # the first slice: 1 min
    # Past the original invisible time: not redelivered, and the client's original handle acks.
    world.advance_to(INVISIBLE_MS + 5_000, start)
    assert world.others_pop() == []
    assert world.consumer.ack(GROUP, TOPIC, [original]) == [(Code.OK, "OK")]
    assert len(world.renewer.table) == 0
    # Acked: nothing is renewed any more, nothing comes back.
    world.advance_to(10 * INVISIBLE_MS, start)
    assert world.renewer.run_once() == 0 and world.changes() == 1
    assert world.others_pop() == []
    assert world.renewer.stats().renewals == 1


def test_slices_grow_and_renewal_stops_after_renew_max_ms(store_client: StoreDouble, clock: ManualClock) -> None:
    world = World(store_client, clock, renew_slices_ms=(20_000, 40_000), renew_max_ms=100_000)
    world.connect()
    world.send(b"endless")
    start = clock.now_ms()
    [got] = world.receive()
    expiries = []
    for offset_ms in range(0, 140_000, 1_000):  # the renewer scanning every second for 140 s
        world.advance_to(offset_ms, start)
        world.telemetry.heartbeat(CLIENT)
        world.renewer.run_once()
        entry = world.renewer.table.get(GROUP, got.receipt_handle)
        if entry is not None and (not expiries or entry.expire_ms != expiries[-1]):
            expiries.append(entry.expire_ms)
    slices = [r.invisible_duration_ms for r in world.store.requests_of(CHANGE)]
    # 60 s, then 20 s, then 40 s repeated while under 100 s; then the nack with the retry delay (1 s).
    assert slices == [20_000, 40_000, 40_000, 1_000], slices
    assert [e - start for e in expiries] == [60_000, 70_000, 100_000, 130_000]
    assert len(world.renewer.table) == 0 and world.renewer.stats().renew_max_stops == 1
    world.advance_to(135_000, start)
    [again] = world.others_pop()  # nacked: redelivered (attempt 2) once the retry delay is over
    assert again.properties["UNIQ_KEY"] == "endless" and again.delivery_attempt == 2


def test_dead_letter_with_the_original_handle_after_renewal(world: World, clock: ManualClock) -> None:
    world.connect()
    world.send(b"poison")
    start = clock.now_ms()
    [got] = world.receive()
    world.advance_to(INVISIBLE_MS - 1_000, start)
    world.renewer.run_once()
    world.consumer.forward_to_dead_letter_queue(GROUP, TOPIC, got.receipt_handle)
    assert len(world.renewer.table) == 0
    world.dispatch()
    assert [m.body for m in world.store.messages(dlq_topic(GROUP))] == [b"poison"]
    world.advance_to(5 * INVISIBLE_MS, start)
    assert world.renewer.run_once() == 0 and world.others_pop() == []


def test_client_change_of_invisible_time_ends_renewal(world: World, clock: ManualClock) -> None:
    world.connect()
    world.send(b"nacked")
    start = clock.now_ms()
    [got] = world.receive()
    world.advance_to(INVISIBLE_MS - 1_000, start)
    world.renewer.run_once()  # renewed: the store no longer knows the client's handle
    new_handle = world.consumer.change_invisible_duration(GROUP, TOPIC, got.receipt_handle, 5_000)
    assert new_handle and len(world.renewer.table) == 0
    world.advance_to(INVISIBLE_MS + 10_000, start)
    assert world.renewer.run_once() == 0
    [again] = world.others_pop()  # the client's nack holds: back after its 5 s
    assert again.properties["UNIQ_KEY"] == "nacked" and again.delivery_attempt == 2


def test_only_push_consumers_are_tracked(world: World) -> None:
    world.connect("simple-1", ClientType.SIMPLE_CONSUMER)
    world.connect("push-2", ClientType.PUSH_CONSUMER)
    for body in (b"a", b"b", b"c"):
        world.send(body)
    world.receive("simple-1", auto_renew=False, batch_size=1)  # a simple consumer: not renewed
    world.receive("push-2", auto_renew=False, batch_size=1)  # its Settings said PUSH_CONSUMER
    world.receive("unknown", auto_renew=True, batch_size=1)  # the request asks for it
    assert sorted(e.client_id for e in world.renewer.table.entries()) == ["push-2", "unknown"]


def test_termination_releases_in_flight_messages_within_a_second(world: World, clock: ManualClock) -> None:
    world.connect()
    world.send(b"m1")
    world.send(b"m2", queue_id=1)
    start = clock.now_ms()
    got = world.receive()
    assert len(got) == 2 and len(world.renewer.table) == 2
    world.telemetry.terminate(CLIENT)  # NotifyClientTermination
    assert world.renewer.run_once() == 2
    assert [r.invisible_duration_ms for r in world.store.requests_of(CHANGE)] == [1_000, 1_000]
    assert len(world.renewer.table) == 0 and world.renewer.stats().released == 2
    world.advance_to(1_000, start)
    again = world.others_pop()
    assert sorted(m.properties["UNIQ_KEY"] for m in again) == ["m1", "m2"]
    assert all(m.delivery_attempt == 2 for m in again)
    # The departed client's handle is dead now.
    assert world.consumer.ack(GROUP, TOPIC, [got[0].receipt_handle])[0][0] is Code.INVALID_RECEIPT_HANDLE


def test_a_client_whose_stream_ended_is_released_after_the_grace(world: World, clock: ManualClock) -> None:
    session = world.connect()
    world.send(b"orphan")
    start = clock.now_ms()
    world.receive()
    world.telemetry.close_session(session)  # the Telemetry stream ended
    world.renewer.run_once()
    world.advance_to(world.config.client_gone_grace_ms - 1, start)
    assert world.renewer.run_once() == 0 and len(world.renewer.table) == 1  # it may still reconnect
    world.advance_to(world.config.client_gone_grace_ms, start)
    assert world.renewer.run_once() == 1 and len(world.renewer.table) == 0
    world.advance_to(world.config.client_gone_grace_ms + 1_000, start)
    assert [m.properties["UNIQ_KEY"] for m in world.others_pop()] == ["orphan"]


def test_a_reconnecting_client_keeps_its_messages(world: World, clock: ManualClock) -> None:
    session = world.connect()
    world.send(b"kept")
    start = clock.now_ms()
    [got] = world.receive()
    world.telemetry.close_session(session)
    world.advance_to(world.config.client_gone_grace_ms // 2, start)
    world.renewer.run_once()
    world.connect()  # a new stream, the same client id
    world.advance_to(INVISIBLE_MS - 1_000, start)
    assert world.renewer.run_once() == 1 and world.renewer.stats().released == 0
    assert world.consumer.ack(GROUP, TOPIC, [got.receipt_handle]) == [(Code.OK, "OK")]


def test_a_silent_client_is_released(world: World, clock: ManualClock) -> None:
    world.connect()
    world.send(b"quiet")
    start = clock.now_ms()
    world.receive()
    for offset_ms in range(0, world.config.client_silent_max_ms, 5_000):  # renewed while it may be alive
        world.advance_to(offset_ms, start)
        world.renewer.run_once()
    assert len(world.renewer.table) == 1
    world.advance_to(world.config.client_silent_max_ms, start)  # no heartbeat for 120 s
    world.renewer.run_once()
    assert len(world.renewer.table) == 0 and world.renewer.stats().released == 1


def test_renewal_keeps_a_fifo_group_blocked(world: World, clock: ManualClock) -> None:
    world.store.update_group(GROUP, fifo=True, retry_max_times=16)
    world.connect()
    world.send(b"first")
    world.send(b"second")
    start = clock.now_ms()
    [first] = world.receive(batch_size=1, fifo=True)
    assert first.properties["UNIQ_KEY"] == "first"
    for offset_ms in range(0, 3 * INVISIBLE_MS, 5_000):
        world.advance_to(offset_ms, start)
        world.telemetry.heartbeat(CLIENT)
        world.renewer.run_once()
        world.store.file_store.pop.revive.run_once()
        assert world.store.pop_messages(GROUP, TOPIC, -1, 32, 30_000, [], True).messages == []
    assert world.consumer.ack(GROUP, TOPIC, [first.receipt_handle]) == [(Code.OK, "OK")]
    [second] = world.store.pop_messages(GROUP, TOPIC, -1, 32, 30_000, [], True).messages
    assert second.properties["UNIQ_KEY"] == "second" and second.delivery_attempt == 1


def test_an_unreachable_store_is_retried_then_given_up(world: World, clock: ManualClock) -> None:
    world.connect()
    world.send(b"x")
    start = clock.now_ms()
    [got] = world.receive()
    world.store.down = True
    world.advance_to(INVISIBLE_MS - 2_000, start)
    world.renewer.run_once()
    assert len(world.renewer.table) == 1  # one failure: tried again next scan
    # An ack that cannot reach the store keeps the message tracked: the client retries it.
    assert world.consumer.ack(GROUP, TOPIC, [got.receipt_handle])[0][0] is not Code.OK
    assert len(world.renewer.table) == 1
    world.store.down = False
    world.renewer.run_once()
    assert world.consumer.ack(GROUP, TOPIC, [got.receipt_handle]) == [(Code.OK, "OK")]
    world.send(b"y")
    [other] = world.receive()
    world.store.down = True
    world.advance_to(2 * INVISIBLE_MS - 1_000, start)
    for _ in range(world.config.renew_retry_max):
        world.renewer.run_once()
    assert world.renewer.table.get(GROUP, other.receipt_handle) is None and world.renewer.stats().dropped == 1


def test_an_expired_handle_is_forgotten(world: World, clock: ManualClock) -> None:
    world.connect()
    world.send(b"late")
    start = clock.now_ms()
    [got] = world.receive()
    world.advance_to(INVISIBLE_MS + 1, start)  # the renewer never came round in time
    world.renewer.run_once()
    assert len(world.renewer.table) == 0 and world.renewer.stats().dropped == 1
    with pytest.raises(BrokerError) as err:
        world.consumer.change_invisible_duration(GROUP, TOPIC, got.receipt_handle, 1_000)
    assert err.value.code is Code.INVALID_RECEIPT_HANDLE


def test_a_full_table_tracks_nothing_more(store_client: StoreDouble, clock: ManualClock) -> None:
    world = World(store_client, clock, renew_handles_max=1)
    world.connect()
    world.send(b"a")
    world.send(b"b", queue_id=1)
    assert len(world.receive()) == 2
    assert len(world.renewer.table) == 1 and world.renewer.stats().untracked_full == 1


def test_undelivered_messages_are_not_renewed(world: World) -> None:
    world.connect()
    world.send(b"lost")
    [got] = world.receive()
    world.consumer.undelivered(GROUP, [got.receipt_handle])
    assert len(world.renewer.table) == 0


@pytest.mark.parametrize(
    "overrides",
    [
        {"renew_scan_interval_ms": 10_000},  # not shorter than renew_ahead_ms
        {"renew_slices_ms": (5_000,)},  # a renewal would land inside the renew-ahead window
        {"renew_slices_ms": ()},
        {"auto_renew_invisible_ms": 10_000},
        {"renew_max_ms": 0},
        {"invisible_ms_when_clear": -1},
    ],
)
def test_config_refuses_inconsistent_renewal_settings(overrides: dict) -> None:
    with pytest.raises(ValueError):
        BrokerConfig(**overrides)
