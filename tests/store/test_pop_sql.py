"""PopService with SQL92 property filters (``sql_expression``), in the core and over gRPC.

Same setup as test_pop.py: a real FileStore on a ManualClock, reput and revive driven by hand.
"""

from __future__ import annotations

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.domain.format.java_compat import java_string_hash
from services.domain.sql_filter import SqlFilterError
from services.store.pop.model import PopStatus
from tests.support.filestore import message
from tests.support.store_pop import INVISIBLE_MS, RETRY, TOPIC, ack_all, committed, create_topic, pop, put, revive
from tests.support.store_pop_rpc import GROUP as RPC_GROUP
from tests.support.store_pop_rpc import TOPIC as RPC_TOPIC
from tests.support.store_pop_rpc import message as pb_message
from tests.support.store_pop_rpc import pop_served  # noqa: F401 - this module's "served" fixture


def put_orders(store, *orders: dict[str, str]) -> None:
    put(store, *(message(TOPIC, 0, props.pop("body").encode(), **props) for props in map(dict, orders)))


ORDERS = (
    {"body": "small-red", "amount": "3", "color": "red"},
    {"body": "big-red", "amount": "50", "color": "red"},
    {"body": "big-blue", "amount": "70", "color": "blue"},
    {"body": "no-amount", "color": "red"},
    {"body": "text-amount", "amount": "lots", "color": "red"},
)


def test_only_matching_messages_are_delivered_and_the_rest_count_as_acked(store):
    create_topic(store)
    put_orders(store, *ORDERS)
    result = pop(store, sql_expression="amount > 10 AND color = 'red'")
    assert [m.record.body for m in result.messages] == [b"big-red"]
    assert committed(store) == 1  # offset 0 was skipped; 1 is in flight
    ack_all(store, result)
    assert committed(store) == 5  # everything else was filtered out: finished like an ack
    # Nothing comes back, with or without a filter: skipped messages are never redelivered.
    assert pop(store).status is PopStatus.NO_MESSAGE


def test_unknown_is_not_a_match_and_neither_is_its_not(store):
    create_topic(store)
    put_orders(store, *ORDERS)
    # amount absent ("no-amount") or not a number ("text-amount"): UNKNOWN both ways.
    result = pop(store, sql_expression="NOT (amount > 10)")
    assert [m.record.body for m in result.messages] == [b"small-red"]
    other = pop(store, group="OtherGroup", sql_expression="amount IS NULL OR color = 'blue'")
    assert [m.record.body for m in other.messages] == [b"big-blue", b"no-amount"]


def test_sql_and_tags_must_both_match(store):
    create_topic(store)
    put(
        store,
        message(TOPIC, 0, b"a-1", tags="A", n="1"),
        message(TOPIC, 0, b"b-1", tags="B", n="1"),
        message(TOPIC, 0, b"a-2", tags="A", n="2"),
    )
    result = pop(store, tags_codes=frozenset({java_string_hash("A")}), sql_expression="n = 1")
    assert [m.record.body for m in result.messages] == [b"a-1"]
    # TAGS is an ordinary property for SQL.
    again = pop(store, group="TagsBySql", sql_expression="TAGS IN ('B') OR n >= 2")
    assert [m.record.body for m in again.messages] == [b"b-1", b"a-2"]


def test_retry_copies_are_matched_on_their_own_properties(store, clock):
    create_topic(store)
    put_orders(store, *ORDERS)
    first = pop(store, sql_expression="color = 'red' AND amount >= 3")
    assert [m.record.body for m in first.messages] == [b"small-red", b"big-red"]
    clock.advance_ms(INVISIBLE_MS)
    revive(store)  # both unacked: copies go to %RETRY%GroupPop with the original properties
    retried = pop(store, sql_expression="color = 'red' AND amount > 10")
    assert [(m.record.body, m.source_topic, m.delivery_attempt) for m in retried.messages] == [(b"big-red", RETRY, 2)]
    assert retried.messages[0].record.properties["amount"] == "50"
    ack_all(store, retried)
    assert committed(store, RETRY) == 2  # the small-red copy did not match: finished, not redelivered
    clock.advance_ms(INVISIBLE_MS)
    revive(store)
    assert pop(store).status is PopStatus.NO_MESSAGE


def test_a_bad_expression_raises_and_changes_nothing(store):
    create_topic(store)
    put_orders(store, *ORDERS)
    for bad in ("amount >", "amount = NULL", "(" * 100 + "a = 1" + ")" * 100, "x" * 5000):
        with pytest.raises(SqlFilterError):
            pop(store, sql_expression=bad)
    assert committed(store) == -1  # the group never popped: no offset yet
    assert len(pop(store).messages) == len(ORDERS)


def test_pop_rpc_filters_and_refuses_bad_expressions_with_invalid_argument(served):
    served.put(pb_message(b"cheap", price="5"), pb_message(b"dear", price="500"), pb_message(b"free"))
    response = served.pop(sql_expression="price BETWEEN 100 AND 1000")
    assert response.status == pb.POP_FOUND and [m.message.body for m in response.messages] == [b"dear"]
    assert response.messages[0].message.properties["price"] == "500"
    assert served.store.consumer_offsets.query_offset(RPC_GROUP, RPC_TOPIC, 0) == 1  # "cheap" skipped
    with pytest.raises(grpc.RpcError) as err:
        served.pop(sql_expression="price >> 5")
    assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT and "position 7" in err.value.details()
    assert served.store.consumer_offsets.query_offset(RPC_GROUP, RPC_TOPIC, 0) == 1
    # "free" (no price: BETWEEN is UNKNOWN) was finished for this group, not for another one.
    assert not served.pop(sql_expression="price IS NULL").messages
    assert [m.message.body for m in served.pop(group="OtherGroup", sql_expression="price IS NULL").messages] == [
        b"free"
    ]
