"""Our `apache.rocketmq.v2` schema against the one compiled into the official Python client.

protos/apache/rocketmq/v2/{definition,service}.proto are our transcription of apache/rocketmq-apis.
What must match is not the upstream text but what the peers speak, so the reference here is the
descriptors shipped in the rocketmq-python-client wheel (`rocketmq/grpc_protocol/definition_pb2.py`
and `service_pb2.py`, generated from files named plain `definition.proto` / `service.proto`).

Both sets of stubs register the same `apache.rocketmq.v2.*` symbols in protobuf's default descriptor
pool, and the second registration fails with "duplicate symbol", so the client's stubs and ours can
never live in one process. The client side therefore always runs in a subprocess:

* it hands back its serialized FileDescriptorProtos (base64); we load them into a fresh
  `DescriptorPool` and compare them with ours message by message, field by field (name, number,
  type, label, `optional`, oneof, map key/value types), enum by enum and method by method;
* it parses bytes written by our classes and re-encodes the same values with its own classes, and
  both directions must agree field for field.

The only differences allowed are the two additions of rocketmq-apis HEAD over the client's snapshot,
`Settings.client_properties` (9, map<string, string>) and `Code.INVALID_CLIENT_PROPERTIES` (40021).
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from google.protobuf import descriptor_pb2, descriptor_pool, duration_pb2, json_format, timestamp_pb2
from google.protobuf.timestamp_pb2 import Timestamp

from tests.support.v2_samples import consumer_settings, delivered_message, producer_settings, send_request

pytestmark = pytest.mark.needs("rocketmq-python-client")

PACKAGE = "apache.rocketmq.v2"
CLIENT_MODULES = ("rocketmq.grpc_protocol.definition_pb2", "rocketmq.grpc_protocol.service_pb2")
SUBPROCESS_TIMEOUT_S = 120

# What rocketmq-apis HEAD has and the client's snapshot lacks: nothing more, nothing less.
HEAD_ADDITIONS = [
    f"+ field {PACKAGE}.Settings.client_properties: map<string, string> = 9",
    f"+ enum value {PACKAGE}.Code.INVALID_CLIENT_PROPERTIES = 40021",
]

# Prints the client's FileDescriptorProtos and the (kind, path) of every method its stub binds.
CLIENT_DESCRIPTORS_SCRIPT = r"""
import base64, importlib, importlib.metadata, json, sys

class RecordingChannel:
    def __init__(self):
        self.calls = []
    def _bind(kind):
        def bind(self, path, *args, **kwargs):
            self.calls.append([kind, path])
        return bind
    unary_unary, unary_stream = _bind("unary_unary"), _bind("unary_stream")
    stream_unary, stream_stream = _bind("stream_unary"), _bind("stream_stream")

modules = [importlib.import_module(name) for name in json.load(sys.stdin)]
from rocketmq.grpc_protocol import service_pb2_grpc
channel = RecordingChannel()
service_pb2_grpc.MessagingServiceStub(channel)
json.dump({
    "version": importlib.metadata.version("rocketmq-python-client"),
    "files": {m.__name__: base64.b64encode(m.DESCRIPTOR.serialized_pb).decode() for m in modules},
    "stub_methods": sorted(channel.calls),
}, sys.stdout)
"""

# For each case: parse our bytes with the client's class, and build the same values with it.
CLIENT_ROUND_TRIP_SCRIPT = r"""
import base64, json, sys
from google.protobuf import json_format
from rocketmq.grpc_protocol import service_pb2

out = {}
for case in json.load(sys.stdin):
    cls = getattr(service_pb2, case["type"])
    parsed = cls.FromString(base64.b64decode(case["wire"]))
    built = json_format.ParseDict(case["values"], cls(), ignore_unknown_fields=case["ignore_unknown"])
    out[case["id"]] = {
        "values": json_format.MessageToDict(parsed, preserving_proto_field_name=True),
        "which": {name: parsed.WhichOneof(name) for name in case["oneofs"]},
        "reencoded": base64.b64encode(parsed.SerializeToString()).decode(),
        "built": base64.b64encode(built.SerializeToString()).decode(),
    }
json.dump(out, sys.stdout)
"""


def run_client_script(script: str, payload: object, home: os.PathLike) -> dict:
    """Run `script` in a fresh interpreter whose descriptor pool belongs to the client's stubs.

    HOME points at a temporary directory because importing `rocketmq` creates ~/logs/rocketmq_python.
    """
    done = subprocess.run(
        [sys.executable, "-I", "-c", script],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
        cwd=home,
        env={**os.environ, "HOME": os.fspath(home)},
    )
    assert done.returncode == 0, f"client subprocess failed:\n{done.stderr}"
    return json.loads(done.stdout)


# ------------------------------------------------------------------------------------------------
# Schema shapes, from FileDescriptorProtos
# ------------------------------------------------------------------------------------------------

FieldProto = descriptor_pb2.FieldDescriptorProto


def type_label(proto: FieldProto) -> str:
    """`string`, `int64`, ... for scalars; the full type name for messages and enums."""
    if proto.type in (FieldProto.TYPE_MESSAGE, FieldProto.TYPE_ENUM):
        return proto.type_name.lstrip(".")
    return FieldProto.Type.Name(proto.type).removeprefix("TYPE_").lower()


@dataclass(frozen=True)
class FieldShape:
    """Everything about a field that reaches the wire or the generated API."""

    number: int
    type: str  # FieldDescriptorProto.Type name
    label: str  # FieldDescriptorProto.Label name
    type_name: str  # referenced message/enum, "" for scalars
    oneof: str | None  # the real (non-synthetic) oneof holding the field
    proto3_optional: bool  # declared `optional`
    map_key: str | None = None  # map fields: key and value types (the entry message is not compared)
    map_value: str | None = None

    def describe(self) -> str:
        if self.map_key is not None:
            kind = f"map<{self.map_key}, {self.map_value}>"
        else:
            scalar = self.type.removeprefix("TYPE_").lower()
            kind = self.type_name or scalar
            kind = {"LABEL_REPEATED": "repeated ", "LABEL_REQUIRED": "required "}.get(self.label, "") + kind
            kind = ("optional " if self.proto3_optional else "") + kind
        return f"{kind} = {self.number}" + (f" in oneof {self.oneof}" if self.oneof else "")


@dataclass
class Schema:
    package: set[str] = field(default_factory=set)
    home_file: dict[str, str] = field(default_factory=dict)  # type -> "definition.proto" / "service.proto"
    messages: dict[str, dict[str, FieldShape]] = field(default_factory=dict)
    oneofs: dict[str, list[str]] = field(default_factory=dict)  # real oneofs, in declaration order
    enums: dict[str, dict[str, int]] = field(default_factory=dict)
    methods: dict[str, tuple[str, str, bool, bool]] = field(default_factory=dict)  # in, out, streams


def schema_of(files: Iterable[descriptor_pb2.FileDescriptorProto]) -> Schema:
    schema = Schema()

    def add_enum(scope: str, enum: descriptor_pb2.EnumDescriptorProto, home: str) -> None:
        schema.enums[f"{scope}.{enum.name}"] = {value.name: value.number for value in enum.value}
        schema.home_file[f"{scope}.{enum.name}"] = home

    def add_message(scope: str, message: descriptor_pb2.DescriptorProto, home: str) -> None:
        name = f"{scope}.{message.name}"
        schema.home_file[name] = home
        entries = {f".{name}.{nested.name}": nested for nested in message.nested_type if nested.options.map_entry}
        for nested in message.nested_type:
            if not nested.options.map_entry:
                add_message(name, nested, home)
        for enum in message.enum_type:
            add_enum(name, enum, home)
        shapes = {}
        for proto in message.field:
            in_real_oneof = proto.HasField("oneof_index") and not proto.proto3_optional
            shape = FieldShape(
                number=proto.number,
                type=FieldProto.Type.Name(proto.type),
                label=FieldProto.Label.Name(proto.label),
                type_name=proto.type_name.lstrip("."),
                oneof=message.oneof_decl[proto.oneof_index].name if in_real_oneof else None,
                proto3_optional=proto.proto3_optional,
            )
            if proto.type_name in entries:
                key, value = entries[proto.type_name].field
                shape = dataclasses.replace(shape, type_name="", map_key=type_label(key), map_value=type_label(value))
            shapes[proto.name] = shape
        schema.messages[name] = shapes
        synthetic = {message.oneof_decl[p.oneof_index].name for p in message.field if p.proto3_optional}
        schema.oneofs[name] = [o.name for o in message.oneof_decl if o.name not in synthetic]

    for file in files:
        home = PurePosixPath(file.name).name
        schema.package.add(file.package)
        for message in file.message_type:
            add_message(file.package, message, home)
        for enum in file.enum_type:
            add_enum(file.package, enum, home)
        for service in file.service:
            for method in service.method:
                schema.methods[f"{file.package}.{service.name}/{method.name}"] = (
                    method.input_type.lstrip("."),
                    method.output_type.lstrip("."),
                    method.client_streaming,
                    method.server_streaming,
                )
    return schema


def schema_diff(ours: Schema, theirs: Schema) -> list[str]:
    """Differences as lines: `+ x` only in ours, `- x` only in theirs, `~ x: theirs -> ours`."""
    lines: list[str] = []

    def compare(kind: str, a: dict, b: dict, show: Callable[[object], str] | None = None) -> list[str]:
        """+/- for keys on one side only; ~ for changed values when `show` is given."""
        common = sorted(a.keys() & b.keys())
        lines.extend(f"+ {kind} {key}" + (f": {show(a[key])}" if show else "") for key in sorted(a.keys() - b.keys()))
        lines.extend(f"- {kind} {key}" + (f": {show(b[key])}" if show else "") for key in sorted(b.keys() - a.keys()))
        if show:
            lines.extend(f"~ {kind} {key}: {b[key]!r} -> {a[key]!r}" for key in common if a[key] != b[key])
        return common

    if ours.package != theirs.package:
        lines.append(f"~ package: {sorted(theirs.package)} -> {sorted(ours.package)}")
    for name in compare("message", ours.messages, theirs.messages):
        mine = {f"{name}.{f}": shape for f, shape in ours.messages[name].items()}
        other = {f"{name}.{f}": shape for f, shape in theirs.messages[name].items()}
        compare("field", mine, other, show=FieldShape.describe)
        if ours.oneofs[name] != theirs.oneofs[name]:
            lines.append(f"~ oneofs of {name}: {theirs.oneofs[name]} -> {ours.oneofs[name]}")
    for name in compare("enum", ours.enums, theirs.enums):
        compare(
            "enum value",
            {f"{name}.{v} = {n}": n for v, n in ours.enums[name].items()},
            {f"{name}.{v} = {n}": n for v, n in theirs.enums[name].items()},
        )
    compare("method", ours.methods, theirs.methods, show=repr)
    lines.extend(
        f"~ home file of {name}: {theirs.home_file[name]} -> {ours.home_file[name]}"
        for name in sorted(ours.home_file.keys() & theirs.home_file.keys())
        if ours.home_file[name] != theirs.home_file[name]
    )
    return lines


def our_files() -> list[descriptor_pb2.FileDescriptorProto]:
    return [descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb) for module in (d, s)]


@dataclass(frozen=True)
class ClientDescriptors:
    version: str
    files: list[descriptor_pb2.FileDescriptorProto]
    pool: descriptor_pool.DescriptorPool  # a fresh pool holding only the client's files (+ WKTs)
    stub_methods: list[list[str]]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> ClientDescriptors:
    out = run_client_script(CLIENT_DESCRIPTORS_SCRIPT, list(CLIENT_MODULES), tmp_path_factory.mktemp("home"))
    assert sorted(out["files"]) == sorted(CLIENT_MODULES)
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(out["files"][name])) for name in CLIENT_MODULES
    ]
    pool = descriptor_pool.DescriptorPool()
    for well_known in (duration_pb2, timestamp_pb2):
        pool.AddSerializedFile(well_known.DESCRIPTOR.serialized_pb)
    for file in files:  # definition first: service.proto imports it
        pool.AddSerializedFile(file.SerializeToString())
    return ClientDescriptors(out["version"], files, pool, out["stub_methods"])


# ------------------------------------------------------------------------------------------------
# Descriptor comparison
# ------------------------------------------------------------------------------------------------


def test_client_ships_the_expected_stub_files(client: ClientDescriptors):
    assert [f.name for f in client.files] == ["definition.proto", "service.proto"]
    assert {f.package for f in client.files} == {PACKAGE}
    assert [f.name for f in our_files()] == ["apache/rocketmq/v2/definition.proto", "apache/rocketmq/v2/service.proto"]


def test_schema_equals_client_schema_plus_head_additions(client: ClientDescriptors):
    ours, theirs = schema_of(our_files()), schema_of(client.files)
    assert len(theirs.messages) > 60 and len(theirs.enums) > 10 and len(theirs.methods) == 17  # not vacuous
    assert schema_diff(ours, theirs) == HEAD_ADDITIONS, f"client {client.version}"


def test_head_addition_shapes():
    settings = schema_of(our_files()).messages[f"{PACKAGE}.Settings"]
    assert settings["client_properties"] == FieldShape(
        number=9,
        type="TYPE_MESSAGE",
        label="LABEL_REPEATED",
        type_name="",
        oneof=None,
        proto3_optional=False,
        map_key="string",
        map_value="string",
    )
    assert d.Code.Value("INVALID_CLIENT_PROPERTIES") == 40021


def runtime_shape(f) -> tuple:
    """A live FieldDescriptor's properties that every supported protobuf exposes (7.x has no `label`;
    the label is covered by the FileDescriptorProto comparison)."""
    entry = f.message_type if f.message_type is not None and f.message_type.GetOptions().map_entry else None
    return (
        f.number,
        f.type,
        f.cpp_type,
        f.containing_oneof.name if f.containing_oneof else None,
        f.message_type.full_name if f.message_type else None,
        f.enum_type.full_name if f.enum_type else None,
        tuple((e.name, e.number, e.type) for e in entry.fields) if entry else None,
    )


def runtime_method(m) -> tuple:
    return (m.name, m.input_type.full_name, m.output_type.full_name, m.client_streaming, m.server_streaming)


def test_runtime_descriptors_agree_with_client_pool(client: ClientDescriptors):
    """The same comparison through live Descriptor objects: ours as our classes use them, the
    client's as a fresh pool resolves them (which also proves every cross-reference resolves)."""
    ours = descriptor_pool.Default()
    theirs_schema = schema_of(client.files)
    extra: set[str] = set()
    for name in theirs_schema.messages:
        mine, other = ours.FindMessageTypeByName(name), client.pool.FindMessageTypeByName(name)
        extra |= {f"{name}.{f.name}" for f in mine.fields if f.name not in other.fields_by_name}
        for theirs_field in other.fields:
            our_field = mine.fields_by_name[theirs_field.name]
            assert runtime_shape(our_field) == runtime_shape(theirs_field), f"{name}.{theirs_field.name}"
    for name, values in theirs_schema.enums.items():
        mine = {v.name: v.number for v in ours.FindEnumTypeByName(name).values}
        other = {v.name: v.number for v in client.pool.FindEnumTypeByName(name).values}
        assert other == values
        assert mine == other | ({"INVALID_CLIENT_PROPERTIES": 40021} if name == f"{PACKAGE}.Code" else {})
    assert extra == {f"{PACKAGE}.Settings.client_properties"}
    mine_service = ours.FindServiceByName(f"{PACKAGE}.MessagingService")
    other_service = client.pool.FindServiceByName(f"{PACKAGE}.MessagingService")
    assert sorted(map(runtime_method, mine_service.methods)) == sorted(map(runtime_method, other_service.methods))


def test_grpc_stubs_bind_the_same_method_paths(client: ClientDescriptors):
    calls: list[list[str]] = []

    class RecordingChannel:
        def __getattr__(self, kind: str):
            return lambda path, *args, **kwargs: calls.append([kind, path])

    s_grpc.MessagingServiceStub(RecordingChannel())
    assert sorted(calls) == client.stub_methods
    assert ["stream_stream", f"/{PACKAGE}.MessagingService/Telemetry"] in calls
    assert ["unary_stream", f"/{PACKAGE}.MessagingService/ReceiveMessage"] in calls


def find_message(files, name: str) -> descriptor_pb2.DescriptorProto:
    return next(m for f in files for m in f.message_type if m.name == name)


def _mutate_field(message: str, field_name: str, /, **changes) -> Callable:
    def mutate(files):
        proto = next(f for f in find_message(files, message).field if f.name == field_name)
        for key, value in changes.items():
            if value is None:
                proto.ClearField(key)
            else:
                setattr(proto, key, value)

    return mutate


def _mutate_code_ok(files):
    code = next(e for f in files for e in f.enum_type if e.name == "Code")
    next(v for v in code.value if v.name == "OK").number = 20001


def _mutate_map_value(files):
    entry = next(n for n in find_message(files, "Message").nested_type if n.name == "UserPropertiesEntry")
    entry.field[1].type = FieldProto.TYPE_BYTES


def _mutate_streaming(files):
    method = next(m for f in files for svc in f.service for m in svc.method if m.name == "ReceiveMessage")
    method.server_streaming = False


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            _mutate_field("SystemProperties", "message_id", number=33),
            "~ field apache.rocketmq.v2.SystemProperties.message_id:",
        ),
        (_mutate_field("SendResultEntry", "offset", type=FieldProto.TYPE_INT32), "SendResultEntry.offset"),
        (_mutate_field("Resource", "name", label=FieldProto.LABEL_REPEATED), "Resource.name"),
        (_mutate_field("SystemProperties", "tag", proto3_optional=False), "SystemProperties.tag"),
        (_mutate_field("Settings", "publishing", oneof_index=None), "Settings.publishing"),
        (_mutate_field("Broker", "id", name="broker_id"), "- field apache.rocketmq.v2.Broker.id"),
        (_mutate_code_ok, "apache.rocketmq.v2.Code.OK = 20001"),
        (_mutate_map_value, "Message.user_properties"),
        (_mutate_streaming, "ReceiveMessage"),
    ],
    ids=["number", "type", "label", "optional", "oneof", "name", "enum-value", "map-value", "streaming"],
)
def test_comparison_catches_a_changed_schema(client: ClientDescriptors, mutate: Callable, expected: str):
    """Guards the comparison itself: a one-property change in either schema shows up."""
    changed = copy.deepcopy(client.files)
    mutate(changed)
    diff = schema_diff(schema_of(changed), schema_of(client.files))
    assert diff and expected in "\n".join(diff), diff


# ------------------------------------------------------------------------------------------------
# Wire round trips: our bytes -> client classes, client-built bytes -> our classes
# (the samples: tests/support/v2_samples.py)
# ------------------------------------------------------------------------------------------------

OK = d.Status(code=d.OK, message="OK")

# id -> (message built with our classes, oneofs to compare, HEAD-only fields the client cannot see)
ROUND_TRIP_CASES: dict[str, tuple[object, tuple[str, ...], tuple[str, ...]]] = {
    "send-request": (send_request(), (), ()),
    "receive-status": (
        s.ReceiveMessageResponse(status=d.Status(code=d.MESSAGE_NOT_FOUND, message="no new message")),
        ("content",),
        (),
    ),
    "receive-message": (s.ReceiveMessageResponse(message=delivered_message()), ("content",), ()),
    "receive-delivery-timestamp": (
        s.ReceiveMessageResponse(delivery_timestamp=Timestamp(seconds=1_700_000_002)),
        ("content",),
        (),
    ),
    "telemetry-producer-settings": (s.TelemetryCommand(status=OK, settings=producer_settings()), ("command",), ()),
    "telemetry-consumer-settings": (s.TelemetryCommand(status=OK, settings=consumer_settings()), ("command",), ()),
    "telemetry-settings-client-properties": (
        s.TelemetryCommand(settings=producer_settings(client_properties={"app": "orders", "zone": "eu-1"})),
        ("command",),
        ("client_properties",),
    ),
    "telemetry-recover-orphaned-transaction": (
        s.TelemetryCommand(
            recover_orphaned_transaction_command=s.RecoverOrphanedTransactionCommand(
                message=delivered_message(), transaction_id="0102FC0000000146A20B13E20600000000"
            )
        ),
        ("command",),
        (),
    ),
    "telemetry-print-thread-stack-trace": (
        s.TelemetryCommand(print_thread_stack_trace_command=s.PrintThreadStackTraceCommand(nonce="n1")),
        ("command",),
        (),
    ),
    "telemetry-thread-stack-trace": (
        s.TelemetryCommand(
            status=OK, thread_stack_trace=s.ThreadStackTrace(nonce="n1", thread_stack_trace="mock stack")
        ),
        ("command",),
        (),
    ),
    "telemetry-verify-message-command": (
        s.TelemetryCommand(verify_message_command=s.VerifyMessageCommand(nonce="n2", message=delivered_message())),
        ("command",),
        (),
    ),
    "telemetry-verify-message-result": (
        s.TelemetryCommand(
            status=d.Status(code=d.FAILED_TO_CONSUME_MESSAGE), verify_message_result=s.VerifyMessageResult(nonce="n2")
        ),
        ("command",),
        (),
    ),
    "telemetry-reconnect-endpoints": (
        s.TelemetryCommand(reconnect_endpoints_command=s.ReconnectEndpointsCommand(nonce="n3")),
        ("command",),
        (),
    ),
    "telemetry-notify-unsubscribe-lite": (
        s.TelemetryCommand(notify_unsubscribe_lite_command=s.NotifyUnsubscribeLiteCommand(lite_topic="lite-1")),
        ("command",),
        (),
    ),
}


def without(message, head_only: tuple[str, ...]):
    """A copy of `message` with the HEAD-only fields (inside `settings`) cleared."""
    stripped = type(message).FromString(message.SerializeToString())
    for name in head_only:
        stripped.settings.ClearField(name)
    return stripped


def values_of(message) -> dict:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


@pytest.fixture(scope="module")
def client_round_trip(tmp_path_factory: pytest.TempPathFactory) -> dict:
    payload = [
        {
            "id": case_id,
            "type": type(message).__name__,
            "oneofs": list(oneofs),
            "wire": base64.b64encode(message.SerializeToString()).decode(),
            "values": values_of(message),
            "ignore_unknown": bool(head_only),
        }
        for case_id, (message, oneofs, head_only) in ROUND_TRIP_CASES.items()
    ]
    return run_client_script(CLIENT_ROUND_TRIP_SCRIPT, payload, tmp_path_factory.mktemp("home"))


@pytest.mark.parametrize("case_id", list(ROUND_TRIP_CASES))
def test_client_reads_what_we_write(client_round_trip: dict, case_id: str):
    message, oneofs, head_only = ROUND_TRIP_CASES[case_id]
    got = client_round_trip[case_id]
    assert got["values"] == values_of(without(message, head_only))
    assert got["which"] == {name: message.WhichOneof(name) for name in oneofs}
    # Fields the client does not know survive its decode/encode as unknown fields.
    assert type(message).FromString(base64.b64decode(got["reencoded"])) == message


@pytest.mark.parametrize("case_id", list(ROUND_TRIP_CASES))
def test_we_read_what_the_client_writes(client_round_trip: dict, case_id: str):
    message, _, head_only = ROUND_TRIP_CASES[case_id]
    built = base64.b64decode(client_round_trip[case_id]["built"])
    assert type(message).FromString(built) == without(message, head_only)


def test_explicit_presence_survives_on_the_client(client_round_trip: dict):
    """`optional` fields set to their zero value are still present after the client decodes them."""
    sent = client_round_trip["send-request"]["values"]["messages"]
    assert sent[0]["system_properties"]["tag"] == ""
    assert sent[4]["system_properties"]["priority"] == 0
    delivered = client_round_trip["receive-message"]["values"]["message"]["system_properties"]
    assert delivered["queue_offset"] == "0" and delivered["delivery_attempt"] == 1
    settings = client_round_trip["telemetry-consumer-settings"]["values"]["settings"]
    assert settings["subscription"]["fifo"] is False
    assert client_round_trip["telemetry-producer-settings"]["values"]["settings"]["metric"] == {}
