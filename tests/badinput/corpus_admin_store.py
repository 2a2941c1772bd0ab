"""Corpus cases for pyrmq.admin.v1.Admin and pyrmq.store.v1.Store (real gRPC status codes, or
``InBand`` for a store result's status)."""

from __future__ import annotations

from typing import Any

from pyrmq.admin.v1 import admin_pb2 as apb
from pyrmq.store.v1 import store_pb2 as pb

from tests.badinput.cases import BAD_NAMES, SC, SYSTEM_GROUP_NAMES, SYSTEM_TOPIC_NAMES, InBand, case, const

# -- Admin (real gRPC status codes) ------------------------------------------------------------------

for label, name in {
    **BAD_NAMES,
    "empty": "",
    "128 chars": "t" * 128,
    "%RETRY% 256 chars": "%RETRY%" + "r" * 249,
}.items():
    case(f"topic {label}", "admin", "CreateTopic", const(apb.CreateTopicRequest(name=name)), SC.INVALID_ARGUMENT)
for name in SYSTEM_TOPIC_NAMES:
    case(f"system topic {name}", "admin", "CreateTopic", const(apb.CreateTopicRequest(name=name)), SC.INVALID_ARGUMENT)
for label, nums in {"queue nums 1025": 1025, "queue nums -1": -1, "queue nums int32 max": 2**31 - 1}.items():
    case(
        label,
        "admin",
        "CreateTopic",
        const(apb.CreateTopicRequest(name="NewTopic", queue_nums=nums)),
        SC.INVALID_ARGUMENT,
    )
case(
    "message type 99",
    "admin",
    "CreateTopic",
    const(apb.CreateTopicRequest(name="NewTopic", message_type=99)),
    SC.INVALID_ARGUMENT,
)
for label, name in {
    "char space": "a b",
    "char slash": "a/b",
    "empty": "",
    "121 chars": "g" * 121,
    "char emoji": "\U0001f600",
    "char NUL": "g\x00",
}.items():
    case(f"group {label}", "admin", "CreateGroup", const(apb.CreateGroupRequest(name=name)), SC.INVALID_ARGUMENT)
for name in SYSTEM_GROUP_NAMES:
    case(f"system group {name}", "admin", "CreateGroup", const(apb.CreateGroupRequest(name=name)), SC.INVALID_ARGUMENT)
for label, attempts in {"max attempts 1001": 1001, "max attempts -1": -1}.items():
    case(
        label,
        "admin",
        "CreateGroup",
        const(apb.CreateGroupRequest(name="NewGroup", max_delivery_attempts=attempts)),
        SC.INVALID_ARGUMENT,
    )
case("unknown topic", "admin", "DeleteTopic", const(apb.DeleteTopicRequest(name="NoSuchTopic")), SC.NOT_FOUND)
for name in ("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC"):
    case(f"system topic {name}", "admin", "DeleteTopic", const(apb.DeleteTopicRequest(name=name)), SC.INVALID_ARGUMENT)
case("topic empty", "admin", "DeleteTopic", const(apb.DeleteTopicRequest(name="")), SC.INVALID_ARGUMENT)
case(
    "unknown group",
    "admin",
    "GetConsumerProgress",
    const(apb.GetConsumerProgressRequest(group="NoSuchGroup")),
    SC.NOT_FOUND,
)
case(
    "unknown topic",
    "admin",
    "GetConsumerProgress",
    const(apb.GetConsumerProgressRequest(group="G1", topic="NoSuchTopic")),
    SC.NOT_FOUND,
)
case("group empty", "admin", "GetConsumerProgress", const(apb.GetConsumerProgressRequest()), SC.INVALID_ARGUMENT)
case(
    "key and message id",
    "admin",
    "QueryMessages",
    const(apb.QueryMessagesRequest(topic="TopicTest", key="k", message_id="i")),
    SC.INVALID_ARGUMENT,
)
case(
    "neither key nor id",
    "admin",
    "QueryMessages",
    const(apb.QueryMessagesRequest(topic="TopicTest")),
    SC.INVALID_ARGUMENT,
)
case("key without topic", "admin", "QueryMessages", const(apb.QueryMessagesRequest(key="k")), SC.INVALID_ARGUMENT)
case(
    "unknown message id",
    "admin",
    "QueryMessages",
    const(apb.QueryMessagesRequest(message_id="0102FC0000000146A20B13E2060000FFFF")),
    SC.NOT_FOUND,
)
case("empty request", "admin", "CheckTransaction", const(apb.CheckTransactionRequest()), SC.INVALID_ARGUMENT)
case("user name empty", "admin", "PutUser", const(apb.PutUserRequest(secret_key="sk")), SC.INVALID_ARGUMENT)
case("unknown user", "admin", "DeleteUser", const(apb.DeleteUserRequest(username="nobody")), SC.NOT_FOUND)
case("unknown user", "admin", "ListAcls", const(apb.ListAclsRequest(username="nobody")), SC.NOT_FOUND)
case("ACL for unknown user", "admin", "SetAcl", const(apb.SetAclRequest(acl=apb.Acl(username="nobody"))), SC.NOT_FOUND)


# -- Store (pyrmq.store.v1.Store) ----------------------------------------------------------------------


def put_req(*messages: pb.Message, allow_system_topics: bool = False) -> pb.PutMessagesRequest:
    return pb.PutMessagesRequest(messages=list(messages), allow_system_topics=allow_system_topics)


def smsg(topic: str = "TopicTest", body: bytes = b"x", **kw: Any) -> pb.Message:
    kw.setdefault("born_host", "10.1.2.3:5")
    return pb.Message(topic=topic, body=body, **kw)


for label, name in {
    "char space": "a b",
    "char slash": "a/b",
    "char NUL": "a\x00",
    "char emoji": "\U0001f600",
    "empty": "",
    "128 chars": "t" * 128,
    "256-char %RETRY%": "%RETRY%" + "r" * 249,
}.items():
    case(f"topic {label}", "store", "PutMessages", const(put_req(smsg(name))), InBand(pb.TOPIC_ILLEGAL))
for name in ("TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_wheel_timer"):
    case(
        f"system topic {name} not allowed", "store", "PutMessages", const(put_req(smsg(name))), InBand(pb.TOPIC_ILLEGAL)
    )
case(
    "body 4 MiB + 1",
    "store",
    "PutMessages",
    const(put_req(smsg(body=b"x" * ((4 << 20) + 1)))),
    InBand(pb.MESSAGE_ILLEGAL),
)
case(
    "properties over 32767 bytes",
    "store",
    "PutMessages",
    const(put_req(smsg(properties={"k": "v" * 33_000}))),
    InBand(pb.PROPERTIES_SIZE_EXCEEDED),
)
case(
    "property key with separator 0x01",
    "store",
    "PutMessages",
    const(put_req(smsg(properties={"a\x01b": "v"}))),
    InBand(pb.MESSAGE_ILLEGAL),
)
case(
    "property value with separator 0x02",
    "store",
    "PutMessages",
    const(put_req(smsg(properties={"a": "v\x02"}))),
    InBand(pb.MESSAGE_ILLEGAL),
)
case("queue id 4 of 4", "store", "PutMessages", const(put_req(smsg(queue_id=4))), InBand(pb.QUEUE_ID_ILLEGAL))
case("queue id -1", "store", "PutMessages", const(put_req(smsg(queue_id=-1))), InBand(pb.QUEUE_ID_ILLEGAL))
for label, host in {
    "not a host": "not-a-host",
    "port 70000": "1.2.3.4:70000",
    "empty host": ":5",
    "garbage IPv6": "[zz::1]:5",
    "1000 chars": "h" * 1000,
}.items():
    case(f"born host {label}", "store", "PutMessages", const(put_req(smsg(born_host=host))), SC.INVALID_ARGUMENT)
# Error details that quoted a 20k value went over gRPC's metadata limit (RESOURCE_EXHAUSTED instead of the
# code) until they were capped at 1 KiB.
case("born host 20k chars", "store", "PutMessages", const(put_req(smsg(born_host="h" * 20_000))), SC.INVALID_ARGUMENT)
case("unknown user 20k chars", "admin", "DeleteUser", const(apb.DeleteUserRequest(username="u" * 20_000)), SC.NOT_FOUND)
case(
    "bad born host after a good message",
    "store",
    "PutMessages",
    const(put_req(smsg(), smsg(born_host="nope"))),
    SC.INVALID_ARGUMENT,
)
for label, name in {"char space": "a b", "empty": "", "128 chars": "t" * 128}.items():
    case(
        f"topic {label}",
        "store",
        "CreateOrUpdateTopic",
        const(pb.CreateOrUpdateTopicRequest(config=pb.TopicConfig(topic_name=name))),
        SC.INVALID_ARGUMENT,
    )
case("no config", "store", "CreateOrUpdateTopic", const(pb.CreateOrUpdateTopicRequest()), SC.INVALID_ARGUMENT)
for label, name in {"char space": "a b", "empty": "", "121 chars": "g" * 121}.items():
    case(
        f"group {label}",
        "store",
        "CreateOrUpdateGroup",
        const(pb.CreateOrUpdateGroupRequest(config=pb.SubscriptionGroupConfig(group_name=name))),
        SC.INVALID_ARGUMENT,
    )
case("unknown topic", "store", "GetTopic", const(pb.GetTopicRequest(topic_name="NoSuchTopic")), SC.NOT_FOUND)
case("unknown group", "store", "GetGroup", const(pb.GetGroupRequest(group_name="NoSuchGroup")), SC.NOT_FOUND)
# Idempotent (store.proto): an unknown name is OK with existed = false, and changes nothing.
case("unknown topic", "store", "DeleteTopic", const(pb.DeleteTopicRequest(topic_name="NoSuchTopic")), SC.OK)
case("unknown group", "store", "DeleteGroup", const(pb.DeleteGroupRequest(group_name="NoSuchGroup")), SC.OK)
for label, msg_id in {
    "empty": "",
    "odd length": "ABC",
    "not hex 32": "Z" * 32,
    "31 chars": "A" * 31,
    "unicode": "\u4e2d" * 32,
}.items():
    case(
        f"offset msg id {label}",
        "store",
        "LookMessageByOffsetMsgId",
        const(pb.LookMessageByOffsetMsgIdRequest(offset_msg_id=msg_id)),
        SC.INVALID_ARGUMENT,
    )
case(
    "phy offset -1",
    "store",
    "LookMessageByPhyOffset",
    const(pb.LookMessageByPhyOffsetRequest(phy_offset=-1)),
    SC.INVALID_ARGUMENT,
)
for label, offset in {"int64 max": 2**63 - 1, "beyond the end": 1 << 40, "inside a record": 7}.items():
    case(
        f"phy offset {label}",
        "store",
        "LookMessageByPhyOffset",
        const(pb.LookMessageByPhyOffsetRequest(phy_offset=offset)),
        SC.NOT_FOUND,
    )
for label, offset in {"-1": -1, "int64 min": -(2**63)}.items():
    case(
        f"offset {label}",
        "store",
        "CommitConsumerOffset",
        const(pb.CommitConsumerOffsetRequest(group="G1", topic="TopicTest", queue_id=0, offset=offset)),
        SC.INVALID_ARGUMENT,
    )
case(
    "group empty",
    "store",
    "CommitConsumerOffset",
    const(pb.CommitConsumerOffsetRequest(topic="TopicTest", offset=1)),
    SC.INVALID_ARGUMENT,
)
case(
    "topic empty",
    "store",
    "CommitConsumerOffset",
    const(pb.CommitConsumerOffsetRequest(group="G1", offset=1)),
    SC.INVALID_ARGUMENT,
)
case(
    "delay level 0",
    "store",
    "UpdateDelayOffset",
    const(pb.UpdateDelayOffsetRequest(level=0, offset=1)),
    SC.INVALID_ARGUMENT,
)
case(
    "delay level 99",
    "store",
    "UpdateDelayOffset",
    const(pb.UpdateDelayOffsetRequest(level=99, offset=1)),
    SC.INVALID_ARGUMENT,
)
for label, handle in {"empty": "", "garbage": "garbage", "10k": "x" * 10_000}.items():
    case(
        f"handle {label}",
        "store",
        "AckMessage",
        const(pb.AckMessageRequest(group="G1", topic="TopicTest", receipt_handle=handle)),
        InBand(pb.INVALID_RECEIPT_HANDLE),
    )
case(
    "SQL syntax error",
    "store",
    "PopMessages",
    const(
        pb.PopMessagesRequest(
            group="G1", topic="TopicTest", queue_id=-1, max_count=1, invisible_duration_ms=30_000, sql_expression="a >"
        )
    ),
    SC.INVALID_ARGUMENT,
)
case(
    "invisible -1 ms",
    "store",
    "PopMessages",
    const(pb.PopMessagesRequest(group="G1", topic="TopicTest", queue_id=-1, max_count=1, invisible_duration_ms=-1)),
    SC.INVALID_ARGUMENT,
)
case(
    "group empty",
    "store",
    "PopMessages",
    const(pb.PopMessagesRequest(topic="TopicTest", queue_id=-1, max_count=1, invisible_duration_ms=30_000)),
    SC.INVALID_ARGUMENT,
)
