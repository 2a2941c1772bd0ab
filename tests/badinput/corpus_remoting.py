"""Corpus cases for the remoting door (RocketMQ's RemotingCommand protocol; the answer's ``code``
and ``remark``; ../shared/docs/remoting.md §1, §2).

``HEADERS`` is every request code the door serves: a header it reads in full (``base``), the
fields it cannot lack (``required``: RocketMQ's @CFNotNull fields the handler reads) and which of
them are Java ints or longs. From it, for every code: each required field missing in turn
(SYSTEM_ERROR "the custom field <name> is null"), each number not a number or beyond its Java
type (SYSTEM_ERROR naming the field). Then the named cases: unknown codes, sends, pulls, offsets,
heartbeats, transactions, send-backs. tests/badinput/test_corpus.py runs them on one connection
and checks after each that the connection still answers and nothing stored moved.

Where RocketMQ 5.3.2+ answers INVALID_PARAMETER (29) for an illegal topic or queue id (commit
b5cf3ca "Adjust some error code for SYSTEM_ERROR"), pyrmq answers SYSTEM_ERROR (1) as RocketMQ
4.x and 5.0-5.3.1 do; the cases pin 1. Fields RocketMQ marks @CFNotNull that pyrmq never reads
(SEND's defaultTopic, defaultTopicQueueNums; RESET's isForce; GET_KV_CONFIG's namespace and key)
are not required: RocketMQ 5 only logs a missing one too (RemotingCommand.decodeCommandCustomHeader
catches its own "is null" exception; FastCodesHeader.getAndCheckNotNull only logs).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.domain.names import (
    OFFSET_MOVED_EVENT_TOPIC,
    SCHEDULE_TOPIC,
    SELF_TEST_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)
from services.domain.remoting.batch import encode_batch
from services.domain.remoting.codes import RequestCode as RC
from services.domain.remoting.codes import ResponseCode as C
from services.domain.remoting.command import SERIALIZE_ROCKETMQ, RemotingCommand
from tests.badinput.cases import BAD_NAMES, LONG_TOPICS, case
from tests.badinput.remoting_wire import Raw, binary_frame, json_frame, next_opaque

# The group a heartbeat registers before the remoting cases run (test_corpus.py): subscribed to
# TopicTest ("*", subVersion SUB_VERSION), not to OtherTopic.
REMOTING_GROUP = "RG"
SUB_VERSION = 1000
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
GET_SUBSCRIPTIONGROUP_CONFIG = 352
# RocketMQ's TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET (msgCheck: NO_PERMISSION).
NOT_ALLOWED_SEND_TOPICS = (
    SCHEDULE_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC,
    SELF_TEST_TOPIC,
    OFFSET_MOVED_EVENT_TOPIC,
)
NO_SUCH_TOPIC = "RemotingNoSuchTopic"
NO_SUCH_GROUP = "RemotingNoSuchGroup"


@dataclass(frozen=True)
class Header:
    """One request code: a header with every field it reads, well formed (refusals still come
    from the names: the cases never leave anything behind), and what must be there."""

    base: dict[str, str]
    required: tuple[str, ...] = ()
    ints: tuple[str, ...] = ()  # Java int fields (Integer.parseInt)
    longs: tuple[str, ...] = ()  # Java long fields (Long.parseLong)
    body: bytes = b""
    destructive: bool = False  # deletes, creates or rewrites: the fuzz keeps off the seeded names
    names: dict[str, str] = field(default_factory=dict)  # a field's name in remarks (V2's one-letter keys)


SEND = {
    "producerGroup": "PG", "topic": "TopicTest", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
    "queueId": "0", "sysFlag": "0", "bornTimestamp": "0", "flag": "0", "properties": "", "reconsumeTimes": "0",
}  # fmt: skip
SEND_REQUIRED = ("producerGroup", "topic", "queueId", "sysFlag", "bornTimestamp", "flag")
V2_KEYS = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
           "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes"}  # fmt: skip
SEND_V2 = {key: SEND[name] for key, name in V2_KEYS.items()}
PULL = {
    "consumerGroup": REMOTING_GROUP, "topic": "TopicTest", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
    "sysFlag": "4", "commitOffset": "0", "suspendTimeoutMillis": "0", "subVersion": "0", "subscription": "*",
    "expressionType": "TAG",
}  # fmt: skip
PULL_REQUIRED = ("consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
                 "suspendTimeoutMillis", "subVersion")  # fmt: skip
QUEUE = {"topic": "TopicTest", "queueId": "0"}


def _send(long_names: bool) -> Header:
    if long_names:
        return Header(SEND, SEND_REQUIRED, ("queueId", "sysFlag", "flag"), ("bornTimestamp",), b"x")
    return Header(SEND_V2, ("a", "b", "e", "f", "g", "h"), ("e", "f", "h"), ("g",), b"x", names=V2_KEYS)


HEADERS: dict[int, Header] = {
    # name server
    RC.GET_ROUTEINFO_BY_TOPIC: Header({"topic": "TopicTest"}, ("topic",)),
    RC.GET_BROKER_CLUSTER_INFO: Header({}),
    RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: Header({}),
    RC.GET_TOPICS_BY_CLUSTER: Header({"cluster": "DefaultCluster"}),
    RC.GET_SYSTEM_TOPIC_LIST_FROM_NS: Header({}),
    RC.GET_KV_CONFIG: Header({"namespace": "ORDER_TOPIC_CONFIG", "key": "TopicTest"}),
    RC.GET_KVLIST_BY_NAMESPACE: Header({"namespace": "ORDER_TOPIC_CONFIG"}),
    RC.DELETE_TOPIC_IN_NAMESRV: Header({"topic": NO_SUCH_TOPIC}, destructive=True),
    # producer
    RC.SEND_MESSAGE: _send(True),
    RC.SEND_REPLY_MESSAGE: _send(True),
    RC.SEND_MESSAGE_V2: _send(False),
    RC.SEND_REPLY_MESSAGE_V2: _send(False),
    RC.SEND_BATCH_MESSAGE: Header(
        {**SEND_V2, "m": "true"}, ("a", "b", "e", "f", "g", "h"), ("e", "f", "h"), ("g",),
        encode_batch([(0, b"x", {}), (0, b"y", {})]), names=V2_KEYS,
    ),  # fmt: skip
    RC.END_TRANSACTION: Header(
        {"producerGroup": "PG", "tranStateTableOffset": "0", "commitLogOffset": "0", "commitOrRollback": "0",
         "msgId": "NO-SUCH-TRANSACTION", "topic": "TxTopic"},
        ("producerGroup", "commitLogOffset", "tranStateTableOffset", "commitOrRollback", "msgId"),
        ("commitOrRollback",), ("commitLogOffset", "tranStateTableOffset"),
    ),  # fmt: skip
    RC.CONSUMER_SEND_MSG_BACK: Header(
        {"offset": "0", "group": NO_SUCH_GROUP, "delayLevel": "0"}, ("offset", "group", "delayLevel"),
        ("delayLevel",), ("offset",),
    ),  # fmt: skip
    # consumer
    RC.PULL_MESSAGE: Header(PULL, PULL_REQUIRED, ("queueId", "maxMsgNums", "sysFlag"),
                            ("queueOffset", "commitOffset", "suspendTimeoutMillis", "subVersion")),  # fmt: skip
    RC.LITE_PULL_MESSAGE: Header(PULL, PULL_REQUIRED, ("queueId", "maxMsgNums", "sysFlag"),
                                 ("queueOffset", "commitOffset", "suspendTimeoutMillis", "subVersion")),  # fmt: skip
    RC.HEART_BEAT: Header({}, body=json.dumps({"clientID": "fuzz@1", "consumerDataSet": []}).encode()),
    RC.UNREGISTER_CLIENT: Header({"clientID": "nobody@1", "consumerGroup": NO_SUCH_GROUP}, ("clientID",)),
    RC.GET_CONSUMER_LIST_BY_GROUP: Header({"consumerGroup": "G1"}, ("consumerGroup",)),
    RC.QUERY_CONSUMER_OFFSET: Header({"consumerGroup": "G1", **QUEUE}, ("consumerGroup", "topic", "queueId"), ("queueId",)),
    RC.UPDATE_CONSUMER_OFFSET: Header(
        {"consumerGroup": "G1", **QUEUE, "commitOffset": "0"}, ("consumerGroup", "topic", "queueId", "commitOffset"),
        ("queueId",), ("commitOffset",),
    ),  # fmt: skip
    RC.SEARCH_OFFSET_BY_TIMESTAMP: Header({**QUEUE, "timestamp": "0"}, ("topic", "queueId", "timestamp"),
                                          ("queueId",), ("timestamp",)),  # fmt: skip
    RC.GET_MAX_OFFSET: Header(QUEUE, ("topic", "queueId"), ("queueId",)),
    RC.GET_MIN_OFFSET: Header(QUEUE, ("topic", "queueId"), ("queueId",)),
    RC.GET_EARLIEST_MSG_STORETIME: Header(QUEUE, ("topic", "queueId"), ("queueId",)),
    RC.LOCK_BATCH_MQ: Header({}, body=b'{"consumerGroup":"G1","clientId":"nobody@1","mqSet":[]}'),
    RC.UNLOCK_BATCH_MQ: Header({}, body=b'{"consumerGroup":"G1","clientId":"nobody@1","mqSet":[]}'),
    RC.CHECK_CLIENT_CONFIG: Header({}, body=b'{"subscriptionData":{"expressionType":"TAG","subString":"*"}}'),
    RC.POP_MESSAGE: Header(
        {"consumerGroup": "G1", "topic": "TopicTest", "queueId": "-1", "maxMsgNums": "32", "invisibleTime": "60000",
         "pollTime": "0", "bornTime": "0", "initMode": "0"},
        ("consumerGroup", "topic", "queueId", "maxMsgNums", "invisibleTime", "pollTime", "bornTime"),
        ("queueId", "maxMsgNums"), ("invisibleTime", "pollTime", "bornTime"),
    ),
    RC.ACK_MESSAGE: Header(
        {"consumerGroup": "G1", "topic": "TopicTest", "queueId": "0", "extraInfo": "0 1 60000 0 0 b 0 0", "offset": "0"},
        ("consumerGroup", "topic", "queueId", "extraInfo", "offset"), ("queueId",), ("offset",),
    ),
    RC.CHANGE_MESSAGE_INVISIBLETIME: Header(
        {"consumerGroup": "G1", "topic": "TopicTest", "queueId": "0", "extraInfo": "0 1 60000 0 0 b 0 0", "offset": "0",
         "invisibleTime": "1000"},
        ("consumerGroup", "topic", "queueId", "extraInfo", "offset", "invisibleTime"), ("queueId",),
        ("offset", "invisibleTime"),
    ),
    RC.BATCH_ACK_MESSAGE: Header({}, body=b'{"acks":[]}'),
    RC.QUERY_ASSIGNMENT: Header({}, body=b'{"topic":"TopicTest","consumerGroup":"G1","clientId":"c@1"}'),
    RC.SET_MESSAGE_REQUEST_MODE: Header(
        {}, body=b'{"topic":"NoSuchTopicForModes","consumerGroup":"G1","mode":"PULL"}', destructive=True
    ),
    # queries and operators
    RC.QUERY_MESSAGE: Header(
        {"topic": "TopicTest", "key": "k", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "1"},
        ("topic", "key", "maxNum", "beginTimestamp", "endTimestamp"), ("maxNum",), ("beginTimestamp", "endTimestamp"),
    ),  # fmt: skip
    RC.VIEW_MESSAGE_BY_ID: Header({"offset": "0"}, ("offset",), longs=("offset",)),
    RC.GET_TOPIC_STATS_INFO: Header({"topic": "TopicTest"}, ("topic",)),
    RC.GET_CONSUME_STATS: Header({"consumerGroup": "G1"}, ("consumerGroup",)),
    RC.QUERY_TOPIC_CONSUME_BY_WHO: Header({"topic": "TopicTest"}, ("topic",)),
    RC.INVOKE_BROKER_TO_RESET_OFFSET: Header(
        {"topic": NO_SUCH_TOPIC, "group": NO_SUCH_GROUP, "timestamp": "0", "isForce": "true"},
        ("topic", "group", "timestamp"), longs=("timestamp",), destructive=True,
    ),  # fmt: skip
    RC.UPDATE_AND_CREATE_TOPIC: Header(
        {"topic": "RemotingNewTopic", "readQueueNums": "4", "writeQueueNums": "4", "perm": "6"},
        ("topic", "writeQueueNums", "readQueueNums"), ("writeQueueNums", "readQueueNums"), destructive=True,
    ),  # fmt: skip
    RC.DELETE_TOPIC_IN_BROKER: Header({"topic": NO_SUCH_TOPIC}, ("topic",), destructive=True),
    RC.GET_ALL_TOPIC_CONFIG: Header({}),
    RC.GET_TOPIC_CONFIG: Header({"topic": "TopicTest"}, ("topic",)),
    RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: Header({}, body=b"{}", destructive=True),
    RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: Header({}),
    GET_SUBSCRIPTIONGROUP_CONFIG: Header({"group": "G1"}, ("group",)),
    RC.DELETE_SUBSCRIPTIONGROUP: Header({"groupName": NO_SUCH_GROUP}, ("groupName",), destructive=True),
    RC.GET_BROKER_CONFIG: Header({}),
    RC.GET_BROKER_RUNTIME_INFO: Header({}),
    RC.VIEW_BROKER_STATS_DATA: Header({"statsName": "TOPIC_PUT_NUMS", "statsKey": "TopicTest"}, ("statsName", "statsKey")),
    RC.GET_CONSUMER_CONNECTION_LIST: Header({"consumerGroup": "G1"}, ("consumerGroup",)),
    RC.GET_PRODUCER_CONNECTION_LIST: Header({"producerGroup": "PG"}, ("producerGroup",)),
    RC.GET_ALL_PRODUCER_INFO: Header({}),
    RC.GET_CONSUMER_RUNNING_INFO: Header({"consumerGroup": "G1", "clientId": "nobody@1"}, ("consumerGroup", "clientId")),
    RC.CONSUME_MESSAGE_DIRECTLY: Header({"consumerGroup": "G1", "clientId": "nobody@1", "msgId": "X"}, ("consumerGroup",)),
}  # fmt: skip


def code_name(code: int) -> str:
    try:
        return RC(code).name
    except ValueError:
        return "GET_SUBSCRIPTIONGROUP_CONFIG" if code == GET_SUBSCRIPTIONGROUP_CONFIG else str(code)


def req(code: int, fields: dict[str, str], body: bytes = b"", binary: bool = False) -> RemotingCommand:
    return RemotingCommand(code, 0, 0, dict(fields), body, serialize_type=SERIALIZE_ROCKETMQ if binary else 0)


def rcase(
    id_: str,
    code: int,
    fields: dict[str, str] | Callable[[dict[str, Any]], RemotingCommand | Raw],
    expected: int,
    remark: str | None = None,
    body: bytes = b"",
    binary: bool = False,
    **kw: object,
) -> None:
    """A remoting case: ``fields`` the request's extFields (or a builder of the whole request)."""
    build = fields if callable(fields) else (lambda ctx, f=dict(fields): req(code, f, body, binary))
    case(id_, "remoting", code_name(code), build, expected, remark=remark, **kw)


def raw_json(code: int, fields: dict[str, object], body: bytes = b"") -> Callable[[dict[str, Any]], Raw]:
    """A JSON header with any JSON values in extFields (ali-ons' numbers, nulls, ``\\udXXX``)."""

    def build(ctx: dict[str, Any]) -> Raw:
        opaque = next_opaque()
        return Raw(json_frame({"code": code, "opaque": opaque, "flag": 0, "extFields": fields}, body), opaque)

    return build


def binary_raw(code: int, fields: dict[str, str], body: bytes = b"") -> Callable[[dict[str, Any]], Raw]:
    """A binary header whose int16 code is any 16 bits."""

    def build(ctx: dict[str, Any]) -> Raw:
        opaque = next_opaque()
        return Raw(binary_frame(code, fields, opaque, body), opaque)

    return build


def without(fields: dict[str, str], name: str) -> dict[str, str]:
    return {k: v for k, v in fields.items() if k != name}


# The corpus is a table, one case a line: kept as written, not reformatted.
# fmt: off

# -- every code: a required field missing, a number that is not one ------------------------------

NOT_NUMBERS = {"letters": "abc", "empty": "", "decimal": "1.5", "hex": "0x10", "exponent": "1e3"}
for code, header in HEADERS.items():
    for name in header.required:
        shown = header.names.get(name, name)
        rcase(f"{name} missing", code, without(header.base, name), C.SYSTEM_ERROR, f"the custom field <{shown}> is null",
              header.body)
    for name in header.ints + header.longs:
        shown = header.names.get(name, name)
        forms = NOT_NUMBERS if code in (RC.SEND_MESSAGE_V2, RC.PULL_MESSAGE) else {"letters": "abc"}
        for label, value in forms.items():
            rcase(f"{name} {label} {value!r}", code, {**header.base, name: value}, C.SYSTEM_ERROR, shown, header.body)
        top = INT_MAX if name in header.ints else LONG_MAX
        rcase(f"{name} beyond Java {'int' if top == INT_MAX else 'long'}", code, {**header.base, name: str(top + 1)},
              C.SYSTEM_ERROR, shown, header.body)

# the same in a binary (ROCKETMQ) header, and as ali-ons' JSON scalars
rcase("binary header: b missing", RC.SEND_MESSAGE_V2, without(SEND_V2, "b"), C.SYSTEM_ERROR,
      "the custom field <topic> is null", b"x", binary=True)
rcase("binary header: queueId letters", RC.PULL_MESSAGE, {**PULL, "queueId": "abc"}, C.SYSTEM_ERROR, "queueId", binary=True)
rcase("JSON null queueId is missing", RC.GET_MAX_OFFSET, raw_json(RC.GET_MAX_OFFSET, {"topic": "TopicTest", "queueId": None}),
      C.SYSTEM_ERROR, "the custom field <queueId> is null")
rcase("JSON true queueId", RC.GET_MAX_OFFSET, raw_json(RC.GET_MAX_OFFSET, {"topic": "TopicTest", "queueId": True}),
      C.SYSTEM_ERROR, "queueId")
rcase("JSON 1e3 queueId", RC.GET_MAX_OFFSET, raw_json(RC.GET_MAX_OFFSET, {"topic": "TopicTest", "queueId": 1e3}),
      C.SYSTEM_ERROR, "queueId")

# -- unknown codes -------------------------------------------------------------------------------

for code in (0, -1, 9999, 32767, RC.CHECK_TRANSACTION_STATE, RC.NOTIFY_CONSUMER_IDS_CHANGED, RC.REGISTER_BROKER):
    rcase("unknown code", code, {}, C.REQUEST_CODE_NOT_SUPPORTED, f" request type {int(code)} not supported")
rcase("JSON header: code above 32767 read whole", 200099, {}, C.REQUEST_CODE_NOT_SUPPORTED,
      " request type 200099 not supported")
rcase("JSON header: code 2^31 - 1", INT_MAX, {}, C.REQUEST_CODE_NOT_SUPPORTED, f" request type {INT_MAX} not supported")
rcase("binary header: unknown code", 9999, {}, C.REQUEST_CODE_NOT_SUPPORTED, " request type 9999 not supported", binary=True)
rcase("binary header: a code above 32767 (negative int16)", 50000, binary_raw(50000, {}), C.REQUEST_CODE_NOT_SUPPORTED,
      "not supported")

# -- sends ---------------------------------------------------------------------------------------


def send_case(id_: str, expected: int, remark: str | None, body: bytes = b"x", code: int = RC.SEND_MESSAGE_V2,
              binary: bool = False, **fields: str) -> None:
    base = SEND if code == RC.SEND_MESSAGE else SEND_V2
    rcase(id_, code, {**base, **fields}, expected, remark, body, binary)


for label, name in BAD_NAMES.items():
    blank = not name.strip()
    send_case(f"topic {label}", C.SYSTEM_ERROR, "The specified topic is blank." if blank else "contains illegal characters",
              b=name)
send_case("topic empty", C.SYSTEM_ERROR, "The specified topic is blank.", b="")
for label, name in LONG_TOPICS.items():
    send_case(f"topic {label}", C.SYSTEM_ERROR, "longer than", b=name)
send_case("long names: topic with a space", C.SYSTEM_ERROR, "contains illegal characters", code=RC.SEND_MESSAGE,
          topic="Bad Name")
send_case("binary header: topic with a slash", C.SYSTEM_ERROR, "contains illegal characters", binary=True, b="Bad/Name")
rcase("topic with a lone surrogate (written back as ?)", RC.SEND_MESSAGE_V2,
      raw_json(RC.SEND_MESSAGE_V2, {**SEND_V2, "b": "Bad\ud800Name"}, b"x"), C.SYSTEM_ERROR, "Bad?Name")
for name in NOT_ALLOWED_SEND_TOPICS:
    send_case(f"system topic {name}", C.NO_PERMISSION, f"Sending message to topic[{name}] is forbidden.", b=name)
send_case("topic does not exist", C.TOPIC_NOT_EXIST, f"for the topic: {NO_SUCH_TOPIC}", b=NO_SUCH_TOPIC)
send_case("long names: topic does not exist", C.TOPIC_NOT_EXIST, NO_SUCH_TOPIC, code=RC.SEND_MESSAGE, topic=NO_SUCH_TOPIC)
send_case("queueId 4 of 4 queues", C.SYSTEM_ERROR, "request queueId[4] is illegal", e="4")
send_case("queueId 2^31 - 1", C.SYSTEM_ERROR, f"request queueId[{INT_MAX}] is illegal", e=str(INT_MAX))
send_case("brokerName not served here", C.SYSTEM_ERROR, "nope", n="nope")
send_case("body empty", C.MESSAGE_ILLEGAL, "body", b"")
send_case("body 4 MiB + 1", C.MESSAGE_ILLEGAL, "body", b"x" * ((4 << 20) + 1))
send_case("body 8 MiB", C.MESSAGE_ILLEGAL, "body", b"x" * (8 << 20))
send_case("properties 40 KiB", C.MESSAGE_ILLEGAL, "properties", i="k\x01" + "v" * (40 << 10))
send_case("properties 1 MiB", C.MESSAGE_ILLEGAL, "properties", i="k\x01" + "v" * (1 << 20))
send_case("properties 40 KiB of keys", C.MESSAGE_ILLEGAL, "properties",
          i="".join(f"key{n}\x01v\x02" for n in range(5000)))
rcase("property with a lone surrogate", RC.SEND_MESSAGE_V2,
      raw_json(RC.SEND_MESSAGE_V2, {**SEND_V2, "i": "k\x01\ud800v\x02"}, b"x"), C.MESSAGE_ILLEGAL, "propert")
DAYS_10_MS = 10 * 86_400_000
send_case("TIMER_DELIVER_MS 10 days ahead", C.MESSAGE_ILLEGAL, "delay",
          i=f"TIMER_DELIVER_MS\x01{int(time.time() * 1000) + DAYS_10_MS}\x02")
send_case("TIMER_DELAY_SEC 10 days", C.MESSAGE_ILLEGAL, "delay", i=f"TIMER_DELAY_SEC\x01{DAYS_10_MS // 1000}\x02")
send_case("TIMER_DELAY_MS 10 days", C.MESSAGE_ILLEGAL, "delay", i=f"TIMER_DELAY_MS\x01{DAYS_10_MS}\x02")
send_case("TIMER_DELIVER_MS letters", C.MESSAGE_ILLEGAL, "TIMER_DELIVER_MS", i="TIMER_DELIVER_MS\x01abc\x02")
send_case("TIMER_DELAY_SEC letters", C.MESSAGE_ILLEGAL, "TIMER_DELAY_SEC", i="TIMER_DELAY_SEC\x01abc\x02")

# batches (SEND_BATCH_MESSAGE: the body is RocketMQ's inner-batch encoding)
BATCH = {**SEND_V2, "m": "true"}
GOOD_BATCH = encode_batch([(0, b"x", {"k": "v"}), (0, b"y", {})])
for label, body in {
    "empty": b"",
    "truncated to 7 bytes": GOOD_BATCH[:7],
    "second message cut short": GOOD_BATCH[:-3],
    "garbage": b"\xff" * 64,
    "total size 2^31 - 1": b"\x7f\xff\xff\xff" + GOOD_BATCH[4:],
    "body length negative": GOOD_BATCH[:16] + b"\xff\xff\xff\xfb" + GOOD_BATCH[20:],
    "a message with an empty body": encode_batch([(0, b"x", {}), (0, b"", {})]),
}.items():
    rcase(f"batch {label}", RC.SEND_BATCH_MESSAGE, BATCH, C.MESSAGE_ILLEGAL, None, body)
rcase("batch to a missing topic", RC.SEND_BATCH_MESSAGE, {**BATCH, "b": NO_SUCH_TOPIC}, C.TOPIC_NOT_EXIST, NO_SUCH_TOPIC,
      GOOD_BATCH)

# -- pulls ---------------------------------------------------------------------------------------


def pull_case(id_: str, expected: int, remark: str | None, bug: str | None = None, **fields: str) -> None:
    rcase(id_, RC.PULL_MESSAGE, {**PULL, **fields}, expected, remark, bug=bug)


pull_case("TAG expression '||'", C.SUBSCRIPTION_PARSE_FAILED, "||", subscription="||")
pull_case("SQL92 expression 'a >'", C.SUBSCRIPTION_PARSE_FAILED, "SQL92", subscription="a >", expressionType="SQL92")
pull_case("SQL92 expression unbalanced", C.SUBSCRIPTION_PARSE_FAILED, "SQL92", subscription="(a = 1",
          expressionType="SQL92")
pull_case("expressionType unknown", C.SYSTEM_ERROR, "XYZ", subscription="a", expressionType="XYZ")
pull_case("no SUBSCRIPTION bit, group never heartbeat", C.SUBSCRIPTION_NOT_EXIST, "G1", consumerGroup="G1", sysFlag="0")
pull_case("no SUBSCRIPTION bit, topic not subscribed", C.SUBSCRIPTION_NOT_EXIST, "OtherTopic", topic="OtherTopic",
          sysFlag="0")
pull_case("subVersion newer than the heartbeat's", C.SUBSCRIPTION_NOT_LATEST, "not latest", sysFlag="0",
          subVersion=str(SUB_VERSION + 1))
pull_case("queueId -1", C.SYSTEM_ERROR, "-1", queueId="-1")
pull_case("queueId 4 of 4 queues", C.SYSTEM_ERROR, "4", queueId="4")
pull_case("queueOffset -5", C.PULL_OFFSET_MOVED, None, queueOffset="-5")  # OFFSET_TOO_SMALL, or NO_MESSAGE_IN_QUEUE while empty
pull_case("topic does not exist", C.TOPIC_NOT_EXIST, NO_SUCH_TOPIC, topic=NO_SUCH_TOPIC)
pull_case("topic illegal", C.SYSTEM_ERROR, "contains illegal characters", topic="Bad Name")
pull_case("group illegal", C.SYSTEM_ERROR, "The specified group", consumerGroup="Bad Group")
rcase("lite pull: TAG expression '||'", RC.LITE_PULL_MESSAGE, {**PULL, "subscription": "||"},
      C.SUBSCRIPTION_PARSE_FAILED, "||")

# -- offsets -------------------------------------------------------------------------------------

MISSING_QUEUE = {"topic": NO_SUCH_TOPIC, "queueId": "0"}
for code in (RC.GET_MAX_OFFSET, RC.GET_MIN_OFFSET, RC.GET_EARLIEST_MSG_STORETIME):
    rcase("topic does not exist", code, MISSING_QUEUE, C.TOPIC_NOT_EXIST, NO_SUCH_TOPIC)
    rcase("queueId -1", code, {**QUEUE, "queueId": "-1"}, C.SYSTEM_ERROR, "-1")
    rcase("queueId 4 of 4 queues", code, {**QUEUE, "queueId": "4"}, C.SYSTEM_ERROR, "4")
rcase("topic does not exist", RC.SEARCH_OFFSET_BY_TIMESTAMP, {**MISSING_QUEUE, "timestamp": "0"}, C.TOPIC_NOT_EXIST,
      NO_SUCH_TOPIC)
rcase("topic does not exist", RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G1", **MISSING_QUEUE, "commitOffset": "1"},
      C.TOPIC_NOT_EXIST, NO_SUCH_TOPIC)
rcase("queueId 4 of 4 queues", RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "G1", **QUEUE, "queueId": "4",
      "commitOffset": "1"}, C.SYSTEM_ERROR, "4")
rcase("group illegal", RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "Bad Group", **QUEUE, "commitOffset": "1"},
      C.SYSTEM_ERROR, "The specified group")
rcase("group does not exist", RC.UPDATE_CONSUMER_OFFSET, {"consumerGroup": NO_SUCH_GROUP, **QUEUE, "commitOffset": "1"},
      C.SUBSCRIPTION_GROUP_NOT_EXIST, NO_SUCH_GROUP)
rcase("topic does not exist", RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G1", **MISSING_QUEUE}, C.QUERY_NOT_FOUND, "Not found")
rcase("queueId 4 of 4 queues", RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "G1", **QUEUE, "queueId": "4"},
      C.QUERY_NOT_FOUND, "Not found")
rcase("setZeroIfNotFound false, nothing committed", RC.QUERY_CONSUMER_OFFSET,
      {"consumerGroup": "RemotingNeverCommitted", **QUEUE, "setZeroIfNotFound": "false"}, C.QUERY_NOT_FOUND, "Not found")

# -- heartbeats, locks, client config ------------------------------------------------------------


def heartbeat(data: object) -> bytes:
    return json.dumps(data).encode() if not isinstance(data, bytes) else data


HEARTBEATS: dict[str, object] = {
    "body empty": b"",
    "body not JSON": b"{clientID",
    "body a JSON array": b"[1]",
    "body a JSON string": b'"x"',
    "no clientID": {"consumerDataSet": []},
    "clientID a number": {"clientID": 5},
    "consumerDataSet a string": {"clientID": "c@1", "consumerDataSet": "x"},
    "subscriptionDataSet a number": {"clientID": "c@1", "consumerDataSet": [{"groupName": "RGNew", "subscriptionDataSet": 5}]},
    "group illegal": {"clientID": "c@1", "consumerDataSet": [{"groupName": "Bad Group", "subscriptionDataSet": []}]},
}
for label, data in HEARTBEATS.items():
    rcase(label, RC.HEART_BEAT, {}, C.SYSTEM_ERROR, None, heartbeat(data))
rcase("TAG expression '||'", RC.HEART_BEAT, {}, C.SUBSCRIPTION_PARSE_FAILED, "||", heartbeat(
    {"clientID": "c@1", "consumerDataSet": [{"groupName": "RGNew", "subscriptionDataSet": [
        {"topic": "TopicTest", "subString": "||", "expressionType": "TAG", "subVersion": 1}]}]}))
for code in (RC.LOCK_BATCH_MQ, RC.UNLOCK_BATCH_MQ):
    rcase("body not JSON", code, {}, C.SYSTEM_ERROR, "JSON", b"{x")
    rcase("no consumerGroup", code, {}, C.SYSTEM_ERROR, "consumerGroup", b'{"clientId":"c@1","mqSet":[]}')
    rcase("mqSet a number", code, {}, C.SYSTEM_ERROR, "mqSet", b'{"consumerGroup":"G1","clientId":"c@1","mqSet":5}')
    rcase("queueId letters", code, {}, C.SYSTEM_ERROR, "queueId",
          b'{"consumerGroup":"G1","clientId":"c@1","mqSet":[{"topic":"TopicTest","brokerName":"b","queueId":"x"}]}')
rcase("subscriptionData a number", RC.CHECK_CLIENT_CONFIG, {}, C.SYSTEM_ERROR, "subscriptionData",
      b'{"subscriptionData":5}')
rcase("SQL92 expression 'a >'", RC.CHECK_CLIENT_CONFIG, {}, C.SUBSCRIPTION_PARSE_FAILED, "SQL92",
      b'{"subscriptionData":{"expressionType":"SQL92","subString":"a >"}}')

# -- transactions and send-backs -----------------------------------------------------------------

END = HEADERS[RC.END_TRANSACTION].base
rcase("commitOrRollback 5", RC.END_TRANSACTION, {**END, "commitOrRollback": "5"}, C.SYSTEM_ERROR, "commitOrRollback 5")
rcase("commit of no half message (topic named)", RC.END_TRANSACTION, {**END, "commitOrRollback": "8"}, C.SYSTEM_ERROR,
      "no half message")
rcase("commit of no half message (4.x: no topic)", RC.END_TRANSACTION,
      {**without(END, "topic"), "commitOrRollback": "8", "commitLogOffset": str(1 << 40)}, C.SYSTEM_ERROR,
      "no half message")
rcase("rollback at a negative commit-log offset", RC.END_TRANSACTION,
      {**without(END, "topic"), "commitOrRollback": "12", "commitLogOffset": "-1"}, C.SYSTEM_ERROR, "-1")
BACK = HEADERS[RC.CONSUMER_SEND_MSG_BACK].base
rcase("group does not exist", RC.CONSUMER_SEND_MSG_BACK, BACK, C.SUBSCRIPTION_GROUP_NOT_EXIST, NO_SUCH_GROUP)
rcase("group illegal", RC.CONSUMER_SEND_MSG_BACK, {**BACK, "group": "Bad Group"}, C.SUBSCRIPTION_GROUP_NOT_EXIST,
      "Bad Group")
rcase("offset of no message", RC.CONSUMER_SEND_MSG_BACK, {**BACK, "group": "G1", "offset": str(1 << 40)},
      C.SYSTEM_ERROR, str(1 << 40))
rcase("offset negative", RC.CONSUMER_SEND_MSG_BACK, {**BACK, "group": "G1", "offset": "-1"}, C.SYSTEM_ERROR, "-1")

# -- routes --------------------------------------------------------------------------------------

for label, topic in {"does not exist": NO_SUCH_TOPIC, "illegal": "Bad Name", "lone surrogate": "\udc00"}.items():
    rcase(f"topic {label}", RC.GET_ROUTEINFO_BY_TOPIC, raw_json(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}),
          C.TOPIC_NOT_EXIST, "No topic route info in name server for the topic")
