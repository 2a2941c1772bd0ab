"""Fuzzing: random requests built from the proto descriptors, and the CommitLog record decoder.

``message_strategy(descriptor)`` walks ``DESCRIPTOR.fields`` and draws a message of that type:
every scalar type (huge, negative, out-of-range enum values included), strings with odd
unicode, control characters and separators, bytes, maps, repeated fields, nested messages (to
a depth), unset fields. Every MessagingService RPC gets such requests over gRPC against one
real store + broker (the streaming ones are read to the end under a short deadline). The
oracle: no exception escapes, the answer's code is in that RPC's allowed set (``ALLOWED``;
never INTERNAL_SERVER_ERROR nor gRPC UNKNOWN/INTERNAL), and the servers still answer a
health check afterwards.

CI runs a smoke (``PYRMQ_FUZZ_EXAMPLES``, default 12 examples per RPC); ``make fuzz`` sets it
to 2,000. The decoder fuzz feeds random, truncated and bit-flipped records to
``decode_record``: anything but a record, BLANK or ``CorruptRecord`` is a bug.

The remoting door: the frame decoder (``services.domain.remoting.command.decode``) gets random
bytes, random JSON headers and truncated or bit-flipped frames (nothing but ``FrameError`` may
escape) and encode/decode must round-trip; then every code the door serves
(``corpus_remoting.HEADERS``) gets random extFields (kept, dropped or replaced by strings,
numbers, booleans, nulls, huge values; JSON or binary headers; some oneway) and bodies over one
connection: each is answered (a oneway one never) with a known code and a remark naming no Python
exception, nothing logs an error, the door serves on and no record, topic or group goes away.
Codes that delete or rewrite stay off every existing name (``FENCE``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import struct
from typing import Any

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from google.protobuf.descriptor import FieldDescriptor as F
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.domain.format.commitlog_format import (
    BLANK,
    CorruptRecord,
    MessageRecord,
    decode_record,
    encode_record,
)
from services.domain.remoting.batch import encode_batch
from services.domain.remoting.codes import FLAG_ONEWAY, LanguageCode, RequestCode, ResponseCode
from services.domain.remoting.command import (
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    FrameError,
    RemotingCommand,
    frame_length,
    java_string,
)
from services.domain.remoting.command import decode as remoting_decode
from services.domain.remoting.command import encode as remoting_encode
from tests.badinput.corpus_remoting import HEADERS, Header, code_name
from tests.badinput.remoting_wire import FrameSocket, binary_frame, json_frame, next_opaque
from tests.support.badinput_cluster import GROUPS, TOPICS, Cluster
from tests.support.v2_requests import METADATA

EXAMPLES = int(os.environ.get("PYRMQ_FUZZ_EXAMPLES", "12"))
# Receives and pulls that pass validation long-poll: keep them short so the smoke stays fast.
BROKER_OVERRIDES = {"long_polling_timeout_ms_min": 100, "long_polling_timeout_ms_max": 300}
STREAM_DEADLINE_S = 3.0

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 50,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)

# -- values ---------------------------------------------------------------------------------------

ODD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "\t",
        "\x00",
        "\x01",
        "\x02",
        "|",
        "||",
        "*",
        "%RETRY%G1",
        "%DLQ%G1",
        "TBW102",
        "RMQ_SYS_TRACE_TOPIC",
        "rmq_sys_x",
        "SCHEDULE_TOPIC_XXXX",
        "CID_RMQ_SYS_TRANS",
        "UNIQ_KEY",
        "__CRC32#",
        "TopicTest",
        "G1",
        "a > 1",
        "a >",
        "\u202e",
        "\U0001f600" * 20,
        "\udfff".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
        "\u00e9" * 32,
        "t" * 127,
        "t" * 128,
        "g" * 120,
        "g" * 121,
        "x" * 16_385,
        "x" * 70_000,
    ]
)
NAMES = st.from_regex(r"[%|a-zA-Z0-9_-]{1,20}", fullmatch=True)
TEXT = st.one_of(
    st.text(max_size=40), ODD_TEXT, NAMES, st.text(alphabet=st.characters(max_codepoint=0x9F), max_size=10)
)
BYTES = st.one_of(st.binary(max_size=64), st.sampled_from([b"", b"\x00" * 1024, b"x" * ((4 << 20) + 1)]))
INT32 = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([0, -1, 1, 2**31 - 1, -(2**31)]))
INT64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.sampled_from([0, -1, 1, 2**63 - 1, -(2**63), 10_000, 253_402_300_800])
)
UINT32 = st.integers(0, 2**32 - 1)
UINT64 = st.integers(0, 2**64 - 1)
FLOAT = st.floats(allow_nan=True, allow_infinity=True, width=32)
DOUBLE = st.floats(allow_nan=True, allow_infinity=True)

SCALARS = {
    F.TYPE_STRING: TEXT,
    F.TYPE_BYTES: BYTES,
    F.TYPE_BOOL: st.booleans(),
    F.TYPE_INT32: INT32,
    F.TYPE_SINT32: INT32,
    F.TYPE_SFIXED32: INT32,
    F.TYPE_INT64: INT64,
    F.TYPE_SINT64: INT64,
    F.TYPE_SFIXED64: INT64,
    F.TYPE_UINT32: UINT32,
    F.TYPE_FIXED32: UINT32,
    F.TYPE_UINT64: UINT64,
    F.TYPE_FIXED64: UINT64,
    F.TYPE_FLOAT: FLOAT,
    F.TYPE_DOUBLE: DOUBLE,
}
MAX_DEPTH = 3


def _enum(field) -> st.SearchStrategy[int]:
    known = [v.number for v in field.enum_type.values]
    return st.one_of(st.sampled_from(known), INT32)  # proto3 keeps unknown enum values


def _value(field, depth: int) -> st.SearchStrategy:
    if field.type == F.TYPE_MESSAGE:
        return message_strategy(field.message_type, depth + 1)
    if field.type == F.TYPE_ENUM:
        return _enum(field)
    return SCALARS[field.type]


def _is_map(field) -> bool:
    return field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def _is_repeated(field) -> bool:
    return field.is_repeated


def message_strategy(descriptor, depth: int = 0) -> st.SearchStrategy:
    """Random messages of ``descriptor``'s type: each field unset or drawn from its type."""
    cls = GetMessageClass(descriptor)
    if depth >= MAX_DEPTH:
        return st.just(cls())
    optional: dict[str, st.SearchStrategy] = {}
    for field in descriptor.fields:
        if _is_map(field):
            key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            optional[field.name] = st.dictionaries(_value(key, depth), _value(value, depth), max_size=4)
        elif _is_repeated(field):
            optional[field.name] = st.lists(_value(field, depth), max_size=3)
        else:
            optional[field.name] = _value(field, depth)
    return st.fixed_dictionaries({}, optional=optional).map(lambda values: _build(cls, values))


def _build(cls, values: dict):
    message = cls()
    for name, value in values.items():
        field = cls.DESCRIPTOR.fields_by_name[name]
        target = (
            getattr(message, name) if (_is_map(field) or _is_repeated(field) or field.type == F.TYPE_MESSAGE) else None
        )
        if _is_map(field):
            for k, v in value.items():
                if field.message_type.fields_by_name["value"].type == F.TYPE_MESSAGE:
                    target[k].CopyFrom(v)
                else:
                    target[k] = v
        elif _is_repeated(field):
            target.extend(value)
        elif field.type == F.TYPE_MESSAGE:
            target.CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


# -- the oracle: what each RPC may answer ---------------------------------------------------------

C = d
COMMON = {C.OK, C.BAD_REQUEST, C.CLIENT_ID_REQUIRED, C.ILLEGAL_TOPIC, C.TOPIC_NOT_FOUND}
QUEUE = COMMON | {C.ILLEGAL_CONSUMER_GROUP}
HANDLE = QUEUE | {C.INVALID_RECEIPT_HANDLE}
ALLOWED: dict[str, set[int]] = {
    "QueryRoute": COMMON,
    "Heartbeat": {C.OK, C.CLIENT_ID_REQUIRED, C.UNRECOGNIZED_CLIENT_TYPE, C.ILLEGAL_CONSUMER_GROUP},
    "SendMessage": COMMON
    | {
        C.MULTIPLE_RESULTS,
        C.FORBIDDEN,
        C.ILLEGAL_MESSAGE_TAG,
        C.ILLEGAL_MESSAGE_KEY,
        C.ILLEGAL_MESSAGE_GROUP,
        C.ILLEGAL_MESSAGE_PROPERTY_KEY,
        C.ILLEGAL_MESSAGE_ID,
        C.ILLEGAL_DELIVERY_TIME,
        C.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        C.MESSAGE_CORRUPTED,
        C.MESSAGE_BODY_TOO_LARGE,
        C.MESSAGE_BODY_EMPTY,
        C.MESSAGE_PROPERTIES_TOO_LARGE,
        C.UNSUPPORTED,
        C.TOO_MANY_REQUESTS,
    },
    "QueryAssignment": QUEUE | {C.FORBIDDEN},
    "ReceiveMessage": QUEUE
    | {
        C.ILLEGAL_FILTER_EXPRESSION,
        C.ILLEGAL_INVISIBLE_TIME,
        C.ILLEGAL_POLLING_TIME,
        C.MESSAGE_NOT_FOUND,
        C.TOO_MANY_REQUESTS,
    },
    "AckMessage": HANDLE | {C.MULTIPLE_RESULTS},
    "ForwardMessageToDeadLetterQueue": HANDLE,
    "ChangeInvisibleDuration": HANDLE | {C.ILLEGAL_INVISIBLE_TIME},
    "EndTransaction": COMMON | {C.INVALID_TRANSACTION_ID},
    "NotifyClientTermination": {C.OK},
    "RecallMessage": COMMON | {C.ILLEGAL_DELIVERY_TIME, C.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
    "QueryOffset": COMMON,
    "PullMessage": QUEUE | {C.ILLEGAL_OFFSET, C.ILLEGAL_FILTER_EXPRESSION, C.ILLEGAL_POLLING_TIME, C.MESSAGE_NOT_FOUND},
    "UpdateOffset": QUEUE | {C.ILLEGAL_OFFSET},
    "GetOffset": QUEUE | {C.OFFSET_NOT_FOUND},
    "SyncLiteSubscription": COMMON
    | {C.ILLEGAL_CONSUMER_GROUP, C.ILLEGAL_LITE_TOPIC, C.LITE_SUBSCRIPTION_QUOTA_EXCEEDED, C.CLIENT_ID_REQUIRED},
}
PYTHON_EXCEPTION = re.compile(r"\b[A-Z][A-Za-z]*(Error|Exception): ")  # a remoting remark naming one is a bug
# gRPC-level refusals a random request may meet: a request beyond the receive limit.
GRPC_ALLOWED = {grpc.StatusCode.RESOURCE_EXHAUSTED}

SERVICE = s.DESCRIPTOR.services_by_name["MessagingService"]
UNARY = sorted(m.name for m in SERVICE.methods if not m.client_streaming and not m.server_streaming)
SERVER_STREAMING = sorted(m.name for m in SERVICE.methods if m.server_streaming and not m.client_streaming)
assert set(UNARY) | set(SERVER_STREAMING) | {"Telemetry"} == set(ALLOWED) | {"Telemetry"}

METADATA_CHOICES = st.sampled_from([METADATA, METADATA, METADATA, (), (("x-mq-client-id", ""),)])


def _request(name: str) -> st.SearchStrategy:
    return message_strategy(SERVICE.methods_by_name[name].input_type)


def _check(name: str, code) -> None:
    if isinstance(code, grpc.StatusCode):
        assert code in GRPC_ALLOWED, f"{name}: gRPC {code}"
    else:
        assert code in ALLOWED[name], f"{name}: {d.Code.Name(code) if code in d.Code.values() else code}"


@pytest.mark.parametrize("name", UNARY)
def test_fuzz_unary(cluster: Cluster, name: str) -> None:
    call = getattr(cluster.v2, name)

    @FUZZ
    @given(request=_request(name), metadata=METADATA_CHOICES)
    def run(request, metadata) -> None:
        try:
            code = call(request, metadata=metadata, timeout=10).status.code
        except grpc.RpcError as exc:
            code = exc.code()
        _check(name, code)

    run()
    assert cluster.healthy()


@pytest.mark.parametrize("name", SERVER_STREAMING)
def test_fuzz_streaming(cluster: Cluster, name: str) -> None:
    call = getattr(cluster.v2, name)

    @FUZZ
    @given(request=_request(name), metadata=METADATA_CHOICES)
    def run(request, metadata) -> None:
        try:
            replies = list(call(request, metadata=metadata, timeout=STREAM_DEADLINE_S))
        except grpc.RpcError as exc:
            _check(name, exc.code())
            return
        statuses = [r.status.code for r in replies if r.HasField("status")]
        assert len(statuses) == 1, replies  # one status element; the stream ended within the deadline
        _check(name, statuses[0])

    run()
    assert cluster.healthy()


def test_fuzz_telemetry(cluster: Cluster) -> None:
    @FUZZ
    @given(commands=st.lists(message_strategy(s.TelemetryCommand.DESCRIPTOR), max_size=3), metadata=METADATA_CHOICES)
    def run(commands, metadata) -> None:
        try:
            replies = list(cluster.v2.Telemetry(iter(commands), metadata=metadata, timeout=STREAM_DEADLINE_S))
        except grpc.RpcError as exc:
            # a settings command without publishing/subscription closes the call (as the proxy does)
            assert exc.code() in {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED}, exc
            return
        for reply in replies:
            assert reply.status.code not in (d.INTERNAL_SERVER_ERROR,), reply.status

    run()
    assert cluster.healthy()


# -- the CommitLog record decoder ------------------------------------------------------------------


def _record(body: bytes, topic: str, properties: dict[str, str]) -> bytes:
    return encode_record(
        MessageRecord(
            topic=topic,
            queue_id=1,
            body=body,
            properties=properties,
            born_host=(b"\x7f\x00\x00\x01", 5),
            store_host=(b"\x7f\x00\x00\x01", 6),
        ),
        prop_crc=True,
    )


RECORDS = st.builds(
    _record,
    st.binary(max_size=64),
    st.from_regex(r"[a-zA-Z0-9_%|-]{1,130}", fullmatch=True),
    st.dictionaries(
        st.from_regex(r"[A-Za-z_]{1,8}", fullmatch=True),
        st.text(alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=["Cs"]), max_size=20),
        max_size=4,
    ),
)


def _decode(data: bytes, check_crc: bool) -> None:
    try:
        result = decode_record(memoryview(data), 0, len(data), check_crc=check_crc)
    except CorruptRecord:
        return
    assert result is BLANK or isinstance(result, MessageRecord)


@settings(max_examples=max(200, EXAMPLES * 20), deadline=None, derandomize=EXAMPLES <= 50)
@given(data=st.binary(max_size=512), check_crc=st.booleans())
def test_decoder_random_bytes(data: bytes, check_crc: bool) -> None:
    _decode(data, check_crc)


@settings(max_examples=max(200, EXAMPLES * 20), deadline=None, derandomize=EXAMPLES <= 50)
@given(record=RECORDS, cut=st.integers(0, 10_000), check_crc=st.booleans())
def test_decoder_truncated_records(record: bytes, cut: int, check_crc: bool) -> None:
    _decode(record[: cut % (len(record) + 1)], check_crc)


@settings(max_examples=max(200, EXAMPLES * 20), deadline=None, derandomize=EXAMPLES <= 50)
@given(record=RECORDS, flips=st.lists(st.integers(0, 2**20), min_size=1, max_size=4), check_crc=st.booleans())
def test_decoder_bit_flipped_records(record: bytes, flips: list[int], check_crc: bool) -> None:
    data = bytearray(record)
    for bit in flips:
        bit %= len(data) * 8
        data[bit // 8] ^= 1 << (bit % 8)
    _decode(bytes(data), check_crc)


@pytest.mark.parametrize(
    "field,value", [("total size", 2**31 - 1), ("total size", -1), ("body length", 2**31 - 1), ("body length", -5)]
)
def test_decoder_lying_lengths(field: str, value: int) -> None:
    data = bytearray(_record(b"hello", "T", {"a": "b"}))
    struct.pack_into(">i", data, 0 if field == "total size" else 84, value)
    _decode(bytes(data), True)


def test_decoder_many_random_records_quickly() -> None:
    """No input makes the decoder slow (a hang would show here as a timeout)."""
    rng = random.Random(1)
    base = _record(b"x" * 100, "TopicTest", {"KEYS": "k", "TAGS": "t"})
    for _ in range(20_000):
        data = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        _decode(bytes(data[: rng.randint(0, len(data))]), rng.random() < 0.5)


# -- the remoting frame decoder ------------------------------------------------------------------

SHORT_TEXT = st.one_of(st.text(max_size=20), ODD_TEXT.filter(lambda t: len(t) < 200))
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and Infinity too: Python's json reads them
    SHORT_TEXT,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)
HEADER_KEYS = st.sampled_from(["code", "opaque", "flag", "version", "language", "remark", "extFields"])
JSON_HEADERS = st.one_of(
    JSON_VALUES,
    st.dictionaries(st.one_of(HEADER_KEYS, SHORT_TEXT), JSON_VALUES, max_size=8),
    st.fixed_dictionaries(
        {"code": st.one_of(st.integers(), JSON_VALUES)},
        optional={
            "opaque": JSON_VALUES,
            "flag": JSON_VALUES,
            "extFields": st.one_of(st.dictionaries(TEXT, JSON_SCALARS, max_size=6), JSON_VALUES),
            "language": JSON_VALUES,
        },
    ),
)
LANGUAGES = st.sampled_from([code.name for code in LanguageCode])
TEXT_NO_EMPTY = SHORT_TEXT.filter(bool)
DECODER_FUZZ = settings(max_examples=max(100, EXAMPLES * 8), deadline=None, derandomize=EXAMPLES <= 50)


def _decoded(frame: bytes) -> RemotingCommand | None:
    """decode's one allowed failure is FrameError; what it returns is a well-formed command."""
    try:
        command = remoting_decode(frame)
    except FrameError:
        return None
    assert isinstance(command.code, int) and isinstance(command.opaque, int) and isinstance(command.flag, int)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in command.ext_fields.items())
    assert command.remark is None or isinstance(command.remark, str)
    return command


@DECODER_FUZZ
@given(data=st.binary(max_size=512))
def test_remoting_decode_random_bytes(data: bytes) -> None:
    _decoded(data)


@DECODER_FUZZ
@given(header=JSON_HEADERS, body=st.binary(max_size=16), serialize=st.sampled_from([0, 0, 1, 2, 0x80]))
def test_remoting_decode_json_headers(header: object, body: bytes, serialize: int) -> None:
    data = json.dumps(header).encode()
    _decoded(struct.pack(">I", (serialize << 24) | len(data)) + data + body)


def _commands(binary: bool) -> st.SearchStrategy[RemotingCommand]:
    short = st.integers(-(2**15), 2**15 - 1)
    return st.builds(
        RemotingCommand,
        code=st.integers(0, 2**15 - 1) if binary else st.integers(-(2**31), 2**31 - 1),  # binary: read unsigned
        opaque=st.integers(-(2**31), 2**31 - 1),
        flag=st.integers(-(2**31), 2**31 - 1),
        ext_fields=st.dictionaries(TEXT_NO_EMPTY, TEXT_NO_EMPTY, max_size=6),
        body=st.binary(max_size=64),
        remark=st.one_of(st.none(), TEXT_NO_EMPTY),
        language=LANGUAGES,
        version=short,
        serialize_type=st.just(SERIALIZE_ROCKETMQ if binary else SERIALIZE_JSON),
    )


@DECODER_FUZZ
@given(command=st.one_of(_commands(False), _commands(True)))
def test_remoting_encode_decode_round_trip(command: RemotingCommand) -> None:
    frame = remoting_encode(command)
    assert frame_length(frame) == len(frame) - 4
    assert remoting_decode(frame[4:]) == command


@DECODER_FUZZ
@given(
    command=st.one_of(_commands(False), _commands(True)),
    cut=st.integers(0, 10_000),
    flips=st.lists(st.integers(0, 2**20), max_size=4),
)
def test_remoting_decode_truncated_and_flipped(command: RemotingCommand, cut: int, flips: list[int]) -> None:
    data = bytearray(remoting_encode(command)[4:])
    for bit in flips:
        bit %= len(data) * 8
        data[bit // 8] ^= 1 << (bit % 8)
    _decoded(bytes(data[: cut % (len(data) + 1)]))


# -- the remoting door: random headers and bodies for every code it serves -----------------------

# Numbers beyond their field's Java type too: the door refuses them naming the field.
JAVA_INT = st.integers(-(2**31), 2**31 - 1)
JAVA_LONG = st.integers(-(2**63), 2**63 - 1)
HUGE_TEXT = st.sampled_from(["x" * 70_000, "9" * 40, "-" + "1" * 30])
EXT_VALUES = st.one_of(TEXT, st.booleans(), st.none(), JAVA_INT, st.floats(), HUGE_TEXT)
FENCE: set[str] = set()  # names a destructive code's fuzz must not touch: every topic and group there is


def _fenced(value: object) -> bool:
    """A value the door reads as an existing name (True as "true", 5 as "5")."""
    return isinstance(value, (str, bool, int, float)) and java_string(value) in FENCE


def _ext_value(header: Header, name: str, fenced: bool) -> st.SearchStrategy[object]:
    if name in header.ints or name in header.longs:
        number = JAVA_INT if name in header.ints else JAVA_LONG
        values = st.one_of(number, number.map(str), EXT_VALUES)
    else:
        values = EXT_VALUES.filter(lambda v: not _fenced(v)) if fenced else EXT_VALUES
    return st.one_of(values, st.integers(2**31, 2**70), st.integers(-(2**70), -(2**31) - 1))


def _ext_fields(header: Header) -> st.SearchStrategy[dict[str, object]]:
    """Each field of the code's header kept, replaced or dropped, and up to two unknown ones."""
    fields = {name: st.one_of(st.just(value), _ext_value(header, name, header.destructive))
              for name, value in header.base.items()}  # fmt: skip
    extra = st.dictionaries(TEXT, EXT_VALUES.filter(lambda v: not _fenced(v)), max_size=2)
    return st.tuples(st.fixed_dictionaries({}, optional=fields), extra).map(lambda parts: {**parts[1], **parts[0]})


def _json_body(code: int) -> st.SearchStrategy[bytes]:
    fenced = TEXT.filter(lambda v: not _fenced(v))
    body: st.SearchStrategy[Any]
    if code in (RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ):
        item = st.one_of(JSON_VALUES, st.fixed_dictionaries({"topic": TEXT, "brokerName": TEXT, "queueId": JAVA_INT}))
        body = st.fixed_dictionaries({}, optional={"consumerGroup": TEXT, "clientId": TEXT, "onlyThisBroker": JSON_VALUES,
                                                   "mqSet": st.one_of(st.lists(item, max_size=4), EXT_VALUES)})  # fmt: skip
    elif code == RequestCode.CHECK_CLIENT_CONFIG:
        sub = st.dictionaries(st.sampled_from(["expressionType", "subString", "topic"]), JSON_SCALARS, max_size=3)
        body = st.fixed_dictionaries({}, optional={"subscriptionData": st.one_of(sub, EXT_VALUES), "group": TEXT})
    elif code == RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP:
        body = st.dictionaries(st.sampled_from(["groupName", "retryMaxTimes", "consumeMessageOrderly", "attributes",
                                                "groupRetryPolicy", "consumeEnable"]), JSON_VALUES, max_size=4).map(
            lambda d: {} if _fenced(d.get("groupName")) else d)  # fmt: skip
        return st.one_of(body.map(lambda d: json.dumps(d).encode()), st.binary(max_size=32), fenced.map(str.encode))
    elif code == RequestCode.HEART_BEAT:
        sub = st.fixed_dictionaries({}, optional={"topic": TEXT, "subString": TEXT, "expressionType": TEXT,
                                                  "subVersion": JSON_SCALARS, "tagsSet": JSON_VALUES})  # fmt: skip
        consumer = st.fixed_dictionaries({}, optional={"groupName": TEXT, "consumeType": JSON_SCALARS,
                                                       "messageModel": JSON_SCALARS, "consumeFromWhere": JSON_SCALARS,
                                                       "subscriptionDataSet": st.lists(sub, max_size=2)})  # fmt: skip
        body = st.fixed_dictionaries({}, optional={"clientID": st.one_of(TEXT, JSON_SCALARS),
                                                   "consumerDataSet": st.lists(consumer, max_size=2),
                                                   "producerDataSet": st.lists(JSON_VALUES, max_size=2)})  # fmt: skip
    else:
        body = JSON_VALUES
    return body.map(lambda value: json.dumps(value).encode())


def _body(code: int, header: Header) -> st.SearchStrategy[bytes]:
    if code == RequestCode.SEND_BATCH_MESSAGE:
        batches = st.lists(st.tuples(JAVA_INT, st.binary(max_size=32), st.dictionaries(NAMES, NAMES, max_size=2)),
                           max_size=3).map(encode_batch)  # fmt: skip
        return st.one_of(st.just(header.body), batches, st.binary(max_size=64), batches.map(lambda b: b[:-3]))
    return st.one_of(st.just(header.body), st.just(b""), st.binary(max_size=64), _json_body(code))


def _remoting_request(code: int) -> st.SearchStrategy[tuple[bytes, int, bool]]:
    """(frame, opaque, oneway): a JSON header (JSON scalars in extFields, as ali-ons sends) or a
    binary one (every value a string)."""
    header = HEADERS[code]

    def build(ext: dict[str, object], body: bytes, binary: bool, oneway: bool) -> tuple[bytes, int, bool]:
        if code in (RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE):
            try:  # a held pull waits up to suspendTimeoutMillis (30 s at most): keep each example short
                if int(java_string(ext["suspendTimeoutMillis"]).strip()) > 50:
                    ext["suspendTimeoutMillis"] = "50"
            except (KeyError, ValueError):
                pass
        if code == RequestCode.POP_MESSAGE:
            try:  # a pop long-polls up to pollTime: keep each example short
                if int(java_string(ext["pollTime"]).strip()) > 50:
                    ext["pollTime"] = "50"
            except (KeyError, ValueError):
                pass
        opaque = next_opaque()
        flag = FLAG_ONEWAY if oneway else 0
        if binary:  # int16 key lengths: a longer key cannot travel in a binary header
            fields = {k: java_string(v) for k, v in ext.items() if v is not None and len(k.encode()) < 2**15}
            return binary_frame(code, fields, opaque, body, flag), opaque, oneway
        return json_frame({"code": code, "opaque": opaque, "flag": flag, "extFields": ext}, body), opaque, oneway

    return st.builds(
        build, _ext_fields(header), _body(code, header), st.booleans(), st.sampled_from([False] * 5 + [True])
    )


def _grown(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Nothing accepted is lost: no record, topic or group went away."""
    assert after["puts"][0] >= before["puts"][0] and after["puts"][1] >= before["puts"][1], (
        before["puts"],
        after["puts"],
    )
    assert set(before["topics"]) <= set(after["topics"]), set(before["topics"]) - set(after["topics"])
    assert set(before["groups"]) <= set(after["groups"]), set(before["groups"]) - set(after["groups"])


@pytest.mark.parametrize("code", sorted(HEADERS), ids=code_name)
def test_fuzz_remoting(cluster: Cluster, caplog: pytest.LogCaptureFixture, code: int) -> None:
    """Random extFields and bodies for one code: every request is answered (a oneway one never),
    with a known code and a remark that is no Python exception, nothing in the broker logs an
    error, the door serves on, and nothing stored goes away."""
    before = cluster.snapshot()
    FENCE.clear()
    FENCE.update(before["topics"], before["groups"], TOPICS, GROUPS)
    conn = [FrameSocket(cluster.remoting_address)]
    known = {c.value for c in ResponseCode}

    @settings(FUZZ, max_examples=max(4, EXAMPLES // 2))
    @given(request=_remoting_request(code))
    def run(request: tuple[bytes, int, bool]) -> None:
        frame, opaque, oneway = request
        caplog.clear()
        conn[0].send(frame)
        if oneway:
            assert conn[0].probe() == ResponseCode.SUCCESS
            assert [c for c in conn[0].skipped if c.opaque == opaque] == []
        else:
            answer = conn[0].answer(opaque, 20)
            assert answer is not None, "the door closed the connection on a well-formed frame"
            assert answer.code in known, answer
            assert not PYTHON_EXCEPTION.search(answer.remark or ""), answer.remark
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == [], errors

    try:
        run()
        assert conn[0].probe() == ResponseCode.SUCCESS
    finally:
        conn[0].close()
    with FrameSocket(cluster.remoting_address) as fresh:
        assert fresh.probe() == ResponseCode.SUCCESS
    _grown(before, cluster.snapshot())
    assert cluster.healthy()
