"""SQL92 filters over raw v2 ReceiveMessage requests, against the real store and broker servers."""

from __future__ import annotations

import threading
import time

from apache.rocketmq.v2 import definition_pb2 as d

from tests.support.store_reads import wait_dispatched
from tests.support.v2_requests import ack, message, receive, send_ok

ORDERS = [
    ("small-red", "TagA", {"amount": "3", "color": "red"}),
    ("big-red", "TagA", {"amount": "50", "color": "red"}),
    ("big-blue", "TagB", {"amount": "70", "color": "blue"}),
    ("no-amount", "TagA", {"color": "red"}),
    ("text-amount", "TagB", {"amount": "lots", "color": "red"}),
]


def send_orders(v2, topic: str) -> None:
    for i, (body, tag, props) in enumerate(ORDERS):
        send_ok(v2, message(topic, body=body.encode(), tag=tag, user_properties=props, message_id=f"ID-{topic}-{i}"))


def bodies(messages) -> list[str]:
    return sorted(m.body.decode() for m in messages)


def test_only_matching_messages_are_received_and_the_rest_never_come_back(v2, store_stub, topics):
    topics("SqlTopic")
    send_orders(v2, "SqlTopic")
    wait_dispatched(store_stub, "SqlTopic", len(ORDERS))
    status, got, _ = receive(
        v2, "SqlTopic", group="SqlGroup", filter_type=d.SQL, expression="amount > 10 AND color = 'red'"
    )
    assert status.code == d.OK and bodies(got) == ["big-red"]
    assert dict(got[0].user_properties) == {"amount": "50", "color": "red"}
    assert ack(v2, "SqlTopic", got[0].system_properties.receipt_handle, group="SqlGroup").status.code == d.OK
    # The others were finished in the store for this group: not even a match-all receive sees them.
    started = time.monotonic()
    status, got, _ = receive(v2, "SqlTopic", group="SqlGroup", polling_s=5)
    assert status.code == d.MESSAGE_NOT_FOUND and not got and time.monotonic() - started > 4.5
    # Another group has its own filter; TAGS is an ordinary property, UNKNOWN does not match.
    status, got, _ = receive(
        v2, "SqlTopic", group="SqlGroup2", filter_type=d.SQL, expression="TAGS = 'TagA' AND NOT (amount > 10)"
    )
    assert status.code == d.OK and bodies(got) == ["small-red"]  # no-amount: NOT UNKNOWN is UNKNOWN


def test_a_parked_receive_ignores_arrivals_that_do_not_match(v2, topics):
    topics("SqlWait")

    def later():
        send_ok(v2, message("SqlWait", body=b"blue", user_properties={"color": "blue"}, message_id="ID-W-1"))
        time.sleep(0.5)  # the scenario: a match comes a while after the arrival that does not match
        send_ok(v2, message("SqlWait", body=b"red", user_properties={"color": "red"}, message_id="ID-W-2"))

    send_ok(v2, message("SqlWait", body=b"first", user_properties={"color": "green"}, message_id="ID-W-0"))
    sender = threading.Timer(0.5, later)
    sender.start()
    started = time.monotonic()
    status, got, _ = receive(
        v2, "SqlWait", group="SqlWaiter", filter_type=d.SQL, expression="color IN ('red')", polling_s=15, timeout=20
    )
    sender.join()
    assert status.code == d.OK and bodies(got) == ["red"]
    assert 0.75 < time.monotonic() - started < 8  # woken by the blue arrival, popped nothing, waited on


def test_bad_expressions_are_illegal_filter_expression_before_any_wait(v2, topics):
    topics("SqlBad")
    send_ok(v2, message("SqlBad", message_id="ID-B-0"))
    assert d.ILLEGAL_FILTER_EXPRESSION == 40010  # apache.rocketmq.v2.Code
    for bad in (
        "amount >",
        "",
        "color = NULL",
        "a = 1; DROP TABLE x",
        "(" * 200 + "a = 1" + ")" * 200,
        "a = " + "'x" * 3000 + "'",
    ):
        started = time.monotonic()
        status, got, _ = receive(v2, "SqlBad", group="SqlBadGroup", filter_type=d.SQL, expression=bad, polling_s=10)
        assert status.code == d.ILLEGAL_FILTER_EXPRESSION and not got, (bad[:40], status)
        assert "position" in status.message and time.monotonic() - started < 3
    # Nothing was popped for the group meanwhile.
    status, got, _ = receive(v2, "SqlBad", group="SqlBadGroup")
    assert status.code == d.OK and len(got) == 1
