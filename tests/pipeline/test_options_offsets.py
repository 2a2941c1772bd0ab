"""Option parsing/validation, offset JSON and the proportional rate limit (no Spark)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import OptionError
from pipeline.offsets import (
    ANY_BROKER,
    canonical,
    from_nested,
    parse_assign,
    parse_offsets,
    rate_limit,
    resolve_brokers,
    to_json,
)
from pipeline.options import parse_sink_options, parse_source_options, parse_store_file_options

BASE = {"endpoints": "127.0.0.1:8081", "subscribe": "T1,T2"}


def test_defaults_batch_and_stream():
    batch = parse_source_options(BASE, streaming=False)
    assert batch.topics == ("T1", "T2") and batch.starting_offsets == "earliest" and batch.ending_offsets == "latest"
    assert batch.fail_on_data_loss and batch.sub_expression == "*" and batch.pull_batch_size == 1024
    stream = parse_source_options(BASE, streaming=True)
    assert stream.starting_offsets == "latest" and stream.max_offsets_per_trigger is None


def test_names_are_case_insensitive_and_aliases_work():
    opts = parse_source_options(
        {
            "NAMESERVER": "h:1",
            "Topic": "A",
            "MAXOFFSETSPERTRIGGER": "5",
            "failondataloss": "FALSE",
            "consumerGroup": "g",
        },
        streaming=True,
    )
    assert opts.endpoints == ("h:1",) and opts.topics == ("A",) and opts.max_offsets_per_trigger == 5
    assert not opts.fail_on_data_loss and opts.consumer_group == "g"


def test_pattern_filter_and_pull_method_options():
    opts = parse_source_options(
        {
            "endpoints": "h:1",
            "subscribePattern": "Orders-.*",
            "expressionType": "sql92",
            "subExpression": "amount > 5",
            "PULLMETHOD": "Messages",
        },
        streaming=True,
    )
    assert opts.subscribe_pattern == "Orders-.*" and opts.topics == ()
    assert opts.expression_type == "SQL92" and opts.sub_expression == "amount > 5" and opts.pull_method == "messages"
    defaults = parse_source_options(BASE, streaming=True)
    assert (
        defaults.pull_method == "records" and defaults.expression_type == "TAG" and defaults.subscribe_pattern is None
    )


@pytest.mark.parametrize(
    "options, streaming, message",
    [
        ({"subscribe": "T"}, False, "'endpoints' is required"),
        ({"endpoints": "nohost", "subscribe": "T"}, False, "'endpoints'"),
        ({"endpoints": "h:1"}, False, "exactly one of the options 'subscribe'"),
        ({**BASE, "assign": '{"T":[0]}'}, False, "exactly one of the options 'subscribe'"),
        ({**BASE, "startingOffsets": "latest"}, False, "'startingOffsets': 'latest' is not allowed for a batch"),
        ({**BASE, "startingOffsets": '{"T1":{"b":{"0":-1}}}'}, False, "-1 \\(latest\\) is not allowed"),
        ({**BASE, "endingOffsets": "earliest"}, False, "'endingOffsets': 'earliest' is not allowed"),
        ({**BASE, "endingOffsets": '{"T1":{"b":{"0":-2}}}'}, False, "-2 \\(earliest\\) is not allowed"),
        ({**BASE, "endingOffsets": "latest"}, True, "batch queries only"),
        ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "'maxOffsetsPerTrigger' must be >= 1"),
        ({**BASE, "maxOffsetsPerTrigger": "ten"}, True, "'maxOffsetsPerTrigger' must be an integer"),
        ({**BASE, "failOnDataLoss": "maybe"}, True, "'failOnDataLoss' must be true or false"),
        ({**BASE, "pullBatchSize": "5000"}, True, "'pullBatchSize' must be in \\[1, 1024\\]"),
        ({**BASE, "startingOffsets": "{oops"}, True, "'startingOffsets': not valid JSON"),
        ({**BASE, "subscribePattern": "T.*"}, True, "exactly one of .* got 'subscribe' and 'subscribePattern'"),
        ({"endpoints": "h:1", "subscribePattern": "T(["}, True, "'subscribePattern': 'T\\(\\[' is not a valid regular"),
        ({"endpoints": "h:1", "subscribePattern": " "}, True, "'subscribePattern' is empty"),
        ({**BASE, "expressionType": "SQL"}, True, "'expressionType' must be TAG or SQL92"),
        ({**BASE, "expressionType": "SQL92"}, True, "'subExpression' must be an SQL92 condition"),
        ({**BASE, "expressionType": "sql92", "subExpression": "a > 'x'"}, True, "'subExpression': not an SQL92"),
        ({**BASE, "subExpression": "||"}, True, "'subExpression': '\\|\\|' is not a tag expression"),
        ({**BASE, "pullMethod": "fast"}, True, "'pullMethod' must be 'records'"),
        ({"endpoints": "h:1", "subscribe": "A", "topic": "B"}, True, "aliases"),
    ],
)
def test_validation_errors_name_the_option(options, streaming, message):
    with pytest.raises(OptionError, match=message):
        parse_source_options(options, streaming)


def test_sink_and_store_file_options():
    sink = parse_sink_options({"endpoints": "h:1", "topic": "T", "sendBatchSize": "10"})
    assert sink.topic == "T" and sink.send_batch_size == 10
    with pytest.raises(OptionError, match="'sendBatchSize'"):
        parse_sink_options({"endpoints": "h:1", "sendBatchSize": "0"})
    files = parse_store_file_options({"path": "/s", "verifyCrc": "true", "splitSize": "65536"})
    assert files.verify_crc and files.split_size == 65536 and files.fail_on_crc_error
    with pytest.raises(OptionError, match="'path' is required"):
        parse_store_file_options({})
    with pytest.raises(OptionError, match="'toOffset'"):
        parse_store_file_options({"path": "/s", "fromOffset": "10", "toOffset": "5"})
    with pytest.raises(OptionError, match="'delayLevels'"):
        parse_store_file_options({"path": "/s", "delayLevels": "1x"})


def test_several_store_roots_and_their_broker_names():
    """.load([a, b]) arrives as option 'paths', a JSON array; each root needs its broker name."""
    assert parse_store_file_options({"path": "/s"}).roots == ((None, "/s"),)
    assert parse_store_file_options({"path": "/s", "brokerName": "broker-b"}).roots == (("broker-b", "/s"),)
    two = parse_store_file_options({"paths": '["/a", "/b/store"]', "BROKERNAMES": "broker-a, broker-b"})
    assert two.roots == (("broker-a", "/a"), ("broker-b", "/b/store"))
    with pytest.raises(OptionError, match="'brokerNames' is required with 2 store roots"):
        parse_store_file_options({"paths": '["/a", "/b"]'})
    with pytest.raises(OptionError, match="names 1 brokers for 2 store roots"):
        parse_store_file_options({"paths": '["/a", "/b"]', "brokerNames": "broker-a"})
    with pytest.raises(OptionError, match="repeats a name"):
        parse_store_file_options({"paths": '["/a", "/b"]', "brokerNames": "broker-a,broker-a"})
    with pytest.raises(OptionError, match="'paths' must be a JSON array"):
        parse_store_file_options({"paths": "/a,/b"})
    with pytest.raises(OptionError, match="phy offsets of one CommitLog"):
        parse_store_file_options({"paths": '["/a", "/b"]', "brokerNames": "a,b", "fromOffset": "0"})


# -- offsets JSON ----------------------------------------------------------------------------------


def test_three_and_two_level_json():
    three = parse_offsets('{"T":{"broker-a":{"0":5,"1":-2},"broker-b":{"0":-1}}}', "startingOffsets")
    assert three == {("T", "broker-a", 0): 5, ("T", "broker-a", 1): -2, ("T", "broker-b", 0): -1}
    two = parse_offsets('{"T":{"0":5,"3":7}}', "startingOffsets")
    assert two == {("T", ANY_BROKER, 0): 5, ("T", ANY_BROKER, 3): 7}
    assert resolve_brokers(two, {"T": ["broker-a"]}, "startingOffsets") == {
        ("T", "broker-a", 0): 5,
        ("T", "broker-a", 3): 7,
    }
    with pytest.raises(OptionError, match="2 brokers"):
        resolve_brokers(two, {"T": ["a", "b"]}, "startingOffsets")


@pytest.mark.parametrize(
    "text, message",
    [
        ("[1]", "expected a JSON object"),
        ('{"T":{}}', "non-empty"),
        ('{"T":{"x":1}}', "queue id 'x'"),
        ('{"T":{"b":{"0":-3}}}', "offset -3 is negative"),
        ('{"T":{"b":{"0":"5"}}}', "not an integer"),
        ('{"T":{"b":{}}}', "lists no queue"),
    ],
)
def test_bad_offsets_json(text, message):
    with pytest.raises(OptionError, match=message):
        parse_offsets(text, "startingOffsets")
    with pytest.raises(OptionError, match="-1|-2|negative"):
        parse_offsets('{"T":{"b":{"0":-1}}}', "startingOffsetsByTimestamp", allow_special=False)


def test_canonical_order_is_numeric_and_sorted():
    offsets = {("B", "x", 10): 1, ("A", "z", 2): 2, ("A", "a", 10): 3, ("A", "a", 9): 4}
    text = to_json(offsets)
    assert text == '{"A": {"a": {"9": 4, "10": 3}, "z": {"2": 2}}, "B": {"x": {"10": 1}}}'
    assert from_nested(json.loads(text)) == offsets
    assert to_json(dict(reversed(list(offsets.items())))) == text
    assert list(canonical(offsets)) == ["A", "B"]


def test_assign():
    assert parse_assign('{"T":{"b":[1,0]},"S":[2]}') == [("S", ANY_BROKER, 2), ("T", "b", 0), ("T", "b", 1)]
    with pytest.raises(OptionError, match="queue ids"):
        parse_assign('{"T":{"b":[-1]}}')


# -- rate limit ------------------------------------------------------------------------------------


def test_rate_limit_examples():
    q = [("T", "b", i) for i in range(3)]
    start = dict.fromkeys(q, 0)
    assert rate_limit(start, {q[0]: 10, q[1]: 0, q[2]: 0}, 4) == {q[0]: 4, q[1]: 0, q[2]: 0}
    # 1 each, then 7 shared 99:0:9 -> 6.4 + 0.6: the larger remainder gets the leftover
    assert rate_limit(start, {q[0]: 100, q[1]: 1, q[2]: 10}, 10) == {q[0]: 7, q[1]: 1, q[2]: 2}
    assert rate_limit(start, {q[0]: 5, q[1]: 5, q[2]: 5}, 100) == {q[0]: 5, q[1]: 5, q[2]: 5}
    assert rate_limit(start, {q[0]: 5, q[1]: 9, q[2]: 5}, 2) == {q[0]: 1, q[1]: 1, q[2]: 0}


@settings(max_examples=300, deadline=None)
@given(
    backlogs=st.lists(st.integers(0, 1000), min_size=1, max_size=12),
    limit=st.integers(1, 3000),
    base=st.integers(0, 10**12),
)
def test_rate_limit_properties(backlogs, limit, base):
    queues = [("T", "b", i) for i in range(len(backlogs))]
    start = {q: base for q in queues}
    end = {q: base + n for q, n in zip(queues, backlogs)}
    got = rate_limit(start, end, limit)
    advance = {q: got[q] - start[q] for q in queues}
    assert all(0 <= advance[q] <= end[q] - start[q] for q in queues)
    assert sum(advance.values()) == min(limit, sum(backlogs))
    waiting = [q for q in queues if end[q] > start[q]]
    if limit >= len(waiting):
        assert all(advance[q] >= 1 for q in waiting)
