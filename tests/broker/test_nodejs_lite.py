"""Lite topics (RIP-83) with the official Node.js client rocketmq-client-nodejs (pinned in
tests/broker/clients/node/package.json), unchanged: its LitePushConsumer (clients/node/lite_consume.mjs,
run by commands on its stdin) subscribes lite topics of a LITE parent with SyncLiteSubscription and
gets each one's messages in order; the Node producer (clients/node/send.mjs) sends them.

Timing: the broker tells consumers 2 s long polling (its floor lowered to 1 s), since the Node push
consumer's shutdown waits for its in-flight long poll; a test takes 5-10 s.

Client quirks seen here (1.0.8): the LitePushConsumer sends one SyncLiteSubscription PARTIAL_ADD per
subscribeLite naming just that lite topic (with the offset option when one is given); startup()
sends a COMPLETE_ADD of its empty set without waiting for it, which can overtake a PARTIAL_ADD sent
right after (STARTUP_SYNC_RACE in lite_consume.mjs: its "started" waits for that answer); every
ChangeInvisibleDuration it sends carries suspend=true (a suspend, and also the nack of a corrupted
message); a FAILURE is retried locally (attempt + 1 on the client) and never reaches the server
until it is forwarded to the DLQ; and its TelemetrySession has no case for
NotifyUnsubscribeLiteCommand (see test_exclusive_group_moves_a_lite_topic_to_its_newest_subscriber).
"""

from __future__ import annotations

import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.domain.lite import lmq_name
from services.store.client.client import GrpcStoreClient
from tests.support.node_client import LitePushConsumer, produce
from tests.support.waits import wait_until

pytestmark = [pytest.mark.needs("rocketmq-client-nodejs"), pytest.mark.timeout(60)]

PARENT = "NodeLiteParent"
POLLING_MS = 2_000  # settings reply: the consumers' long polling (their shutdown waits for one)
QUIET_S = 1.5  # how long "nothing else is delivered" is watched
NOTIFY_UNSUBSCRIBE_LITE_COMMAND = 9  # TelemetryCommand.CommandCase of the Node client's protobuf


@pytest.fixture
def endpoint(make_broker, topics) -> str:
    topics(PARENT, message_type="LITE", queue_nums=4)
    broker = make_broker(consumer_long_polling_timeout_ms=POLLING_MS, long_polling_timeout_ms_min=1_000)
    return f"127.0.0.1:{broker.port}"


def lite_sends(*specs: tuple[str, int], start: int = 0) -> list[dict]:
    """("chat", 2) -> chat-0, chat-1 (bodies), each sent for lite topic "chat"."""
    return [{"body": f"{lite}-{i}", "lite_topic": lite} for lite, n in specs for i in range(start, start + n)]


def by_lite(pushes: list[dict]) -> dict[str, list[str]]:
    """Bodies per lite topic, in delivery order."""
    out: dict[str, list[str]] = {}
    for push in pushes:
        out.setdefault(push["pushed"]["lite_topic"], []).append(push["pushed"]["body"])
    return out


def wait_committed(store_stub, group: str, lite_topic: str, expected: int) -> int:
    """The group's committed offset in the lite topic's LMQ, waiting (up to 10 s) for ``expected``:
    a push consumer's acks go out after its listener returns."""
    request = pb.QueryConsumerOffsetRequest(group=group, topic=lmq_name(PARENT, lite_topic), queue_id=0)

    return wait_until(
        lambda: store_stub.QueryConsumerOffset(request, timeout=10).offset,
        10,
        f"{group} committed {expected} in {lite_topic}",
        accept=lambda offset: offset >= expected,
    )


def test_lite_push_consumer_gets_its_lite_topics_in_order(endpoint, tmp_path):
    """Two lite topics subscribed, one with a backlog sent before: each is pushed in order, the
    backlog first; a third lite topic nobody subscribed is never pushed; after unsubscribeLite
    the lite topic's new messages are not pushed either. The settings reply gave the quotas."""
    sent = produce(tmp_path, endpoint, PARENT, lite_sends(("chat-a", 5), ("chat-c", 2)))
    with LitePushConsumer(tmp_path, endpoint, "NodeLiteGroup", PARENT) as consumer:
        started = consumer.started
        assert (started["quota"], started["max_lite_topic_size"]) == (2000, 64), started
        assert (started["fifo"], started["long_polling_timeout_ms"]) == (False, POLLING_MS), started
        assert consumer.subscribe("chat-a") == {"ok": True}
        assert consumer.subscribe("chat-b") == {"ok": True}
        assert consumer.topics() == ["chat-a", "chat-b"]
        assert consumer.synced() == [
            {"action": "COMPLETE_ADD", "lite_topics": [], "offset_option": None},  # sent by startup()
            {"action": "PARTIAL_ADD", "lite_topics": ["chat-a"], "offset_option": None},
            {"action": "PARTIAL_ADD", "lite_topics": ["chat-b"], "offset_option": None},
        ]
        backlog = consumer.pushed(5)
        assert by_lite(backlog) == {"chat-a": [f"chat-a-{i}" for i in range(5)]}
        assert [p["pushed"]["message_id"] for p in backlog] == [r["message_id"] for r in sent[:5]]
        assert {(p["pushed"]["topic"], p["pushed"]["attempt"], p["result"]) for p in backlog} == {
            (PARENT, 1, "SUCCESS")
        }

        # new messages of both subscribed lite topics wake the long poll; chat-c's stay unsent
        produce(tmp_path, endpoint, PARENT, lite_sends(("chat-b", 3), ("chat-c", 1), ("chat-a", 1), start=5))
        fresh = consumer.pushed(4)
        assert by_lite(fresh) == {"chat-b": ["chat-b-5", "chat-b-6", "chat-b-7"], "chat-a": ["chat-a-5"]}
        assert consumer.pushed_within(QUIET_S) == []

        # unsubscribed (PARTIAL_REMOVE): chat-a's next message is not pushed, chat-b's is
        assert consumer.ask(op="unsubscribe", lite_topic="chat-a") == {"ok": True}
        assert consumer.topics() == ["chat-b"]
        assert consumer.synced() == [{"action": "PARTIAL_REMOVE", "lite_topics": ["chat-a"], "offset_option": None}]
        produce(tmp_path, endpoint, PARENT, lite_sends(("chat-a", 1), ("chat-b", 1), start=8))
        assert by_lite(consumer.pushed(1)) == {"chat-b": ["chat-b-8"]}
        assert consumer.pushed_within(QUIET_S) == []


def test_exclusive_group_moves_a_lite_topic_to_its_newest_subscriber(endpoint, store_address, tmp_path):
    """``lite.sub.model=Exclusive``: the second consumer's PARTIAL_ADD of "a" takes it from the
    first, whose Telemetry stream gets NotifyUnsubscribeLiteCommand(a); from then on "a"'s
    messages go to the second only, the first keeps "b".

    CLIENT BUG (rocketmq-client-nodejs 1.0.8): TelemetrySession.#onData has no case for
    NOTIFY_UNSUBSCRIBE_LITE_COMMAND; it logs "Receive unrecognized command" and checks the absent
    status, so LiteSubscriptionManager.onNotifyUnsubscribeLiteCommand is never called and "a"
    stays in the first consumer's set (its 30 s COMPLETE_ADD names it again, which the server
    answers with the command again and without giving "a" back). The test reads the command
    from that warning (lite_consume.mjs prints it) and pins the set as the client leaves it."""
    store = GrpcStoreClient(store_address)
    try:
        store.update_group(
            "NodeLiteExclusive", False, 16, None, {"lite.sub.model": "Exclusive", "lite.bind.topic": PARENT}
        )
    finally:
        store.close()
    with (
        LitePushConsumer(tmp_path, endpoint, "NodeLiteExclusive", PARENT) as first,
        LitePushConsumer(tmp_path, endpoint, "NodeLiteExclusive", PARENT) as second,
    ):
        assert first.subscribe("a") == {"ok": True} and first.subscribe("b") == {"ok": True}
        assert second.subscribe("a") == {"ok": True}
        command = first.unrecognized.get(timeout=10)
        assert command["case"] == NOTIFY_UNSUBSCRIBE_LITE_COMMAND, command
        assert command["command"]["notifyUnsubscribeLiteCommand"] == {"liteTopic": "a"}, command
        assert first.topics() == ["a", "b"]  # the client bug above: should be ["b"]
        assert second.topics() == ["a"]
        assert second.unrecognized.empty()

        produce(tmp_path, endpoint, PARENT, lite_sends(("a", 3), ("b", 1)))
        assert by_lite(second.pushed(3)) == {"a": ["a-0", "a-1", "a-2"]}
        assert by_lite(first.pushed(1)) == {"b": ["b-0"]}
        assert first.pushed_within(QUIET_S) == [] and second.pushed_within(0) == []


def test_offset_options_move_the_groups_offset(endpoint, store_stub, tmp_path):
    """SyncLiteSubscription's offset_option on a PARTIAL_ADD moves the group's offset in the lite
    topic, before it is made ready (the consumer's long poll is always parked): MAX skips a
    backlog, MIN replays a lite topic the group had consumed (each a first attempt again), OFFSET n
    starts at the n-th message, TAIL_N n goes n back from the group's offset (here the end)."""
    group = "NodeLiteOffsets"
    produce(tmp_path, endpoint, PARENT, lite_sends(("replay", 3), ("by-offset", 5), ("by-tail", 5), ("latest", 3)))
    with LitePushConsumer(tmp_path, endpoint, group, PARENT) as consumer:
        for lite_topic in ("replay", "by-offset", "by-tail"):
            assert consumer.subscribe(lite_topic) == {"ok": True}
        assert {k: len(v) for k, v in by_lite(consumer.pushed(13)).items()} == {
            "replay": 3,
            "by-offset": 5,
            "by-tail": 5,
        }
        for lite_topic, count in (("replay", 3), ("by-offset", 5), ("by-tail", 5)):
            assert wait_committed(store_stub, group, lite_topic, count) == count
            assert consumer.ask(op="unsubscribe", lite_topic=lite_topic) == {"ok": True}
        consumer.synced()

        assert consumer.subscribe("latest", {"policy": "MAX"}) == {"ok": True}
        produce(tmp_path, endpoint, PARENT, lite_sends(("latest", 1), start=3))
        assert by_lite(consumer.pushed(1)) == {"latest": ["latest-3"]}

        assert consumer.subscribe("replay", {"policy": "MIN"}) == {"ok": True}
        replayed = consumer.pushed(3)
        assert by_lite(replayed) == {"replay": ["replay-0", "replay-1", "replay-2"]}
        assert {p["pushed"]["attempt"] for p in replayed} == {1}

        assert consumer.subscribe("by-offset", {"offset": 3}) == {"ok": True}
        assert consumer.subscribe("by-tail", {"tail_n": 2}) == {"ok": True}
        assert [sync.get("offset_option") for sync in consumer.synced()] == [
            {"policy": "MAX"},
            {"policy": "MIN"},
            {"offset": 3},
            {"tail_n": 2},
        ]
        again = consumer.pushed(4)
        assert by_lite(again) == {"by-offset": ["by-offset-3", "by-offset-4"], "by-tail": ["by-tail-3", "by-tail-4"]}
        assert consumer.pushed_within(QUIET_S) == []


def test_suspend_redelivers_without_another_attempt(endpoint, store_stub, tmp_path):
    """ConsumeResultSuspend.of(500): the client changes the message's invisible time to 500 ms
    with suspend=true (ChangeInvisibleDuration), and the server's redelivery is not another
    delivery attempt: the same message comes back with attempt 1, and is acked."""
    with LitePushConsumer(tmp_path, endpoint, "NodeLiteSuspend", PARENT, suspend_first=1, suspend_ms=500) as consumer:
        assert consumer.subscribe("pause") == {"ok": True}
        [sent] = produce(tmp_path, endpoint, PARENT, lite_sends(("pause", 1)))
        pushes = consumer.pushed(2)
        assert [(p["pushed"]["body"], p["pushed"]["attempt"], p["result"]) for p in pushes] == [
            ("pause-0", 1, "SUSPEND"),
            ("pause-0", 1, "SUCCESS"),
        ]
        assert {p["pushed"]["message_id"] for p in pushes} == {sent["message_id"]}
        assert wait_committed(store_stub, "NodeLiteSuspend", "pause", 1) == 1
        assert consumer.pushed_within(QUIET_S) == []
