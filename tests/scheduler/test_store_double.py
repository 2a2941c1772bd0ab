"""The tests' in-process store (tests/support/store_double.py; the scheduler and broker core
tests run on it): a real FileStore whose test controls answer as the store itself would."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.domain.statuses import PutStatus
from services.store.client.errors import StoreUnavailableError
from services.store.client.model import MessageToPut
from tests.support.scheduler_timers import START_MS


def message(topic: str, queue_id: int = 0, body: bytes = b"x") -> MessageToPut:
    return MessageToPut(topic, queue_id, body, {"UNIQ_KEY": body.decode()}, born_timestamp_ms=START_MS)


def test_a_refusal_is_all_or_nothing_like_the_stores_own(store_client):
    # the store's own refusal: a queue id the auto-created topic (8 queues) does not have
    real = store_client.put_messages([message("Out", 0, b"a"), message("Out", 99, b"b")], allow_system_topics=True)
    assert [o.status for o in real] == [PutStatus.QUEUE_ID_ILLEGAL] * 2
    assert {(o.queue_offset, o.phy_offset) for o in real} == {(-1, -1)} and real[0].error == real[1].error
    # the test's refusal has the same shape
    store_client.outcome = lambda m: PutStatus.TOPIC_NOT_FOUND if m.topic == "Nope" else PutStatus.PUT_OK
    refused = store_client.put_messages([message("Out", 0, b"c"), message("Nope", 0, b"d")], allow_system_topics=True)
    assert [o.status for o in refused] == [PutStatus.TOPIC_NOT_FOUND] * 2
    assert {(o.queue_offset, o.phy_offset) for o in refused} == {(-1, -1)}
    assert (
        refused[0].error
        == refused[1].error
        == "message 1 of the batch: the test refused Nope-0 (TOPIC_NOT_FOUND); nothing written"
    )
    assert store_client.messages("Out") == [] and store_client.put_calls == 2
    [ok] = store_client.put_messages([message("Out", 2, b"e")], allow_system_topics=True)
    assert ok.status is PutStatus.PUT_OK and ok.store_timestamp_ms == START_MS
    [stored] = store_client.messages("Out")  # readable at once: the put was dispatched
    assert (stored.queue_id, stored.queue_offset, stored.phy_offset, stored.body) == (2, 0, ok.phy_offset, b"e")


def test_an_unavailable_refusal_fails_the_call_as_the_servicer_does(store_client):
    store_client.outcome = lambda m: PutStatus.SERVICE_NOT_AVAILABLE
    with pytest.raises(StoreUnavailableError):
        store_client.put_messages([message("Out")], allow_system_topics=True)
    assert store_client.messages("Out") == []


def test_down_fails_every_call_but_producers_still_reach_the_store(store_client, clock):
    store_client.down = True
    for call in (
        lambda: store_client.get_messages("Out", 0, 0, 1),
        lambda: store_client.put_messages([message("Out")]),
        lambda: store_client.queue_offsets("Out", 0),
        lambda: store_client.get_delay_offset(1),
    ):
        with pytest.raises(StoreUnavailableError):
            call()
    clock.advance_ms(7)
    parked = store_client.append(message("Out", 1, b"p"))
    assert (parked.topic, parked.queue_id, parked.queue_offset, parked.store_timestamp_ms) == (
        "Out",
        1,
        0,
        START_MS + 7,
    )
    assert store_client.messages("Out") == [parked] and store_client.put_calls == 0
    store_client.down = False
    assert store_client.queue_offsets("Out", 1) == (0, 1)


def test_fail_after_lets_n_calls_through_then_fails_every_call_until_reset(store_client):
    store_client.fail_after = 3
    store_client.put_messages([message("Out", 0, b"a")], allow_system_topics=True)  # 1: a put
    assert [r.body for r in store_client.get_messages("Out", 0, 0, 8).messages] == [b"a"]  # 2: a unary call
    store_client.commit_consumer_offset("G", "Out", 0, 1)  # 3
    for call in (
        lambda: store_client.put_messages([message("Out", 0, b"b")], allow_system_topics=True),
        lambda: store_client.query_consumer_offset("G", "Out", 0),
        lambda: store_client.transport.stream("WatchArrivals", pb.WatchArrivalsRequest(topics=["Out"])),
    ):
        with pytest.raises(StoreUnavailableError):
            call()
    assert store_client.fail_after == 0 and store_client.put_calls == 1  # the refused put never reached the store
    assert [r.body for r in store_client.messages("Out")] == [b"a"]  # the helpers bypass it
    store_client.fail_after = None
    assert store_client.query_consumer_offset("G", "Out", 0) == 1


def test_after_put_runs_once_the_put_was_appended(store_client):
    seen = []

    def lose_reply(messages):
        seen.append([m.body for m in messages])
        raise StoreUnavailableError("reply lost")

    store_client.after_put = lose_reply
    with pytest.raises(StoreUnavailableError):
        store_client.put_messages([message("Out", 0, b"a"), message("Out", 0, b"b")], allow_system_topics=True)
    assert seen == [[b"a", b"b"]] and [r.body for r in store_client.messages("Out")] == [b"a", b"b"]
    store_client.update_delay_offset(2, 5)
    assert store_client.delay_offsets == {2: 5}


def test_puts_record_what_reached_the_store(store_client):
    sent = MessageToPut(
        "Out",
        3,
        b"a",
        {"UNIQ_KEY": "a", "KEYS": "k"},
        sys_flag=0x1,
        born_timestamp_ms=START_MS,
        born_host="10.0.0.1:7",
        reconsume_times=2,
        prepared_transaction_offset=42,
        flag=5,
    )
    store_client.put_messages([sent])
    store_client.outcome = lambda m: PutStatus.OS_PAGE_CACHE_BUSY  # refused: still a call that reached the store
    refused = [message("Out", 0, b"b"), message("rmq_sys_wheel_timer", 0, b"c")]
    store_client.put_messages(refused, allow_system_topics=True)
    store_client.outcome = None
    store_client.append(message("Out", 1, b"d"))  # a helper: not a call of the code under test
    store_client.down = True
    with pytest.raises(StoreUnavailableError):
        store_client.put_messages([message("Out", 0, b"e")])
    # each message as sent, with the call's flag as its allow_system_topic
    assert store_client.puts == [([sent], False), ([replace(m, allow_system_topic=True) for m in refused], True)]
    assert store_client.sent == [sent, *store_client.puts[1][0]] and store_client.put_calls == 2
    assert [m.body for m in store_client.messages("Out")] == [b"d", b"a"]  # queue 1, then queue 3


def test_requests_record_every_call_that_reached_the_store(store_client):
    store_client.put_messages([message("Out", 0, b"a")], allow_system_topics=True)
    store_client.get_raw_messages("Out", 0, 0, 8)
    popped = store_client.pop_messages("G", "Out", -1, 4, 30_000, (), False)
    store_client.ack_messages("G", "Out", [d.receipt_handle for d in popped.messages])
    store_client.outcome = lambda m: PutStatus.OS_PAGE_CACHE_BUSY  # refused: still a call that reached the store
    store_client.put_messages([message("Out", 0, b"b")], allow_system_topics=True)
    store_client.outcome = None
    store_client.append(message("Out", 1, b"c"))  # a helper: not a call of the code under test
    store_client.messages("Out")
    store_client.down = True
    with pytest.raises(StoreUnavailableError):
        store_client.pop_messages("G", "Out", -1, 4, 30_000, (), False)
    store_client.down = False
    store_client.fail_after = 0
    with pytest.raises(StoreUnavailableError):
        store_client.transport.stream("WatchArrivals", pb.WatchArrivalsRequest(topics=["Out"]))
    store_client.fail_after = None
    assert [method for method, _ in store_client.requests] == [
        "PutMessages",
        "GetRawMessages",
        "PopMessages",
        "AckMessages",
        "PutMessages",
    ]
    [read] = store_client.requests_of("GetRawMessages")
    assert (read.topic, read.queue_id, read.queue_offset, read.max_count) == ("Out", 0, 0, 8)
    [pop] = store_client.requests_of("PopMessages")
    assert (pop.group, pop.topic, pop.queue_id, pop.max_count, pop.invisible_duration_ms) == ("G", "Out", -1, 4, 30_000)
    [ack] = store_client.requests_of("AckMessages")
    assert [d.body for d in popped.messages] == [b"a"]
    assert list(ack.receipt_handles) == [popped.messages[0].receipt_handle]
    assert [request.messages[0].body for request in store_client.requests_of("PutMessages")] == [b"a", b"b"]
    assert store_client.requests_of("WatchArrivals") == [] and store_client.put_calls == 2
