"""The store client's contract, run against both clients: ``LocalStoreClient`` (the store core in
this process, through the servicer) and ``GrpcStoreClient`` (a real store server on 127.0.0.1:0).

Every caller of the store (broker, scheduler, txcheck, admin, pipeline) and every test that
stands a client in for the store relies on these answers being the same for both.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from services.domain.statuses import GetStatus, PutStatus
from services.runtime.clock import ManualClock
from services.store.client.client import GrpcStoreClient, StoreClient
from services.store.client.errors import (
    StoreError,
    StoreNotFoundError,
    StoreRejectedError,
    StoreTimeoutError,
    StoreUnavailableError,
    error_for_status,
)
from services.store.client.model import AckResult, MessageToPut, PolicyView, TopicInfo, stored_from_raw
from services.store.local_client import LocalStoreClient
from services.store.metadata.config_files import TopicConfig
from services.store.rpc.server import build_server, stop_server
from services.store.store import FileStore
from tests.support.filestore import small_config

TOPIC = "TopicContract"
GROUP = "GroupContract"
BORN_MS = 1_700_000_000_000


@dataclass
class Served:
    client: StoreClient
    store: FileStore

    def dispatched(self) -> None:
        self.store.reput.run_once()


@pytest.fixture(params=["local", "grpc"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    store = FileStore(small_config(tmp_path / "store"), ManualClock(BORN_MS))
    store.start()
    store.pop.revive.halt()  # driven by hand
    store.topics.create_or_update(TopicConfig(topic_name=TOPIC, read_queue_nums=2, write_queue_nums=2))
    server = None
    if request.param == "local":
        client: StoreClient = LocalStoreClient(store)
    else:
        server, port = build_server(store, "127.0.0.1", 0, max_workers=4)
        server.start()
        client = GrpcStoreClient(f"127.0.0.1:{port}", rpc_timeout_s=10)
    try:
        yield Served(client, store)
    finally:
        client.close()
        if server is not None:
            stop_server(server, grace_s=1)
        store.shutdown()


def message(body: bytes, queue_id: int = 0, topic: str = TOPIC, **properties: str) -> MessageToPut:
    return MessageToPut(
        topic=topic,
        queue_id=queue_id,
        body=body,
        properties=properties,
        born_timestamp_ms=BORN_MS,
        born_host="10.1.2.3:54321",
        flag=7,
        reconsume_times=2,
    )


def put(served: Served, *messages: MessageToPut, allow_system_topics: bool = False) -> list:
    outcomes = served.client.put_messages(list(messages), allow_system_topics)
    served.dispatched()
    return outcomes


def test_wait_ready_and_address(served: Served) -> None:
    assert served.client.wait_ready(5.0) is True
    assert served.client.address


def test_put_then_read_back_every_field(served: Served) -> None:
    outcomes = put(served, message(b"a", KEYS="k1", UNIQ_KEY="U1"), message(b"b", UNIQ_KEY="U2"))
    assert [o.status for o in outcomes] == [PutStatus.PUT_OK, PutStatus.PUT_OK]
    assert [o.queue_offset for o in outcomes] == [0, 1]
    assert outcomes[0].phy_offset == 0 < outcomes[1].phy_offset
    assert all(len(o.offset_msg_id) == 32 for o in outcomes)
    got = served.client.get_messages(TOPIC, 0, 0, 32)
    assert got.status is GetStatus.FOUND and (got.next_begin_offset, got.min_offset, got.max_offset) == (2, 0, 2)
    first = got.messages[0]
    assert (first.topic, first.queue_id, first.body, first.queue_offset, first.phy_offset) == (TOPIC, 0, b"a", 0, 0)
    assert first.properties["KEYS"] == "k1" and first.message_id == "U1"
    assert (first.flag, first.reconsume_times, first.born_timestamp_ms) == (7, 2, BORN_MS)
    assert first.born_host == "10.1.2.3:54321" and first.store_host
    assert first.store_timestamp_ms == BORN_MS and first.store_size_bytes > len(b"a")
    assert first.offset_msg_id == outcomes[0].offset_msg_id


def test_raw_reads_decode_to_the_same_messages(served: Served) -> None:
    put(served, message(b"x", UNIQ_KEY="U1"), message(b"y", UNIQ_KEY="U2"))
    decoded = served.client.get_messages(TOPIC, 0, 0, 32).messages
    raw = served.client.get_raw_messages(TOPIC, 0, 0, 32)
    assert raw.status is GetStatus.FOUND and raw.next_begin_offset == 2
    from_raw = [stored_from_raw(record) for record in raw.messages]
    assert from_raw == decoded
    refs = [(m.phy_offset, m.store_size_bytes) for m in decoded] + [(10**9, 100), (decoded[0].phy_offset, 7)]
    looked = served.client.look_messages(refs)
    assert sorted(looked) == [m.phy_offset for m in decoded]  # nothing there, and a wrong size: left out
    assert [looked[m.phy_offset] for m in decoded] == decoded
    assert stored_from_raw(b"not a record") is None


def test_reads_past_the_end_and_of_unknown_queues(served: Served) -> None:
    assert served.client.get_messages(TOPIC, 1, 0, 32).status is GetStatus.NO_MESSAGE_IN_QUEUE
    put(served, message(b"x"))
    caught_up = served.client.get_messages(TOPIC, 0, 1, 32)
    assert caught_up.status is GetStatus.OFFSET_OVERFLOW_ONE and caught_up.messages == []
    assert served.client.get_messages("NoSuchTopic", 0, 0, 32).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert served.client.queue_offsets(TOPIC, 0) == (0, 1)
    assert served.client.queue_offsets(TOPIC, 1) == (0, 0)


def test_look_up_by_offset_by_id_and_by_key(served: Served) -> None:
    [outcome] = put(served, message(b"k", KEYS="order-1 order-2", UNIQ_KEY="UNIQ1"))
    found = served.client.look_message(outcome.phy_offset)
    assert found is not None and found.body == b"k" and found.queue_offset == 0
    assert served.client.look_message(10**9) is None
    by_id = served.client.look_message_by_offset_msg_id(outcome.offset_msg_id)
    assert by_id is not None and by_id.phy_offset == outcome.phy_offset
    assert served.client.look_message_by_offset_msg_id("not-an-id") is None
    assert [m.body for m in served.client.query_messages_by_key(TOPIC, "order-2", 8)] == [b"k"]
    assert [m.body for m in served.client.query_messages_by_key(TOPIC, "UNIQ1", 8)] == [b"k"]
    assert served.client.query_messages_by_key(TOPIC, "nothing", 8) == []


def test_put_refusals_are_statuses_for_the_whole_batch(served: Served) -> None:
    refused = served.client.put_messages([message(b"ok"), message(b"bad", queue_id=99)])
    assert [o.status for o in refused] == [PutStatus.QUEUE_ID_ILLEGAL] * 2 and not any(o.ok for o in refused)
    assert served.client.put_messages([message(b"s", topic="SCHEDULE_TOPIC_XXXX")])[0].status is PutStatus.TOPIC_ILLEGAL
    assert served.client.put_messages(
        [message(b"s", topic="SCHEDULE_TOPIC_XXXX", DELAY="1")], allow_system_topics=True
    )[0].ok


def test_consumer_and_delay_offsets(served: Served) -> None:
    assert served.client.query_consumer_offset(GROUP, TOPIC, 0) == -1
    served.client.commit_consumer_offset(GROUP, TOPIC, 0, 5)
    served.client.commit_consumer_offset(GROUP, TOPIC, 1, 7)
    assert served.client.query_consumer_offset(GROUP, TOPIC, 0) == 5
    assert sorted(served.client.group_offsets(GROUP)) == [(TOPIC, 0, 5), (TOPIC, 1, 7)]
    assert served.client.get_delay_offset(3) == 0
    served.client.update_delay_offset(3, 42)
    assert served.client.get_delay_offset(3) == 42
    put(served, message(b"t"))
    assert served.client.offset_by_timestamp(TOPIC, 0, BORN_MS) == 0


def test_topics_and_groups(served: Served) -> None:
    assert served.client.get_topic("TopicNew") is None
    created = served.client.create_topic(TopicInfo("TopicNew", 4, 4, 6, "FIFO"))
    assert (created.read_queue_nums, created.write_queue_nums, created.message_type) == (4, 4, "FIFO")
    assert created.readable and created.writable
    updated = served.client.update_topic("TopicNew", 8, "NORMAL")
    assert (updated.read_queue_nums, updated.message_type, updated.perm) == (8, "NORMAL", 6)
    assert "TopicNew" in {t.name for t in served.client.list_topics()}
    assert served.client.delete_topic("TopicNew") is True
    assert served.client.delete_topic("TopicNew") is False
    assert served.client.get_group("GroupNew") is None
    group = served.client.update_group("GroupNew", fifo=True, retry_max_times=3)
    assert (group.consume_message_orderly, group.retry_max_times) == (True, 3)
    assert served.client.get_group("GroupNew") == group
    assert "GroupNew" in {g.name for g in served.client.list_groups()}


def test_pop_ack_change_invisible_and_dead_letter(served: Served) -> None:
    put(served, message(b"p1"), message(b"p2"), message(b"p3"))
    popped = served.client.pop_messages(GROUP, TOPIC, -1, 3, 30_000, (), fifo=False)
    assert sorted(d.body for d in popped.messages) == [b"p1", b"p2", b"p3"]
    assert TOPIC in popped.examined_topics
    first, second, third = popped.messages
    assert first.receipt_handle and first.delivery_attempt == 3 and first.offset_msg_id  # reconsume 2 + 1
    assert served.client.ack_messages(GROUP, TOPIC, [first.receipt_handle]) == [AckResult.OK]
    status, handle = served.client.change_invisible_duration(GROUP, TOPIC, second.receipt_handle, 60_000)
    assert status is AckResult.OK and handle and handle != second.receipt_handle
    assert served.client.forward_to_dead_letter_queue(GROUP, TOPIC, third.receipt_handle) is AckResult.OK
    bad = served.client.ack_messages(GROUP, TOPIC, ["not-a-handle"])
    assert bad == [AckResult.INVALID_RECEIPT_HANDLE]
    stats = served.client.consumer_stats()
    assert any(s.group == GROUP and s.topic == TOPIC for s in stats)


def test_bad_arguments_are_rejected(served: Served) -> None:
    with pytest.raises(StoreRejectedError, match="ChangeInvisibleDuration"):
        served.client.change_invisible_duration(GROUP, TOPIC, "h", -1)
    with pytest.raises(StoreRejectedError, match="PopMessages"):
        served.client.pop_messages(GROUP, TOPIC, -1, -1, 30_000, (), fifo=False)


def test_users_and_acls(served: Served) -> None:
    assert served.client.put_user("alice", "secret", "Normal", "enable") is True
    assert served.client.put_user("alice", "secret2", "Normal", "enable") is False
    policy = PolicyView("Topic:TopicContract", ("Pub",), "Allow", ("10.0.0.0/8",))
    served.client.put_acl("alice", [policy])
    users, acls, version = served.client.auth_config()
    assert ("alice", "secret2", "Normal", "enable") in users
    assert ("alice", [policy]) in acls and version > 0
    with pytest.raises(StoreNotFoundError):
        served.client.put_acl("nobody", [policy])
    assert served.client.delete_user("alice") is True
    assert served.client.delete_user("alice") is False


def test_watch_arrivals_announces_puts_and_stops(served: Served) -> None:
    stopped = threading.Event()
    restarts: list[int] = []
    seen: list[str] = []
    announced = threading.Event()

    def on_arrivals(topics: list[str]) -> None:
        seen.extend(topics)
        if TOPIC in topics:
            announced.set()

    watcher = threading.Thread(
        target=served.client.watch_arrivals,
        args=([TOPIC], on_arrivals, lambda: restarts.append(1), stopped),
        daemon=True,
    )
    watcher.start()
    deadline = threading.Event()
    while not restarts and not deadline.wait(0.02):
        pass
    put(served, message(b"w"))
    assert announced.wait(10), f"no arrival announced; saw {seen}"
    served.client.stop_watching()
    watcher.join(10)
    assert not watcher.is_alive() and stopped.is_set() and restarts


def test_stop_watching_before_the_stream_opens(served: Served) -> None:
    stopped = threading.Event()
    served.client.stop_watching()  # nothing open yet: nothing to cancel
    stopped.set()
    served.client.watch_arrivals([TOPIC], lambda topics: None, lambda: None, stopped)  # returns at once


def test_a_closed_client_is_unavailable(served: Served) -> None:
    served.client.close()
    with pytest.raises(StoreUnavailableError):
        served.client.queue_offsets(TOPIC, 0)


def test_no_store_at_the_address() -> None:
    client = GrpcStoreClient("127.0.0.1:1", rpc_timeout_s=1)
    try:
        with pytest.raises(StoreUnavailableError, match="not serving"):
            client.wait_ready(0.5)
        with pytest.raises(StoreUnavailableError, match="UNAVAILABLE"):
            client.queue_offsets(TOPIC, 0)
    finally:
        client.close()


@pytest.mark.parametrize(
    ("code", "kind", "text"),
    [
        (grpc.StatusCode.DEADLINE_EXCEEDED, StoreTimeoutError, "store did not answer GetTopic in time"),
        (grpc.StatusCode.INVALID_ARGUMENT, StoreRejectedError, "store refused GetTopic: why"),
        (grpc.StatusCode.NOT_FOUND, StoreNotFoundError, "store failed GetTopic: NOT_FOUND why"),
        (grpc.StatusCode.UNAVAILABLE, StoreUnavailableError, "store failed GetTopic: UNAVAILABLE why"),
        (grpc.StatusCode.CANCELLED, StoreUnavailableError, "store failed GetTopic: CANCELLED why"),
        (grpc.StatusCode.INTERNAL, StoreError, "store failed GetTopic: INTERNAL why"),
    ],
)
def test_status_codes_map_to_one_error_tree(code: grpc.StatusCode, kind: type, text: str) -> None:
    error = error_for_status(code, "why", "GetTopic")
    assert type(error) is kind and str(error) == text and error.code == code.name
