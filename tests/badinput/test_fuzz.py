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
"""

from __future__ import annotations

import os
import random
import struct

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
from tests.support.badinput_cluster import Cluster
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
