"""Corpus cases for apache.rocketmq.v2.MessagingService (answers in band: ``status.code``)."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp

from services.domain.delivery import BROKER_PROPERTY_KEYS
from services.domain.format.properties_format import RESERVED_PROPERTY_KEYS
from tests.badinput.cases import (
    BAD_NAMES,
    LONG_TOPICS,
    SC,
    SYSTEM_GROUP_NAMES,
    SYSTEM_TOPIC_NAMES,
    R,
    case,
    const,
    dur,
    resource,
)
from tests.support.v2_requests import CLIENT_ID, MESSAGE_ID, METADATA, message

# The corpus is a table, one case a line: kept as written, not reformatted.
# fmt: off


# -- SendMessage ----------------------------------------------------------------------------------

def send_req(*messages: d.Message) -> s.SendMessageRequest:
    return s.SendMessageRequest(messages=list(messages))


def send_case(id_: str, expected: int, bug: str | None = None, metadata: tuple | None = None, **fields: Any) -> None:
    topic = fields.pop("topic", "TopicTest")
    case(id_, "v2", "SendMessage", lambda ctx: send_req(message(topic, **fields)), expected, bug=bug,
         metadata=metadata)


for label, name in BAD_NAMES.items():
    send_case(f"topic {label}", d.ILLEGAL_TOPIC, topic=name)
send_case("topic empty", d.ILLEGAL_TOPIC, topic="")
for label, name in LONG_TOPICS.items():
    send_case(f"topic {label}", d.ILLEGAL_TOPIC, topic=name)
for name in SYSTEM_TOPIC_NAMES:
    send_case(f"system topic {name}", d.ILLEGAL_TOPIC, topic=name)
case("no topic field", "v2", "SendMessage", const(send_req(d.Message(
    body=b"x", system_properties=d.SystemProperties(message_id=MESSAGE_ID, message_type=d.NORMAL)))), d.ILLEGAL_TOPIC)

# body
send_case("body empty", d.MESSAGE_BODY_EMPTY, body=b"")
send_case("body 4 MiB + 1", d.MESSAGE_BODY_TOO_LARGE, body=b"x" * ((4 << 20) + 1))
send_case("body 8 MiB", d.MESSAGE_BODY_TOO_LARGE, body=b"x" * (8 << 20))
case("no body field", "v2", "SendMessage", const(send_req(d.Message(
    topic=R(name="TopicTest"), system_properties=d.SystemProperties(message_id=MESSAGE_ID)))), d.MESSAGE_BODY_EMPTY)
case("no system properties", "v2", "SendMessage", const(send_req(d.Message(topic=R(name="TopicTest"), body=b"x"))),
     d.ILLEGAL_MESSAGE_ID)

# user properties
send_case("129 properties", d.MESSAGE_PROPERTIES_TOO_LARGE, user_properties={f"k{i}": "v" for i in range(129)})
send_case("10000 properties", d.MESSAGE_PROPERTIES_TOO_LARGE, user_properties={f"k{i}": "v" for i in range(10_000)})
send_case("property value 16 KiB", d.MESSAGE_PROPERTIES_TOO_LARGE, user_properties={"k": "v" * (16 * 1024)})
send_case("property key 16 KiB", d.MESSAGE_PROPERTIES_TOO_LARGE, user_properties={"k" * (16 * 1024): "v"})
send_case("properties 40 KiB in 100 entries", d.MESSAGE_PROPERTIES_TOO_LARGE,
          user_properties={f"k{i}": "v" * 400 for i in range(100)})
send_case("property value 1 MiB", d.MESSAGE_PROPERTIES_TOO_LARGE, user_properties={"k": "v" * (1 << 20)})
send_case("properties+tag over 16 KiB", d.MESSAGE_PROPERTIES_TOO_LARGE,
          user_properties={"k": "v" * (16 * 1024 - 4)}, tag="TagAB")
send_case("properties+keys over 16 KiB", d.MESSAGE_PROPERTIES_TOO_LARGE,
          user_properties={"k": "v" * (16 * 1024 - 4)}, keys=["key01"])
for key in sorted(RESERVED_PROPERTY_KEYS | BROKER_PROPERTY_KEYS):
    send_case(f"reserved property {key}", d.ILLEGAL_MESSAGE_PROPERTY_KEY, user_properties={key: "x"})
send_case("property key empty", d.ILLEGAL_MESSAGE_PROPERTY_KEY, user_properties={"": "x"})
for label, ch in (("NUL", "\x00"), ("tab", "\t"), ("newline", "\n"), ("DEL", "\x7f"), ("C1 NEL", "\x85"),
                  ("ESC", "\x1b")):
    send_case(f"property key with {label}", d.ILLEGAL_MESSAGE_PROPERTY_KEY, user_properties={f"a{ch}": "x"})
    send_case(f"property value with {label}", d.ILLEGAL_MESSAGE_PROPERTY_KEY, user_properties={"a": f"x{ch}"})

# tags
for label, tag in {"||": "||", "|": "|", "a|b": "a|b", "a||b": "a||b", "trailing |": "a|", "spaces": "   ",
                   "tab only": "\t", "ideographic space": "\u3000", "NUL": "a\x00", "tab inside": "a\tb",
                   "newline": "a\nb", "DEL": "a\x7f", "C1": "a\x9f", "ESC": "\x1b[31m"}.items():
    send_case(f"tag {label}", d.ILLEGAL_MESSAGE_TAG, tag=tag)

# keys
for label, keys in {"space": [" "], "tabs": ["\t\t"], "NUL": ["a\x00"], "newline": ["a\nb"],
                    "one good one bad": ["ok", "\x01"], "C1": ["\x80"]}.items():
    send_case(f"key {label}", d.ILLEGAL_MESSAGE_KEY, keys=keys)

# message id
for label, mid in {"empty": "", "spaces": "   ", "tab": "\t", "NUL": "AB\x00", "newline": "AB\nCD",
                   "C1": "AB\x90"}.items():
    send_case(f"message id {label}", d.ILLEGAL_MESSAGE_ID, message_id=mid)

# message group (FIFO)
for label, group in {"64 bytes": "g" * 64, "65 bytes": "g" * 65, "1000 bytes": "g" * 1000,
                     "64 UTF-8 bytes": "\u00e9" * 32, "emoji 64 bytes": "\U0001f600" * 16, "blank": "  ",
                     "NUL": "g\x00", "newline": "g\n", "C1": "g\x85"}.items():
    send_case(f"message group {label}", d.ILLEGAL_MESSAGE_GROUP, topic="FifoTopic", message_type=d.FIFO,
              message_group=group)


# delivery time (DELAY); the corpus runs within minutes of import, so times are relative to now.
def _delay(seconds: int, nanos: int = 0) -> Callable[[dict], s.SendMessageRequest]:
    return lambda ctx: send_req(message("DelayTopic", message_type=d.DELAY,
                                        delivery_timestamp=Timestamp(seconds=seconds, nanos=nanos)))


_DAY = 24 * 3600
case("delivery 31 days ahead", "v2", "SendMessage", lambda ctx: _delay(int(time.time()) + 31 * _DAY)(ctx),
     d.ILLEGAL_DELIVERY_TIME)
case("delivery 30 days + 1 min ahead", "v2", "SendMessage",
     lambda ctx: _delay(int(time.time()) + 30 * _DAY + 60)(ctx), d.ILLEGAL_DELIVERY_TIME)
case("delivery in ms passed as seconds", "v2", "SendMessage", lambda ctx: _delay(int(time.time() * 1000))(ctx),
     d.ILLEGAL_DELIVERY_TIME)
case("delivery year 9999", "v2", "SendMessage", _delay(253_402_300_799), d.ILLEGAL_DELIVERY_TIME)
case("delivery beyond year 9999", "v2", "SendMessage", _delay(253_402_300_800), d.ILLEGAL_DELIVERY_TIME)
case("delivery int64 max seconds", "v2", "SendMessage", _delay(2**63 - 1), d.ILLEGAL_DELIVERY_TIME)
case("delivery before year 1", "v2", "SendMessage", _delay(-62_135_596_801), d.ILLEGAL_DELIVERY_TIME)
case("delivery negative nanos", "v2", "SendMessage", _delay(1_700_000_000, -1), d.ILLEGAL_DELIVERY_TIME)
case("delivery nanos 1e9", "v2", "SendMessage", _delay(1_700_000_000, 1_000_000_000), d.ILLEGAL_DELIVERY_TIME)
case("born timestamp out of range", "v2", "SendMessage", const(send_req(message(
    born_timestamp=Timestamp(seconds=2**62)))), d.BAD_REQUEST)

# transactions, types, encodings
send_case("tx recovery 1 h + 1 s", d.BAD_REQUEST, topic="TxTopic", message_type=d.TRANSACTION,
          orphaned_transaction_recovery_duration=dur(3601))
send_case("tx recovery 100 years", d.BAD_REQUEST, topic="TxTopic", message_type=d.TRANSACTION,
          orphaned_transaction_recovery_duration=dur(100 * 365 * _DAY))
send_case("tx recovery negative", d.BAD_REQUEST, topic="TxTopic", message_type=d.TRANSACTION,
          orphaned_transaction_recovery_duration=dur(-1))
send_case("FIFO to a NORMAL topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, message_type=d.FIFO, message_group="g")
send_case("NORMAL to a FIFO topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="FifoTopic")
send_case("NORMAL to a DELAY topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="DelayTopic")
send_case("NORMAL to a TRANSACTION topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="TxTopic")
send_case("TRANSACTION to a NORMAL topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, message_type=d.TRANSACTION)
send_case("TRANSACTION to a FIFO topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="FifoTopic",
          message_type=d.TRANSACTION)
case("DELAY to a NORMAL topic", "v2", "SendMessage", lambda ctx: send_req(message(
    message_type=d.DELAY, delivery_timestamp=Timestamp(seconds=int(time.time()) + 600))),
     d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE)
send_case("FIFO without a group", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="FifoTopic", message_type=d.FIFO)
send_case("DELAY without a time", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="DelayTopic", message_type=d.DELAY)
send_case("NORMAL with a group", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, message_group="g")
send_case("TRANSACTION with a group", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="TxTopic",
          message_type=d.TRANSACTION, message_group="g")
send_case("group and delivery time", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="FifoTopic",
          message_type=d.MESSAGE_TYPE_UNSPECIFIED, message_group="g", delivery_timestamp=Timestamp(seconds=1))
send_case("message type 99", d.BAD_REQUEST, message_type=99)
send_case("message type -1", d.BAD_REQUEST, message_type=-1)
send_case("body encoding 99", d.BAD_REQUEST, body_encoding=99)
send_case("LITE to a NORMAL topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, message_type=d.LITE, lite_topic="lt")
send_case("lite topic stated NORMAL", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, lite_topic="lt")
send_case("NORMAL to a LITE topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="LiteTopic")
send_case("LITE without a lite topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="LiteTopic", message_type=d.LITE)
for label, name in {"blank": " ", "empty": "", "65 bytes": "x" * 65, "dollar": "a$b", "slash": "a/b", "dot": "a.b",
                    "percent": "%LMQ%", "space": "a b", "non-ASCII": "日本", "NUL": "a\x00"}.items():
    send_case(f"lite topic {label}", d.ILLEGAL_LITE_TOPIC, topic="LiteTopic", message_type=d.LITE, lite_topic=name)
send_case("LITE with a group", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="LiteTopic", message_type=d.LITE,
          lite_topic="lt", message_group="g")
send_case("PRIORITY to a NORMAL topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, message_type=d.PRIORITY, priority=1)
send_case("priority, type unspecified, to a NORMAL topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, priority=1,
          message_type=d.MESSAGE_TYPE_UNSPECIFIED)
send_case("NORMAL to a PRIORITY topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="PriorityTopic")
send_case("negative priority", d.BAD_REQUEST, topic="PriorityTopic", message_type=d.PRIORITY, priority=-1)
send_case("PRIORITY without a priority", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="PriorityTopic",
          message_type=d.PRIORITY)
send_case("PRIORITY with a group", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="PriorityTopic",
          message_type=d.PRIORITY, priority=1, message_group="g")
send_case("FIFO with a priority to a PRIORITY topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="PriorityTopic",
          message_type=d.FIFO, priority=0, message_group="g")
send_case("DELAY with a priority to a PRIORITY topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, topic="PriorityTopic",
          message_type=d.DELAY, priority=1, delivery_timestamp=Timestamp(seconds=1))
send_case("TRANSACTION with a priority to a PRIORITY topic", d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
          topic="PriorityTopic", message_type=d.TRANSACTION, priority=1)
send_case("trace context with NUL", d.BAD_REQUEST, trace_context="00-ab\x00")

# batches
case("no messages", "v2", "SendMessage", const(send_req()), d.MESSAGE_CORRUPTED)
case("two topics", "v2", "SendMessage", const(send_req(message(), message("OtherTopic", message_id="ID2"))),
     d.MESSAGE_CORRUPTED)
case("mixed namespaces", "v2", "SendMessage", lambda ctx: send_req(
    message(), d.Message(topic=resource("TopicTest", "ns"), body=b"x",
                         system_properties=d.SystemProperties(message_id="ID2", message_type=d.NORMAL))),
     d.MESSAGE_CORRUPTED)
case("good then bad tag", "v2", "SendMessage", const(send_req(message(), message(message_id="ID2", tag="a|b"))),
     d.ILLEGAL_MESSAGE_TAG)
case("good then empty body", "v2", "SendMessage", const(send_req(message(), message(message_id="ID2", body=b""))),
     d.MESSAGE_BODY_EMPTY)
case("bad then good system topic", "v2", "SendMessage", const(send_req(
    message("TBW102"), message("TBW102", message_id="ID2"))), d.ILLEGAL_TOPIC)
case("1000 messages, one bad", "v2", "SendMessage", const(send_req(
    *[message(message_id=f"ID{i}") for i in range(999)], message(message_id="IDX", keys=["\x00"]))),
     d.ILLEGAL_MESSAGE_KEY)

# headers
send_case("no x-mq-client-id", d.CLIENT_ID_REQUIRED, metadata=())
send_case("empty x-mq-client-id", d.CLIENT_ID_REQUIRED, metadata=(("x-mq-client-id", ""),))
send_case("bad topic and no client id", d.CLIENT_ID_REQUIRED, topic="bad topic", metadata=())
send_case("client id under another header", d.CLIENT_ID_REQUIRED, metadata=(("x-mq-clientid", CLIENT_ID),))
# grpc core: metadata over the 8 KiB soft limit is refused at random, over the 16 KiB hard limit always.
send_case("big metadata 6 KiB, bad tag", d.ILLEGAL_MESSAGE_TAG, tag="|",
          metadata=METADATA + (("x-pad", "p" * (6 * 1024)),))
send_case("metadata over 16 KiB", SC.RESOURCE_EXHAUSTED, metadata=METADATA + (("x-pad", "p" * (20 * 1024)),))
send_case("100 metadata entries, bad tag", d.ILLEGAL_MESSAGE_TAG, tag="|",
          metadata=METADATA + tuple((f"x-pad-{i}", "p") for i in range(100)))


# -- QueryRoute -----------------------------------------------------------------------------------

def route_req(name: str, namespace: str = "") -> s.QueryRouteRequest:
    return s.QueryRouteRequest(topic=resource(name, namespace), endpoints=d.Endpoints(
        scheme=d.IPv4, addresses=[d.Address(host="127.0.0.1", port=8081)]))


for label, name in {**BAD_NAMES, "empty": "", **LONG_TOPICS}.items():
    case(f"topic {label}", "v2", "QueryRoute", const(route_req(name)), d.ILLEGAL_TOPIC)
for name in SYSTEM_TOPIC_NAMES:
    case(f"system topic {name}", "v2", "QueryRoute", const(route_req(name)), d.ILLEGAL_TOPIC)
case("no topic field", "v2", "QueryRoute", const(s.QueryRouteRequest()), d.ILLEGAL_TOPIC)
case("no x-mq-client-id", "v2", "QueryRoute", const(route_req("TopicTest")), d.CLIENT_ID_REQUIRED, metadata=())
case("blank x-mq-client-id", "v2", "QueryRoute", const(route_req("TopicTest")), d.CLIENT_ID_REQUIRED,
     metadata=(("x-mq-client-id", "   "),))


# -- Heartbeat / NotifyClientTermination / SyncLiteSubscription ------------------------------------

case("no x-mq-client-id", "v2", "Heartbeat", const(s.HeartbeatRequest(client_type=d.PRODUCER)),
     d.CLIENT_ID_REQUIRED, metadata=())
case("no settings yet", "v2", "Heartbeat",
     const(s.HeartbeatRequest(client_type=d.PRODUCER)), d.UNRECOGNIZED_CLIENT_TYPE,
     metadata=(("x-mq-client-id", "never-sent-settings@1"),))
case("illegal group", "v2", "Heartbeat",
     const(s.HeartbeatRequest(group=R(name="bad group"), client_type=d.SIMPLE_CONSUMER)), d.ILLEGAL_CONSUMER_GROUP)
case("no x-mq-client-id is OK", "v2", "NotifyClientTermination", const(s.NotifyClientTerminationRequest()),
     d.OK, metadata=())  # always OK: Node aborts its shutdown otherwise (docs/v2-clients.md, pitfall 20)
case("illegal group is OK", "v2", "NotifyClientTermination",
     const(s.NotifyClientTerminationRequest(group=R(name="bad group!"))), d.OK)


def lite_sub(topic: str = "LiteTopic", group: str = "G1", names: tuple[str, ...] = ("a",), action: int = 0
             ) -> Callable[[], s.SyncLiteSubscriptionRequest]:
    return const(s.SyncLiteSubscriptionRequest(
        action=action, topic=R(name=topic), group=R(name=group), lite_topic_set=list(names)))


case("lite subscription", "v2", "SyncLiteSubscription", lite_sub(), d.OK)
case("lite subscription of a non-LITE topic", "v2", "SyncLiteSubscription", lite_sub("TopicTest"), d.ILLEGAL_TOPIC)
case("lite subscription of an unknown topic", "v2", "SyncLiteSubscription", lite_sub("NoSuchTopic"), d.TOPIC_NOT_FOUND)
case("lite subscription, bad group", "v2", "SyncLiteSubscription", lite_sub(group="bad group!"), d.ILLEGAL_CONSUMER_GROUP)
case("lite subscription, unknown action", "v2", "SyncLiteSubscription", lite_sub(action=9), d.BAD_REQUEST)
for _name in ("a.b", "", " ", "x" * 65, "chat/1", "%LMQ%"):
    case(f"lite subscription of {_name[:12]!r}", "v2", "SyncLiteSubscription", lite_sub(names=(_name,)),
         d.ILLEGAL_LITE_TOPIC)
case("lite subscription over its quota", "v2", "SyncLiteSubscription",
     lite_sub(names=tuple(f"t{i}" for i in range(2001))), d.LITE_SUBSCRIPTION_QUOTA_EXCEEDED)
case("no x-mq-client-id", "v2", "SyncLiteSubscription", const(s.SyncLiteSubscriptionRequest()),
     d.CLIENT_ID_REQUIRED, metadata=())


# -- ReceiveMessage (server stream: the status element) -------------------------------------------

def recv_req(topic: str = "TopicTest", group: str = "G1", expression: str = "*", filter_type: int = d.TAG,
             invisible: Duration | None = dur(30), polling: Duration | None = dur(1), **extra: Any  # noqa: B008
             ) -> s.ReceiveMessageRequest:
    request = s.ReceiveMessageRequest(
        group=R(name=group), message_queue=d.MessageQueue(topic=R(name=topic), id=0),
        filter_expression=d.FilterExpression(type=filter_type, expression=expression), batch_size=1, **extra)
    if invisible is not None:
        request.invisible_duration.CopyFrom(invisible)
    if polling is not None:
        request.long_polling_timeout.CopyFrom(polling)
    return request


def recv_case(id_: str, expected: int, timeout_s: float = 10.0, **kw: Any) -> None:
    metadata = kw.pop("metadata", None)
    case(id_, "v2", "ReceiveMessage", const(recv_req(**kw)), expected, timeout_s=timeout_s, metadata=metadata)


for label, name in {**BAD_NAMES, "empty": "", "121 chars": "g" * 121}.items():
    recv_case(f"group {label}", d.ILLEGAL_CONSUMER_GROUP, group=name)
for name in SYSTEM_GROUP_NAMES:
    recv_case(f"system group {name}", d.ILLEGAL_CONSUMER_GROUP, group=name)
for label, name in {"char space": "a b", "char slash": "a/b", "empty": "", "128 chars": "t" * 128,
                    "char emoji": "\U0001f600"}.items():
    recv_case(f"topic {label}", d.ILLEGAL_TOPIC, topic=name)
for name in ("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer"):
    recv_case(f"system topic {name}", d.ILLEGAL_TOPIC, topic=name)
for label, expression in {"||": "||", "|| ||": "|| ||", " || ": " || "}.items():
    recv_case(f"tag filter {label!r}", d.ILLEGAL_FILTER_EXPRESSION, expression=expression)
SQL_ERRORS = {"dangling >": "a >", "AND alone": "AND", "unterminated string": "a = 'x", "empty IN": "a IN ()",
              "unbalanced paren": "((a > 1)", "BETWEEN without AND": "a BETWEEN 1", "LIKE nothing": "a LIKE",
              "double =": "a = = 1", "garbage": "%%%", "trailing AND": "a > 1 AND", "bad number": "a > 1e",
              "NOT alone": "NOT", "IS alone": "a IS", "unknown operator": "a ~ 1", "10k parens": "(" * 10_000 + "a"}
for label, expression in SQL_ERRORS.items():
    recv_case(f"SQL {label}", d.ILLEGAL_FILTER_EXPRESSION, expression=expression, filter_type=d.SQL)
recv_case("filter type 99", d.ILLEGAL_FILTER_EXPRESSION, filter_type=99)
recv_case("filter type -5", d.ILLEGAL_FILTER_EXPRESSION, filter_type=-5)
for label, invisible in {"0": dur(0), "9.999 s": dur(9, 999_000_000), "12 h + 1 ms": dur(12 * 3600, 1_000_000),
                         "13 h": dur(13 * 3600), "negative": dur(-10), "negative nanos": dur(10, -1),
                         "100 years": dur(100 * 365 * _DAY), "int64 max": dur(2**63 - 1)}.items():
    recv_case(f"invisible {label}", d.ILLEGAL_INVISIBLE_TIME, invisible=invisible)
recv_case("no invisible duration, no auto renew", d.ILLEGAL_INVISIBLE_TIME, invisible=None)
recv_case("deadline 3 s (under the 5 s minimum poll)", d.ILLEGAL_POLLING_TIME, timeout_s=3.0)
recv_case("negative long polling", d.ILLEGAL_POLLING_TIME, polling=dur(-1))
recv_case("no x-mq-client-id", d.CLIENT_ID_REQUIRED, metadata=())
case("empty request", "v2", "ReceiveMessage", const(s.ReceiveMessageRequest()), d.ILLEGAL_CONSUMER_GROUP)


# -- AckMessage / ChangeInvisibleDuration / ForwardMessageToDeadLetterQueue -----------------------

def _truncated(ctx: dict) -> str:
    return ctx["handle"][: len(ctx["handle"]) // 2]


def _flipped(ctx: dict) -> str:
    handle = ctx["handle"]
    return handle[:-1] + ("0" if handle[-1] != "0" else "1")


# label -> (handle builder, group, topic): every one must be refused with INVALID_RECEIPT_HANDLE
# and must not touch the seed message G2 holds (test_corpus checks the real handle still acks last).
BAD_HANDLES: dict[str, tuple[Callable[[dict], str], str, str]] = {
    "garbage": (const("garbage"), "G1", "TopicTest"),
    "digits": (const("1 2 3 4 5 6 7 8 9"), "G1", "TopicTest"),
    "10k chars": (const("x" * 10_000), "G1", "TopicTest"),
    "1 MiB": (const("h" * (1 << 20)), "G1", "TopicTest"),
    "NUL bytes": (const("\x00" * 32), "G1", "TopicTest"),
    "unicode": (const("\u4e2d\U0001f600\u202e"), "G1", "TopicTest"),
    "base64 noise": (const(base64.b64encode(bytes(range(256))).decode()), "G1", "TopicTest"),
    "negative numbers": (const("-1 -1 -1 -1 -1 -1 -1 -1 -1 -1"), "G1", "TopicTest"),
    "int64 overflow": (const(" ".join(["99999999999999999999"] * 10)), "G1", "TopicTest"),
    "truncated real": (_truncated, "G2", "OtherTopic"),
    "last char flipped": (_flipped, "G2", "OtherTopic"),
    "real, other group": (lambda ctx: ctx["handle"], "G1", "OtherTopic"),
    "real, other topic": (lambda ctx: ctx["handle"], "G2", "TopicTest"),
    "real, other group and topic": (lambda ctx: ctx["handle"], "G1", "TopicTest"),
    "real + suffix": (lambda ctx: ctx["handle"] + " 1", "G2", "OtherTopic"),
}


def _ack(handle: Callable[[dict], str], group: str, topic: str) -> Callable[[dict], s.AckMessageRequest]:
    return lambda ctx: s.AckMessageRequest(group=R(name=group), topic=R(name=topic), entries=[
        s.AckMessageEntry(message_id="m", receipt_handle=handle(ctx))])


def _change(handle: Callable[[dict], str], group: str, topic: str, invisible: Duration = dur(10)  # noqa: B008
            ) -> Callable[[dict], s.ChangeInvisibleDurationRequest]:
    return lambda ctx: s.ChangeInvisibleDurationRequest(
        group=R(name=group), topic=R(name=topic), receipt_handle=handle(ctx), invisible_duration=invisible,
        message_id="m")


def _dlq(handle: Callable[[dict], str], group: str, topic: str) -> Callable[[dict], Any]:
    return lambda ctx: s.ForwardMessageToDeadLetterQueueRequest(
        group=R(name=group), topic=R(name=topic), receipt_handle=handle(ctx), message_id="m", delivery_attempt=1,
        max_delivery_attempts=16)


for label, (handle, group, topic) in BAD_HANDLES.items():
    case(f"handle {label}", "v2", "AckMessage", _ack(handle, group, topic), d.INVALID_RECEIPT_HANDLE)
    case(f"handle {label}", "v2", "ChangeInvisibleDuration", _change(handle, group, topic), d.INVALID_RECEIPT_HANDLE)
    case(f"handle {label}", "v2", "ForwardMessageToDeadLetterQueue", _dlq(handle, group, topic),
         d.INVALID_RECEIPT_HANDLE)
EMPTY = const("")
case("handle empty", "v2", "AckMessage", _ack(EMPTY, "G1", "TopicTest"), d.INVALID_RECEIPT_HANDLE)
case("handle empty", "v2", "ChangeInvisibleDuration", _change(EMPTY, "G1", "TopicTest"), d.INVALID_RECEIPT_HANDLE)
case("handle empty", "v2", "ForwardMessageToDeadLetterQueue", _dlq(EMPTY, "G1", "TopicTest"),
     d.INVALID_RECEIPT_HANDLE)
GARBAGE = const("garbage")
for rpc, build in (("AckMessage", _ack), ("ChangeInvisibleDuration", _change),
                   ("ForwardMessageToDeadLetterQueue", _dlq)):
    for label, name in {"char space": "a b", "char star": "a*", "empty": "", "121 chars": "g" * 121}.items():
        case(f"group {label}", "v2", rpc, build(GARBAGE, name, "TopicTest"), d.ILLEGAL_CONSUMER_GROUP)
    case("system group CID_RMQ_SYS_TRANS", "v2", rpc, build(GARBAGE, "CID_RMQ_SYS_TRANS", "TopicTest"),
         d.ILLEGAL_CONSUMER_GROUP)
    for label, name in {"char space": "a b", "empty": "", "128 chars": "t" * 128}.items():
        case(f"topic {label}", "v2", rpc, build(GARBAGE, "G1", name), d.ILLEGAL_TOPIC)
    case("system topic RMQ_SYS_TRANS_HALF_TOPIC", "v2", rpc, build(GARBAGE, "G1", "RMQ_SYS_TRANS_HALF_TOPIC"),
         d.ILLEGAL_TOPIC)
    case("no x-mq-client-id", "v2", rpc, build(GARBAGE, "G1", "TopicTest"), d.CLIENT_ID_REQUIRED, metadata=())
case("no entries", "v2", "AckMessage", const(s.AckMessageRequest(group=R(name="G1"), topic=R(name="TopicTest"))),
     d.OK)  # nothing to acknowledge: the proxy answers OK for an empty entry list too
case("real and garbage entries", "v2", "AckMessage", lambda ctx: s.AckMessageRequest(
    group=R(name="G1"), topic=R(name="OtherTopic"), entries=[
        s.AckMessageEntry(message_id="a", receipt_handle=ctx["handle"]),
        s.AckMessageEntry(message_id="b", receipt_handle="garbage")]), d.INVALID_RECEIPT_HANDLE)
for label, invisible in {"negative": dur(-1), "negative nanos": dur(1, -1), "12 h + 1 ms": dur(12 * 3600, 1_000_000),
                         "100 years": dur(100 * 365 * _DAY), "int64 max": dur(2**63 - 1)}.items():
    case(f"invisible {label}", "v2", "ChangeInvisibleDuration", _change(GARBAGE, "G1", "TopicTest", invisible),
         d.ILLEGAL_INVISIBLE_TIME)


# -- QueryAssignment ---------------------------------------------------------------------------------

def assign_req(topic: str = "TopicTest", group: str = "G1") -> s.QueryAssignmentRequest:
    return s.QueryAssignmentRequest(topic=R(name=topic), group=R(name=group))


for label, name in {"char space": "a b", "char dot": "a.b", "empty": "", "121 chars": "g" * 121,
                    "char NUL": "a\x00"}.items():
    case(f"group {label}", "v2", "QueryAssignment", const(assign_req(group=name)), d.ILLEGAL_CONSUMER_GROUP)
for name in ("DEFAULT_CONSUMER", "CID_RMQ_SYS_TRANS", "TOOLS_CONSUMER"):
    case(f"system group {name}", "v2", "QueryAssignment", const(assign_req(group=name)), d.ILLEGAL_CONSUMER_GROUP)
for label, name in {"char space": "a b", "empty": "", "128 chars": "t" * 128}.items():
    case(f"topic {label}", "v2", "QueryAssignment", const(assign_req(topic=name)), d.ILLEGAL_TOPIC)
for name in ("TBW102", "RMQ_SYS_TRACE_TOPIC", "rmq_sys_wheel_timer"):
    case(f"system topic {name}", "v2", "QueryAssignment", const(assign_req(topic=name)), d.ILLEGAL_TOPIC)
case("no x-mq-client-id", "v2", "QueryAssignment", const(assign_req()), d.CLIENT_ID_REQUIRED, metadata=())


# -- EndTransaction -------------------------------------------------------------------------------------

def end_req(topic: str = "TxTopic", transaction_id: str = "NOPE", resolution: int = d.COMMIT,
            message_id: str = "NOPE") -> s.EndTransactionRequest:
    return s.EndTransactionRequest(topic=R(name=topic), message_id=message_id, transaction_id=transaction_id,
                                   resolution=resolution, source=d.SOURCE_CLIENT)


for label, tid in {"empty": "", "blank": "   ", "tab": "\t"}.items():
    case(f"transaction id {label}", "v2", "EndTransaction", const(end_req(transaction_id=tid)),
         d.INVALID_TRANSACTION_ID)
for label, tid in {"unknown": "NOPE", "unknown 10k": "T" * 10_000, "unknown unicode": "\u4e2d\U0001f600",
                   "other topic's message id": "SEED-1"}.items():
    case(f"transaction id {label} COMMIT", "v2", "EndTransaction", const(end_req(transaction_id=tid)),
         d.INVALID_TRANSACTION_ID)
    case(f"transaction id {label} ROLLBACK", "v2", "EndTransaction",
         const(end_req(transaction_id=tid, resolution=d.ROLLBACK)), d.INVALID_TRANSACTION_ID)
case("unknown id, resolution 99 (a no-op)", "v2", "EndTransaction", const(end_req(resolution=99)), d.OK)
case("unknown id, UNSPECIFIED (a no-op)", "v2", "EndTransaction",
     const(end_req(resolution=d.TRANSACTION_RESOLUTION_UNSPECIFIED)), d.OK)
for label, name in {"char space": "a b", "empty": "", "128 chars": "t" * 128}.items():
    case(f"topic {label}", "v2", "EndTransaction", const(end_req(topic=name)), d.ILLEGAL_TOPIC)
for name in ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TBW102"):
    case(f"system topic {name}", "v2", "EndTransaction", const(end_req(topic=name)), d.ILLEGAL_TOPIC)
case("no x-mq-client-id", "v2", "EndTransaction", const(end_req()), d.CLIENT_ID_REQUIRED, metadata=())
case("empty request", "v2", "EndTransaction", const(s.EndTransactionRequest()), d.ILLEGAL_TOPIC)


# -- RecallMessage ---------------------------------------------------------------------------------------

def _handle(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


def recall_req(topic: str = "DelayTopic", handle: str = "garbage") -> s.RecallMessageRequest:
    return s.RecallMessageRequest(topic=R(name=topic), recall_handle=handle)


_FUTURE_MS = str(int(time.time() * 1000) + 3_600_000)
for label, handle in {"empty": "", "garbage": "garbage!", "not base64": "%%%%", "base64 of nonsense": _handle("x"),
                      "version v2": _handle(f"v2 DelayTopic broker-a {_FUTURE_MS} ID"),
                      "4 fields": _handle(f"v1 DelayTopic broker-a {_FUTURE_MS}"),
                      "other topic": _handle(f"v1 TopicTest broker-a {_FUTURE_MS} ID"),
                      "other broker": _handle(f"v1 DelayTopic broker-z {_FUTURE_MS} ID"),
                      "invalid UTF-8": base64.urlsafe_b64encode(b"v1 \xff\xfe").decode()}.items():
    case(f"handle {label}", "v2", "RecallMessage", const(recall_req(handle=handle)), d.BAD_REQUEST)
for label, stamp in {"in the past": "1000", "negative": "-5", "not a number": "soon",
                     "31 days ahead": str(int(time.time() * 1000) + 31 * _DAY * 1000)}.items():
    case(f"handle timestamp {label}", "v2", "RecallMessage",
         const(recall_req(handle=_handle(f"v1 DelayTopic broker-a {stamp} ID"))), d.ILLEGAL_DELIVERY_TIME)
case("real handle, other DELAY topic", "v2", "RecallMessage",
     lambda ctx: recall_req("DelayTopic2", ctx["recall_handle"]), d.BAD_REQUEST)
case("real handle, NORMAL topic", "v2", "RecallMessage",
     lambda ctx: recall_req("TopicTest", ctx["recall_handle"]), d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE)
case("unknown topic", "v2", "RecallMessage", const(recall_req("NoSuchTopic")), d.TOPIC_NOT_FOUND)
for label, name in {"char space": "a b", "empty": "", "128 chars": "t" * 128}.items():
    case(f"topic {label}", "v2", "RecallMessage", const(recall_req(name)), d.ILLEGAL_TOPIC)
case("system topic rmq_sys_wheel_timer", "v2", "RecallMessage", const(recall_req("rmq_sys_wheel_timer")),
     d.ILLEGAL_TOPIC)
case("no x-mq-client-id", "v2", "RecallMessage", const(recall_req()), d.CLIENT_ID_REQUIRED, metadata=())


# -- QueryOffset / PullMessage / UpdateOffset / GetOffset ---------------------------------------------

def mq(topic: str = "TopicTest", queue_id: int = 0, broker: str | None = None) -> d.MessageQueue:
    queue = d.MessageQueue(topic=R(name=topic), id=queue_id)
    if broker is not None:
        queue.broker.name = broker
    return queue


QUEUE_ERRORS: dict[str, tuple[d.MessageQueue, int]] = {
    "topic char space": (mq("a b"), d.ILLEGAL_TOPIC),
    "topic empty": (mq(""), d.ILLEGAL_TOPIC),
    "topic 128 chars": (mq("t" * 128), d.ILLEGAL_TOPIC),
    "system topic TBW102": (mq("TBW102"), d.ILLEGAL_TOPIC),
    "system topic rmq_sys_wheel_timer": (mq("rmq_sys_wheel_timer"), d.ILLEGAL_TOPIC),
    "unknown topic": (mq("NoSuchTopic"), d.TOPIC_NOT_FOUND),
    "queue -1": (mq(queue_id=-1), d.BAD_REQUEST),
    "queue 4 of 4": (mq(queue_id=4), d.BAD_REQUEST),
    "queue int32 max": (mq(queue_id=2**31 - 1), d.BAD_REQUEST),
    "queue int32 min": (mq(queue_id=-(2**31)), d.BAD_REQUEST),
    "other broker": (mq(broker="broker-z"), d.BAD_REQUEST),
}
for label, (queue, code) in QUEUE_ERRORS.items():
    case(label, "v2", "QueryOffset", const(s.QueryOffsetRequest(message_queue=queue, query_offset_policy=d.END)), code)
    case(label, "v2", "PullMessage", const(s.PullMessageRequest(group=R(name="G1"), message_queue=queue, offset=0)),
         code)
    case(label, "v2", "UpdateOffset", const(s.UpdateOffsetRequest(group=R(name="G1"), message_queue=queue, offset=1)),
         code)
    case(label, "v2", "GetOffset", const(s.GetOffsetRequest(group=R(name="G1"), message_queue=queue)), code)
case("policy 99", "v2", "QueryOffset", const(s.QueryOffsetRequest(message_queue=mq(), query_offset_policy=99)),
     d.BAD_REQUEST)
case("TIMESTAMP without a timestamp", "v2", "QueryOffset",
     const(s.QueryOffsetRequest(message_queue=mq(), query_offset_policy=d.TIMESTAMP)), d.BAD_REQUEST)
case("no message queue", "v2", "QueryOffset", const(s.QueryOffsetRequest()), d.ILLEGAL_TOPIC)
for rpc, build in (
        ("PullMessage", lambda g: s.PullMessageRequest(group=R(name=g), message_queue=mq(), offset=0)),
        ("UpdateOffset", lambda g: s.UpdateOffsetRequest(group=R(name=g), message_queue=mq(), offset=1)),
        ("GetOffset", lambda g: s.GetOffsetRequest(group=R(name=g), message_queue=mq()))):
    for label, name in {"char space": "a b", "empty": "", "121 chars": "g" * 121, "char slash": "a/b"}.items():
        case(f"group {label}", "v2", rpc, const(build(name)), d.ILLEGAL_CONSUMER_GROUP)
    for name in ("CID_RMQ_SYS_TRANS", "DEFAULT_CONSUMER"):
        case(f"system group {name}", "v2", rpc, const(build(name)), d.ILLEGAL_CONSUMER_GROUP)
    case("no x-mq-client-id", "v2", rpc, const(build("G1")), d.CLIENT_ID_REQUIRED, metadata=())
for label, offset in {"-1": -1, "int64 min": -(2**63)}.items():
    case(f"offset {label}", "v2", "PullMessage",
         const(s.PullMessageRequest(group=R(name="G1"), message_queue=mq(), offset=offset)), d.ILLEGAL_OFFSET)
    case(f"offset {label}", "v2", "UpdateOffset",
         const(s.UpdateOffsetRequest(group=R(name="G1"), message_queue=mq(), offset=offset)), d.ILLEGAL_OFFSET)
case("offset beyond the end of a queue with messages", "v2", "PullMessage", lambda ctx: s.PullMessageRequest(
    group=R(name="G1"), message_queue=mq("OtherTopic", ctx["seed_queue"]), offset=2**62), d.ILLEGAL_OFFSET)
case("offset beyond the end of an empty queue", "v2", "PullMessage",
     const(s.PullMessageRequest(group=R(name="G1"), message_queue=mq(), offset=2**62)), d.ILLEGAL_OFFSET)
for label, expression in {"tag ||": "||", "SQL dangling >": "a >", "SQL garbage": "%%%"}.items():
    case(f"filter {label}", "v2", "PullMessage", const(s.PullMessageRequest(
        group=R(name="G1"), message_queue=mq(), offset=0, filter_expression=d.FilterExpression(
            type=d.SQL if label.startswith("SQL") else d.TAG, expression=expression))),
         d.ILLEGAL_FILTER_EXPRESSION)
case("negative long polling", "v2", "PullMessage", const(s.PullMessageRequest(
    group=R(name="G1"), message_queue=mq(), offset=0, long_polling_timeout=dur(-1))), d.ILLEGAL_POLLING_TIME)
case("never committed", "v2", "GetOffset", const(s.GetOffsetRequest(group=R(name="G1"), message_queue=mq(queue_id=3))),
     d.OFFSET_NOT_FOUND)


# -- Telemetry (bidirectional: the commands written, then half-close) -----------------------------

def settings(**kw: Any) -> s.TelemetryCommand:
    return s.TelemetryCommand(settings=d.Settings(**kw))


case("no x-mq-client-id", "v2", "Telemetry", const([settings(client_type=d.PRODUCER, publishing=d.Publishing(
    topics=[R(name="TopicTest")]))]), d.CLIENT_ID_REQUIRED, metadata=())
case("settings without publishing or subscription", "v2", "Telemetry",
     const([settings(client_type=d.PRODUCER)]), SC.INVALID_ARGUMENT)
case("empty settings", "v2", "Telemetry", const([settings()]), SC.INVALID_ARGUMENT)
