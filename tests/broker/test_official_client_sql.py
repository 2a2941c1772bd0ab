"""The official rocketmq-python-client 5.1.2 consumers with SQL92 filters (FilterType.SQL),
unchanged, against the real store and broker. Clients run in subprocesses (see
test_official_consumer.py): send.py produces, consume.py consumes with ``filter_type="SQL"``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.official_client import CLIENT_TIMEOUT_S, CONSUME_SCRIPT, consume, produce
from tests.support.store_reads import wait_dispatched

pytestmark = pytest.mark.needs("rocketmq-python-client")

ORDERS = [
    {"body": "small-red", "tag": "TagA", "properties": {"amount": "3", "color": "red"}},
    {"body": "big-red", "tag": "TagA", "properties": {"amount": "50", "color": "red"}},
    {"body": "big-blue", "tag": "TagB", "properties": {"amount": "70", "color": "blue"}},
    {"body": "no-amount", "tag": "TagB", "properties": {"color": "red"}},
    {"body": "huge-red", "tag": "TagB", "properties": {"amount": "900", "color": "red"}},
]


def test_simple_consumer_receives_only_matching_messages(make_broker, store_stub, topics, tmp_path):
    broker = make_broker(long_polling_timeout_ms_min=1_000)  # the empty consume below polls 1 s, not 5 s
    topics("ClientSqlTopic")
    endpoint = f"127.0.0.1:{broker.port}"
    produce(tmp_path, endpoint, "ClientSqlTopic", ORDERS)
    wait_dispatched(store_stub, "ClientSqlTopic", len(ORDERS))  # a pop filters what is dispatched by then
    got = consume(
        tmp_path,
        endpoint,
        group="ClientSqlGroup",
        topic="ClientSqlTopic",
        filter_type="SQL",
        expression="amount > 10 AND color = 'red'",
        count=2,
        deadline_s=30,
        await_s=5,
        action="ack",
    )
    assert sorted(m["body"] for m in got) == ["big-red", "huge-red"]
    assert all(m["acked"] is True and m["attempt"] == 1 for m in got), got
    assert next(m for m in got if m["body"] == "huge-red")["properties"] == {"amount": "900", "color": "red"}
    # The non-matching ones were finished for the group: a match-all consumer of it gets nothing
    # (left in their queues, its first receive would have them).
    assert (
        consume(tmp_path, endpoint, group="ClientSqlGroup", topic="ClientSqlTopic", count=1, deadline_s=2, await_s=1)
        == []
    )


def test_push_consumer_with_sql_filter(broker, topics, tmp_path):
    topics("ClientSqlPush")
    endpoint = f"127.0.0.1:{broker.port}"
    produce(tmp_path, endpoint, "ClientSqlPush", ORDERS)
    got = consume(
        tmp_path,
        endpoint,
        mode="push",
        group="ClientSqlPushGroup",
        topic="ClientSqlPush",
        filter_type="SQL",
        expression="TAGS = 'TagB' AND (amount IS NULL OR amount BETWEEN 60 AND 80)",
        count=2,
        deadline_s=40,
    )
    assert sorted(m["body"] for m in got) == ["big-blue", "no-amount"]


def test_bad_sql_expression_is_refused_with_illegal_filter_expression(broker, topics, tmp_path):
    topics("ClientSqlTopicBad")
    job = {
        "endpoint": f"127.0.0.1:{broker.port}",
        "group": "ClientSqlBad",
        "topic": "ClientSqlTopicBad",
        "filter_type": "SQL",
        "expression": "amount >",
        "count": 1,
        "deadline_s": 1,  # each receive is refused at once: a second of them is plenty
        "await_s": 2,
    }
    produce(tmp_path, job["endpoint"], "ClientSqlTopicBad", [{"body": "x"}])
    env = dict(os.environ, HOME=str(tmp_path), PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, str(CONSUME_SCRIPT), json.dumps(job)],
        capture_output=True,
        text=True,
        env=env,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert done.returncode == 0, f"consumer failed:\n{done.stdout}\n{done.stderr}"
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    errors = [line for line in lines if "receive_error" in line]
    assert errors and not [line for line in lines if "body" in line], lines
    assert all(e["code"] == 40010 for e in errors), errors  # ILLEGAL_FILTER_EXPRESSION
