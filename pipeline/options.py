"""Options of the "rocketmq" source and sink, parsed and validated without Spark.

Names follow Spark's Kafka source and apache/rocketmq-externals rocketmq-spark (``nameServer``,
``subExpression``, ``pullBatchSize`` ...) and are case-insensitive, as Spark's are. Every error
is an ``OptionError`` whose message names the option and says what is allowed.

| option | default | meaning |
|---|---|---|
| endpoints (alias nameServer) | required | broker gRPC endpoints ``host:port[;host:port]`` |
| subscribe (alias topic) | one of three | comma list of topics |
| subscribePattern | one of three | regular expression over whole topic names (non-system; new matches join later) |
| assign | one of three | ``{"T":{"broker":[0,1]}}`` |
| subExpression | ``*`` | tag filter ``TagA || TagB``, or an SQL92 condition with expressionType SQL92 |
| expressionType | TAG | TAG or SQL92: how subExpression reads |
| startingOffsets | latest (stream), earliest (batch) | earliest / latest / offsets JSON |
| startingTimestamp, startingOffsetsByTimestamp | — | epoch ms / ``{"T":{"broker":{"0":ms}}}``; before startingOffsets |
| endingOffsets | latest | batch only: latest / offsets JSON |
| endingTimestamp, endingOffsetsByTimestamp | — | batch only |
| failOnDataLoss | true | offsets below the earliest (retention) or a vanished queue fail the query |
| maxOffsetsPerTrigger | none | streaming admission control, split across queues |
| minPartitions | none | split queue ranges so there are at least this many partitions |
| pullMethod | records | records: PullRecords (raw records; PullMessage if the broker lacks it); messages: PullMessage |
| pullBatchSize | 1024 | records per PullRecords response / messages per PullMessage (1024 at most) |
| pullTimeoutMs | 120000 | gRPC deadline of one pull call |
| fetchOffset.numRetries, fetchOffset.retryIntervalMs | 3, 10 | retries of route / offset look-ups |
| consumerGroup | none | commit each finished micro-batch's end with UpdateOffset (lag dashboards) |
| topic (sink) | the ``topic`` column | sink: overrides the column |
| sendBatchSize (sink) | 256 | messages per SendMessage call |
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import overload

from pipeline.errors import OptionError
from pipeline.offsets import EARLIEST, LATEST, parse_assign, parse_offsets

log = logging.getLogger(__name__)

PULL_BATCH_DEFAULT = 1024  # measured: 1.5x the read rate of 256 (bench/spark_bench.py)
PULL_BATCH_MAX = 1024
PULL_TIMEOUT_MS_DEFAULT = 120_000
PULL_METHODS = ("records", "messages")
EXPRESSION_TYPES = ("TAG", "SQL92")
SEND_BATCH_DEFAULT = 256
SEND_BATCH_MAX = 1024


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _get(opts: dict[str, str], name: str, *aliases: str) -> str | None:
    found = [(n, opts[n.lower()]) for n in (name, *aliases) if n.lower() in opts]
    if len(found) > 1 and len({v for _, v in found}) > 1:
        raise OptionError(f"options {found[0][0]!r} and {found[1][0]!r} are aliases; set only one")
    return found[0][1] if found else None


def parse_bool(opts: dict[str, str], name: str, default: bool) -> bool:
    value = _get(opts, name)
    if value is None:
        return default
    if value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise OptionError(f"option {name!r} must be true or false, got {value!r}")


@overload
def parse_int(opts: dict[str, str], name: str, default: int, minimum: int = 1, maximum: int | None = None) -> int: ...


@overload
def parse_int(
    opts: dict[str, str], name: str, default: None, minimum: int = 1, maximum: int | None = None
) -> int | None: ...


def parse_int(
    opts: dict[str, str], name: str, default: int | None, minimum: int = 1, maximum: int | None = None
) -> int | None:
    value = _get(opts, name)
    if value is None:
        return default
    try:
        number = int(value.strip())
    except ValueError:
        raise OptionError(f"option {name!r} must be an integer, got {value!r}") from None
    if number < minimum or (maximum is not None and number > maximum):
        bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise OptionError(f"option {name!r} must be {bounds}, got {number}")
    return number


def parse_endpoints(opts: dict[str, str]) -> tuple[str, ...]:
    value = _get(opts, "endpoints", "nameServer")
    if value is None or not value.strip():
        raise OptionError("option 'endpoints' is required: the broker's gRPC address host:port[;host:port]")
    endpoints = tuple(e.strip() for e in value.replace(",", ";").split(";") if e.strip())
    for endpoint in endpoints:
        host, sep, port = endpoint.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise OptionError(f"option 'endpoints': {endpoint!r} is not host:port")
    return endpoints


@dataclass(frozen=True)
class SourceOptions:
    endpoints: tuple[str, ...]
    topics: tuple[str, ...]  # subscribe (sorted), or the topics of assign; () with a pattern
    assign: str | None  # the assign JSON (parsed against the route later)
    sub_expression: str
    starting_offsets: str  # "earliest" | "latest" | JSON
    starting_timestamp: int | None
    starting_offsets_by_timestamp: str | None
    ending_offsets: str  # "latest" | JSON (batch)
    ending_timestamp: int | None
    ending_offsets_by_timestamp: str | None
    fail_on_data_loss: bool
    max_offsets_per_trigger: int | None
    min_partitions: int | None
    pull_batch_size: int
    pull_timeout_ms: int
    fetch_retries: int
    fetch_retry_interval_ms: int
    consumer_group: str | None
    subscribe_pattern: str | None = None  # a regular expression over topic names (re.fullmatch)
    expression_type: str = "TAG"  # TAG | SQL92 (subExpression)
    pull_method: str = "records"  # records (PullRecords) | messages (PullMessage)


def parse_source_options(options: Mapping[str, str], streaming: bool) -> SourceOptions:
    """Validate the options of a read; ``streaming`` for readStream."""
    opts = _lower(options)
    endpoints = parse_endpoints(opts)
    subscribe = _get(opts, "subscribe", "topic")
    pattern = _get(opts, "subscribePattern")
    assign = _get(opts, "assign")
    given = [
        name
        for name, value in (("subscribe", subscribe), ("subscribePattern", pattern), ("assign", assign))
        if value is not None
    ]
    if len(given) != 1:
        raise OptionError(
            "exactly one of the options 'subscribe' (comma-separated topics), 'subscribePattern' "
            "(a regular expression over topic names) or 'assign' "
            '({"topic": {"brokerName": [queueIds]}}) must be set'
            + (f"; got {' and '.join(repr(g) for g in given)}" if given else "")
        )
    if subscribe is not None:
        topics = tuple(sorted({t.strip() for t in subscribe.split(",") if t.strip()}))
        if not topics:
            raise OptionError("option 'subscribe' lists no topic")
    elif pattern is not None:
        topics = ()
        check_pattern(pattern)
    else:
        assert assign is not None  # exactly one of the three is set (checked above)
        topics = tuple(sorted({q[0] for q in parse_assign(assign)}))
    kind = "a streaming" if streaming else "a batch"

    starting = _get(opts, "startingOffsets")
    if starting is None:
        starting = "latest" if streaming else "earliest"
    starting_word = starting.strip().lower()
    if starting_word not in ("earliest", "latest"):
        offsets = parse_offsets(starting, "startingOffsets")
        if not streaming and LATEST in offsets.values():
            raise OptionError("option 'startingOffsets': -1 (latest) is not allowed for a batch query")
    elif not streaming and starting_word == "latest":
        raise OptionError("option 'startingOffsets': 'latest' is not allowed for a batch query")
    else:
        starting = starting_word

    ending = _get(opts, "endingOffsets")
    ending_timestamp = parse_int(opts, "endingTimestamp", None, minimum=0)
    ending_by_ts = _get(opts, "endingOffsetsByTimestamp")
    if streaming and (ending is not None or ending_timestamp is not None or ending_by_ts is not None):
        raise OptionError(
            "options 'endingOffsets' / 'endingTimestamp' / 'endingOffsetsByTimestamp' apply to "
            "batch queries only, not to " + kind + " query"
        )
    ending = "latest" if ending is None else ending
    if ending.strip().lower() == "earliest":
        raise OptionError("option 'endingOffsets': 'earliest' is not allowed (use 'latest' or offsets JSON)")
    if ending.strip().lower() == "latest":
        ending = "latest"
    elif EARLIEST in parse_offsets(ending, "endingOffsets").values():
        raise OptionError("option 'endingOffsets': -2 (earliest) is not allowed")
    starting_by_ts = _get(opts, "startingOffsetsByTimestamp")
    for name, text in (("startingOffsetsByTimestamp", starting_by_ts), ("endingOffsetsByTimestamp", ending_by_ts)):
        if text is not None:
            parse_offsets(text, name, allow_special=False)

    max_per_trigger = parse_int(opts, "maxOffsetsPerTrigger", None)
    if max_per_trigger is not None and not streaming:
        log.warning("option 'maxOffsetsPerTrigger' is ignored by a batch query")
    expression_type = (_get(opts, "expressionType") or "TAG").strip().upper()
    if expression_type not in EXPRESSION_TYPES:
        raise OptionError(f"option 'expressionType' must be TAG or SQL92, got {expression_type!r}")
    sub_expression = check_expression(_get(opts, "subExpression"), expression_type)
    pull_method = (_get(opts, "pullMethod") or "records").strip().lower()
    if pull_method not in PULL_METHODS:
        raise OptionError(
            f"option 'pullMethod' must be 'records' (PullRecords) or 'messages' (PullMessage), got {pull_method!r}"
        )
    group = _get(opts, "consumerGroup")
    return SourceOptions(
        endpoints=endpoints,
        topics=topics,
        assign=assign,
        sub_expression=sub_expression,
        starting_offsets=starting,
        starting_timestamp=parse_int(opts, "startingTimestamp", None, minimum=0),
        starting_offsets_by_timestamp=starting_by_ts,
        ending_offsets=ending,
        ending_timestamp=ending_timestamp,
        ending_offsets_by_timestamp=ending_by_ts,
        fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
        max_offsets_per_trigger=max_per_trigger,
        min_partitions=parse_int(opts, "minPartitions", None),
        pull_batch_size=parse_int(opts, "pullBatchSize", PULL_BATCH_DEFAULT, maximum=PULL_BATCH_MAX),
        pull_timeout_ms=parse_int(opts, "pullTimeoutMs", PULL_TIMEOUT_MS_DEFAULT),
        fetch_retries=parse_int(opts, "fetchOffset.numRetries", 3, minimum=0),
        fetch_retry_interval_ms=parse_int(opts, "fetchOffset.retryIntervalMs", 10, minimum=0),
        consumer_group=group.strip() if group and group.strip() else None,
        subscribe_pattern=pattern,
        expression_type=expression_type,
        pull_method=pull_method,
    )


def check_pattern(pattern: str) -> re.Pattern[str]:
    """subscribePattern: Spark's Kafka source takes a Java regex matched against whole topic
    names; Python's ``re`` reads the common syntax the same way."""
    if not pattern.strip():
        raise OptionError("option 'subscribePattern' is empty")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise OptionError(f"option 'subscribePattern': {pattern!r} is not a valid regular expression ({exc})") from None


def check_expression(text: str | None, expression_type: str) -> str:
    """subExpression, validated as the broker would (a bad one fails before any read)."""
    if expression_type == "SQL92":
        from services.domain.sql_filter import SqlFilterError, compile_sql

        if text is None or not text.strip():
            raise OptionError("option 'subExpression' must be an SQL92 condition when expressionType is SQL92")
        try:
            compile_sql(text)
        except SqlFilterError as exc:
            raise OptionError(f"option 'subExpression': not an SQL92 condition: {exc}") from None
        return text
    expression = (text or "*").strip() or "*"
    if expression != "*" and not [t for t in expression.split("||") if t.strip()]:
        raise OptionError(f"option 'subExpression': {expression!r} is not a tag expression (TagA || TagB)")
    return expression


@dataclass(frozen=True)
class SinkOptions:
    endpoints: tuple[str, ...]
    topic: str | None  # overrides the topic column
    send_batch_size: int


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = _lower(options)
    topic = _get(opts, "topic")
    if topic is not None and not topic.strip():
        raise OptionError("option 'topic' is empty")
    return SinkOptions(
        endpoints=parse_endpoints(opts),
        topic=topic.strip() if topic else None,
        send_batch_size=parse_int(opts, "sendBatchSize", SEND_BATCH_DEFAULT, maximum=SEND_BATCH_MAX),
    )


@dataclass(frozen=True)
class StoreFileOptions:
    """Options of "rocketmq-commitlog" / "rocketmq-consumequeue"."""

    roots: tuple[tuple[str | None, str], ...]  # (brokerName or None, store root), in the order given
    from_offset: int | None
    to_offset: int | None
    verify_crc: bool
    fail_on_crc_error: bool
    split_size: int | None
    batch_rows: int
    topics: tuple[str, ...]
    delay_level_millis: tuple[int, ...]


def parse_store_roots(opts: dict[str, str]) -> tuple[tuple[str | None, str], ...]:
    """``path`` (``.load(root)``) or ``paths`` (``.load([root, ...])``: a JSON array, as Spark
    passes it), each named by ``brokerNames`` (comma list, one per root, in order). One root may
    go unnamed (its ``brokerName`` column is null: a store's files do not record their broker's
    name); several roots must be named, and distinctly, or their offsets could not be told apart."""
    import json

    path, paths = _get(opts, "path"), _get(opts, "paths")
    if path and paths:
        raise OptionError("options 'path' and 'paths' both set: .load() takes one root or a list of roots")
    if paths:
        try:
            roots = json.loads(paths)
        except ValueError:
            roots = None
        if not isinstance(roots, list) or not all(isinstance(r, str) and r for r in roots):
            raise OptionError(f"option 'paths' must be a JSON array of store roots, got {paths!r}")
    else:
        roots = [path] if path else []
    if not roots:
        raise OptionError(
            "option 'path' is required: a store root (with commitlog/ and consumequeue/) "
            "or its commitlog/ or consumequeue/ directory; .load(path) sets it, .load([path, ...]) reads several"
        )
    return pair_roots(roots, _get(opts, "brokerNames", "brokerName"))


def pair_roots(roots: list[str], names_text: str | None) -> tuple[tuple[str | None, str], ...]:
    """Each root with its name from ``names_text`` (the ``brokerNames`` comma list)."""
    if names_text is None:
        if len(roots) > 1:
            raise OptionError(
                f"option 'brokerNames' is required with {len(roots)} store roots: "
                "their broker names, comma-separated, in the order of the roots (broker-a,broker-b)"
            )
        return ((None, roots[0]),)
    names = [n.strip() for n in names_text.split(",")]
    if len(names) != len(roots) or not all(names):
        raise OptionError(
            f"option 'brokerNames' names {len(names)} brokers for {len(roots)} store roots: {names_text!r}"
        )
    if len(set(names)) != len(names):
        raise OptionError(f"option 'brokerNames' repeats a name: {names_text!r}")
    return tuple(zip(names, roots))


def parse_store_file_options(options: Mapping[str, str]) -> StoreFileOptions:
    opts = _lower(options)
    roots = parse_store_roots(opts)
    from_offset = parse_int(opts, "fromOffset", None, minimum=0)
    to_offset = parse_int(opts, "toOffset", None, minimum=0)
    if from_offset is not None and to_offset is not None and to_offset < from_offset:
        raise OptionError(f"option 'toOffset' ({to_offset}) is below 'fromOffset' ({from_offset})")
    if len(roots) > 1 and (from_offset is not None or to_offset is not None):
        raise OptionError("options 'fromOffset' / 'toOffset' are phy offsets of one CommitLog: read one store root")
    topics = _get(opts, "topics", "topic")
    from services.domain.delay_levels import DELAY_LEVELS_DEFAULT, parse_delay_levels

    levels = _get(opts, "delayLevels") or DELAY_LEVELS_DEFAULT
    try:
        delay_level_millis = parse_delay_levels(levels)
    except (KeyError, ValueError):
        raise OptionError(f"option 'delayLevels' must look like '1s 5s 10s 30s 1m ... 2h', got {levels!r}") from None
    return StoreFileOptions(
        roots=roots,
        from_offset=from_offset,
        to_offset=to_offset,
        verify_crc=parse_bool(opts, "verifyCrc", False),
        fail_on_crc_error=parse_bool(opts, "failOnCrcError", True),
        split_size=parse_int(opts, "splitSize", None, minimum=4096),
        batch_rows=parse_int(opts, "batchSize", 32_768, maximum=1 << 20),
        topics=tuple(sorted({t.strip() for t in topics.split(",") if t.strip()})) if topics else (),
        delay_level_millis=delay_level_millis,
    )
