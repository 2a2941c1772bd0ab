"""RawPullService (services/broker/raw_pull.py) over the real store (the ``store`` fixture,
tests/support/store_double.py): ranges, filters, end offsets, long polling and refused requests,
without gRPC."""

from __future__ import annotations

import threading
import time

import pytest

from services.broker.consumer import ArrivalHub, FilterType
from services.broker.errors import BrokerError, Code, NotFoundError
from services.broker.pull import OffsetService
from services.broker.raw_pull import RawPullRequest, RawPullService, record_queue_offset
from services.domain.format.commitlog_format import decode_record
from services.runtime.clock import SystemClock
from services.store.client.model import MessageToPut, PutStatus, TopicInfo
from tests.support.store_double import StoreDouble

TOPIC = "RawTopic"


class _Topics:
    def get(self, name, create=None):
        if name != TOPIC:
            raise NotFoundError(f"topic {name} not found", Code.TOPIC_NOT_FOUND)
        return TopicInfo(name=name, read_queue_nums=2, write_queue_nums=2, perm=6, message_type="NORMAL")


@pytest.fixture
def setup(store_client: StoreDouble):
    """The real store (``store``, tests/support/store_double.py) with TOPIC as ``_Topics`` has it."""
    store_client.create_topic(_Topics().get(TOPIC))
    hub = ArrivalHub()
    offsets = OffsetService(store_client, _Topics(), hub, SystemClock(), "broker-a")
    service = RawPullService(offsets, store_client)
    return store_client, hub, service


def put(store_client: StoreDouble, count: int, start: int = 0, tags=("TagA",), queue_id: int = 0, **props) -> None:
    outcomes = store_client.put_messages(
        [
            MessageToPut(
                TOPIC,
                queue_id,
                b"m%d" % i,
                {"TAGS": tags[i % len(tags)], "UNIQ_KEY": f"ID{i:04d}", "n": str(i), **props},
                born_timestamp_ms=1_700_000_000_000,
            )
            for i in range(start, start + count)
        ]
    )
    assert all(o.status is PutStatus.PUT_OK for o in outcomes)


def reads(store_client: StoreDouble) -> list[tuple[int, int]]:
    """(queue offset, max count) of every GetRawMessages the store served."""
    return [(r.queue_offset, r.max_count) for r in store_client.requests_of("GetRawMessages")]


def offsets_of(records: list[bytes]) -> list[int]:
    return [record_queue_offset(r) for r in records]


def test_a_range_streams_batches_of_whole_records_up_to_the_end(setup):
    store, _, service = setup
    put(store, 10)
    results = list(service.pull(RawPullRequest(TOPIC, 0, 2, end_offset=9, max_msg_nums=3)))
    assert [r.code for r in results] == [Code.OK] * 3
    assert [offsets_of(r.records) for r in results] == [[2, 3, 4], [5, 6, 7], [8]]
    assert [r.next_begin_offset for r in results] == [5, 8, 9]
    assert all((r.min_offset, r.max_offset) == (0, 10) for r in results)
    assert reads(store)[-1] == (8, 1)  # never asks the store for more than the range holds
    first = decode_record(results[0].records[0], 0, len(results[0].records[0]))
    assert first.body == b"m2" and first.properties["n"] == "2" and first.topic == TOPIC
    assert results[0].records[0] == store.file_store.get_messages(TOPIC, 0, 2, 1).raw_messages[0]  # byte for byte


def test_without_an_end_one_response_and_caught_up_is_message_not_found(setup):
    store, _, service = setup
    put(store, 5)
    [result] = service.pull(RawPullRequest(TOPIC, 0, 1, max_msg_nums=2))
    assert result.code is Code.OK and offsets_of(result.records) == [1, 2] and result.next_begin_offset == 3
    [result] = service.pull(RawPullRequest(TOPIC, 0, 5))
    assert result.code is Code.MESSAGE_NOT_FOUND and not result.records and result.next_begin_offset == 5
    results = list(service.pull(RawPullRequest(TOPIC, 0, 3, end_offset=100, max_msg_nums=1)))
    assert [r.code for r in results] == [Code.OK, Code.OK, Code.MESSAGE_NOT_FOUND]
    assert results[-1].next_begin_offset == 5
    [beyond] = service.pull(RawPullRequest(TOPIC, 0, 9))
    assert beyond.code is Code.ILLEGAL_OFFSET and beyond.next_begin_offset == 5
    [empty] = service.pull(RawPullRequest(TOPIC, 1, 0))  # a queue never written
    assert empty.code is Code.MESSAGE_NOT_FOUND and empty.next_begin_offset == 0


def test_tag_filter_checks_the_real_tag_and_stops_at_the_end(setup):
    store, _, service = setup
    put(store, 12, tags=("Aa", "BB", "Other"))  # "Aa" and "BB" have the same Java hash code
    results = list(service.pull(RawPullRequest(TOPIC, 0, 0, end_offset=7, filter_expression="Aa")))
    records = [r for result in results for r in result.records]
    assert offsets_of(records) == [0, 3, 6] and results[-1].next_begin_offset == 7
    assert all(decode_record(r, 0, len(r)).properties["TAGS"] == "Aa" for r in records)
    # The store's tag scan reads past the end; nothing past it is sent, next stops at the end.
    results = list(service.pull(RawPullRequest(TOPIC, 0, 7, end_offset=8, filter_expression="Aa || BB")))
    assert [r.code for r in results] == [Code.OK] and offsets_of(results[0].records) == [7]
    assert results[0].next_begin_offset == 8
    [skipped] = service.pull(RawPullRequest(TOPIC, 0, 8, end_offset=9, filter_expression="Aa"))
    assert skipped.code is Code.MESSAGE_NOT_FOUND and skipped.next_begin_offset == 9


def test_sql_filter_over_properties(setup):
    store, _, service = setup
    put(store, 10, tags=("TagA", "TagB"))
    request = RawPullRequest(
        TOPIC, 0, 0, end_offset=10, filter_type=FilterType.SQL, filter_expression="n >= 3 AND TAGS = 'TagB'"
    )
    records = [r for result in service.pull(request) for r in result.records]
    assert offsets_of(records) == [3, 5, 7, 9]
    nothing = RawPullRequest(TOPIC, 0, 0, filter_type=FilterType.SQL, filter_expression="missing = 1")
    [result] = service.pull(nothing)
    assert result.code is Code.MESSAGE_NOT_FOUND and result.next_begin_offset == 10


@pytest.mark.parametrize(
    "request_, code",
    [
        (RawPullRequest(TOPIC, 0, -1), Code.ILLEGAL_OFFSET),
        (RawPullRequest(TOPIC, 0, 5, end_offset=5), Code.BAD_REQUEST),
        (RawPullRequest(TOPIC, 2, 0), Code.BAD_REQUEST),  # not a read queue
        (RawPullRequest(TOPIC, 0, 0, broker_name="broker-b"), Code.BAD_REQUEST),
        (RawPullRequest(TOPIC, 0, 0, max_msg_nums=-1), Code.BAD_REQUEST),
        (RawPullRequest("NoSuchTopic", 0, 0), Code.TOPIC_NOT_FOUND),
        (RawPullRequest("bad topic!", 0, 0), Code.ILLEGAL_TOPIC),
        (RawPullRequest(TOPIC, 0, 0, consumer_group="bad group!"), Code.ILLEGAL_CONSUMER_GROUP),
        (
            RawPullRequest(TOPIC, 0, 0, filter_type=FilterType.SQL, filter_expression="a >"),
            Code.ILLEGAL_FILTER_EXPRESSION,
        ),
        (RawPullRequest(TOPIC, 0, 0, filter_expression="||"), Code.ILLEGAL_FILTER_EXPRESSION),
        (RawPullRequest(TOPIC, 0, 0, suspend_timeout_ms=-1), Code.ILLEGAL_POLLING_TIME),
    ],
)
def test_refused_requests_raise_before_any_read(setup, request_, code):
    store, _, service = setup
    before = list(store.requests)
    with pytest.raises(BrokerError) as caught:
        service.pull(request_)
    assert caught.value.code is code and store.requests == before  # no read, nor any other store call


def test_long_polling_wakes_on_an_arrival_and_only_the_first_read_waits(setup):
    store, hub, service = setup
    put(store, 1)

    def arrive() -> None:
        put(store, 2, start=1)
        hub.notify([TOPIC])

    timer = threading.Timer(0.3, arrive)
    timer.start()
    started = time.monotonic()
    try:
        results = list(service.pull(RawPullRequest(TOPIC, 0, 1, end_offset=10, suspend_timeout_ms=10_000)))
    finally:
        timer.join()
    assert time.monotonic() - started < 5
    assert results[0].code is Code.OK and offsets_of(results[0].records) == [1, 2]
    assert results[-1].code is Code.MESSAGE_NOT_FOUND and results[-1].next_begin_offset == 3  # no second wait
    started = time.monotonic()
    [timed_out] = service.pull(RawPullRequest(TOPIC, 0, 3, suspend_timeout_ms=300))
    assert timed_out.code is Code.MESSAGE_NOT_FOUND and 0.25 < time.monotonic() - started < 3
