"""The remoting door end to end with a plain test client: routes, sends, pulls, offsets."""

from __future__ import annotations

import json
from collections.abc import Callable

from services.broker.transaction import TransactionCheck
from services.domain.remoting.codes import RequestCode, ResponseCode
from tests.support.remoting_client import RemotingTestClient
from tests.support.remoting_client import stored_records as records
from tests.support.waits import wait_until

HOLD = 0x2 | 0x4  # PullSysFlag SUSPEND | SUBSCRIPTION


def stored(store, topic: str, queue_id: int, count: int = 1) -> list:
    """The first ``count`` messages of a queue, once dispatched (reput runs after the put)."""
    found: list = []

    def ready() -> bool:
        found[:] = store.get_messages(topic, queue_id, 0, count, 0, []).messages
        return len(found) >= count

    wait_until(ready, 10, what=f"{count} messages in {topic}/{queue_id}")
    return found


def test_route_of_a_topic_names_the_door(remoting: RemotingTestClient, topics: Callable[..., None], door) -> None:
    topics("RouteT", queue_nums=4)
    response = remoting.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "RouteT"})
    assert response.code == ResponseCode.SUCCESS
    route = json.loads(response.body)
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": door.context.address}
    assert route["queueDatas"][0]["writeQueueNums"] == 4
    assert b" " not in response.body  # the Go client splits route text and breaks on spaces


def test_route_of_a_missing_topic_is_17_in_rocketmq_words(remoting: RemotingTestClient) -> None:
    response = remoting.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "NoSuchTopic"})
    assert response.code == ResponseCode.TOPIC_NOT_EXIST
    assert response.remark is not None
    assert response.remark.startswith("No topic route info in name server for the topic: NoSuchTopic")


def test_send_then_pull_passes_the_stored_records(remoting: RemotingTestClient, topics: Callable[..., None]) -> None:
    topics("SendT", queue_nums=2)
    sent = remoting.send_v2("SendT", b"hello", {"TAGS": "A", "KEYS": "k1 k2", "UNIQ_KEY": "ID1", "color": "red"}, 1)
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    assert sent.ext_fields["queueId"] == "1" and sent.ext_fields["queueOffset"] == "0"
    assert sent.ext_fields["transactionId"] == "ID1"
    assert len(sent.ext_fields["msgId"]) == 32
    pulled = remoting.pull("G1", "SendT", 1, 0, sys_flag=HOLD, suspend_ms=10_000)  # held until dispatched
    assert pulled.code == ResponseCode.SUCCESS, pulled.remark
    assert pulled.ext_fields["nextBeginOffset"] == "1"
    [record] = records(pulled.body)
    assert record.body == b"hello" and record.topic == "SendT"
    assert record.properties["TAGS"] == "A" and record.properties["color"] == "red"
    assert record.properties["UNIQ_KEY"] == "ID1"


def test_pull_filters_by_tag_and_answers_caught_up(remoting: RemotingTestClient, topics: Callable[..., None]) -> None:
    topics("TagT", queue_nums=1)
    for i, tag in enumerate(["A", "B", "A"]):
        assert remoting.send_v2("TagT", b"m%d" % i, {"TAGS": tag, "UNIQ_KEY": f"U{i}"}).code == 0
    wait_until(
        lambda: (
            remoting.call(RequestCode.GET_MAX_OFFSET, {"topic": "TagT", "queueId": "0"}).ext_fields["offset"] == "3"
        ),
        10,
        what="dispatch",
    )
    pulled = remoting.pull("G1", "TagT", 0, 0, subscription="A")
    assert [r.body for r in records(pulled.body)] == [b"m0", b"m2"]
    caught_up = remoting.pull("G1", "TagT", 0, 3)
    assert caught_up.code == ResponseCode.PULL_NOT_FOUND
    moved = remoting.pull("G1", "TagT", 0, 99)
    assert moved.code == ResponseCode.PULL_OFFSET_MOVED
    assert moved.ext_fields["nextBeginOffset"] == "3"


def test_a_suspended_pull_is_answered_by_an_arrival(
    remoting: RemotingTestClient, topics: Callable[..., None], door
) -> None:
    topics("HoldT", queue_nums=1)
    waiting = remoting.send_command(
        remoting.command(
            RequestCode.PULL_MESSAGE,
            {
                "consumerGroup": "G1",
                "topic": "HoldT",
                "queueId": "0",
                "queueOffset": "0",
                "maxMsgNums": "32",
                "sysFlag": str(0x2 | 0x4),
                "commitOffset": "0",
                "suspendTimeoutMillis": "20000",
                "subscription": "*",
                "subVersion": "0",
            },
        )
    )
    wait_until(lambda: door.pulls.held == 1, 5, what="the pull to be held")
    with RemotingTestClient(door.context.address) as producer:
        assert producer.send_v2("HoldT", b"late", {"UNIQ_KEY": "L1"}).code == 0
    answer = waiting.result(10)
    assert answer.code == ResponseCode.SUCCESS
    assert [r.body for r in records(answer.body)] == [b"late"]


def test_offsets_round_trip(remoting: RemotingTestClient, topics: Callable[..., None], door) -> None:
    topics("OffT", queue_nums=1)
    door.context.core.admin.create_group("G2")
    for i in range(3):
        remoting.send_v2("OffT", b"x", {"UNIQ_KEY": f"O{i}"})
    queue = {"topic": "OffT", "queueId": "0"}
    # Sends are answered once appended; the ConsumeQueue is written by dispatch just after.
    wait_until(lambda: remoting.call(RequestCode.GET_MAX_OFFSET, queue).ext_fields["offset"] == "3", 10, what="3")
    assert remoting.call(RequestCode.GET_MIN_OFFSET, {"topic": "OffT", "queueId": "0"}).ext_fields["offset"] == "0"
    query = {"consumerGroup": "G2", "topic": "OffT", "queueId": "0"}
    assert remoting.call(RequestCode.QUERY_CONSUMER_OFFSET, {**query, "setZeroIfNotFound": "false"}).code == 22
    assert remoting.call(RequestCode.QUERY_CONSUMER_OFFSET, query).ext_fields["offset"] == "0"
    assert remoting.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**query, "commitOffset": "2"}).code == 0
    assert remoting.call(RequestCode.QUERY_CONSUMER_OFFSET, query).ext_fields["offset"] == "2"
    unknown = remoting.call(
        RequestCode.UPDATE_CONSUMER_OFFSET, {**query, "consumerGroup": "NoSuchG", "commitOffset": "1"}
    )
    assert (unknown.code, unknown.remark) == (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "Group NoSuchG not exist!")


def test_unknown_code_and_missing_field(remoting: RemotingTestClient) -> None:
    unknown = remoting.call(9999)
    assert unknown.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert unknown.remark == " request type 9999 not supported"
    missing = remoting.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
    assert missing.code == ResponseCode.SYSTEM_ERROR
    assert "topic" in (missing.remark or "")


def test_send_back_goes_to_the_retry_topic_then_the_dlq(
    remoting: RemotingTestClient, topics: Callable[..., None], door
) -> None:
    topics("BackT", queue_nums=1)
    sent = remoting.send_v2("BackT", b"fail me", {"UNIQ_KEY": "B1", "TAGS": "t"})
    phy_offset = int(sent.ext_fields["msgId"][16:], 16)
    door.context.core.admin.create_group("GB")
    back = {"offset": str(phy_offset), "group": "GB", "delayLevel": "0", "originMsgId": "B1"}
    assert remoting.call(RequestCode.CONSUMER_SEND_MSG_BACK, back).code == ResponseCode.SUCCESS
    store = door.context.core.store
    [parked] = stored(store, "SCHEDULE_TOPIC_XXXX", 2)  # level 3 is queue 2
    assert parked.properties["REAL_TOPIC"] == "%RETRY%GB" and parked.properties["RETRY_TOPIC"] == "BackT"
    assert parked.reconsume_times == 1 and parked.body == b"fail me"
    dead = {**back, "offset": str(parked.phy_offset), "maxReconsumeTimes": "1"}
    assert remoting.call(RequestCode.CONSUMER_SEND_MSG_BACK, dead).code == ResponseCode.SUCCESS
    [in_dlq] = stored(store, "%DLQ%GB", 0)
    assert in_dlq.body == b"fail me" and in_dlq.properties["ORIGIN_MESSAGE_ID"] == sent.ext_fields["msgId"]


def test_a_transaction_check_reaches_a_classic_producer(
    remoting: RemotingTestClient, topics: Callable[..., None], door
) -> None:
    topics("TxT", queue_nums=1)
    body = json.dumps({"clientID": "10.0.0.1@p1", "producerDataSet": [{"groupName": "PGX"}]}).encode()
    assert remoting.call(RequestCode.HEART_BEAT, body=body).code == 0
    half = remoting.send_v2("TxT", b"tx", {"UNIQ_KEY": "TX1", "TRAN_MSG": "true", "PGROUP": "PGX"}, sys_flag=0x4)
    assert half.code == 0 and half.ext_fields["transactionId"] == "TX1"
    core = door.context.core
    [half_copy] = stored(core.store, "RMQ_SYS_TRANS_HALF_TOPIC", 0)
    client = core.checks.relay(TransactionCheck("PGX", "TxT", "TX1", "TX1", half_copy))
    assert client == "10.0.0.1@p1"
    wait_until(lambda: remoting.server_requests, 5, what="CHECK_TRANSACTION_STATE")
    [check] = remoting.server_requests
    assert check.code == RequestCode.CHECK_TRANSACTION_STATE and check.is_oneway
    assert check.ext_fields["commitLogOffset"] == str(half_copy.phy_offset)
    [record] = records(check.body)
    assert record.topic == "TxT" and record.body == b"tx"
    end = {
        "producerGroup": "PGX",
        "tranStateTableOffset": check.ext_fields["tranStateTableOffset"],
        "commitLogOffset": check.ext_fields["commitLogOffset"],
        "commitOrRollback": "8",
        "fromTransactionCheck": "true",
        "msgId": "TX1",
    }
    assert remoting.call(RequestCode.END_TRANSACTION, end).code == 0
    [committed] = stored(core.store, "TxT", 0)
    assert committed.body == b"tx"


def test_requests_are_timed_by_request_code(make_broker, topics: Callable[..., None]) -> None:
    from prometheus_client import CollectorRegistry, Histogram

    from services.broker.remoting.door import build_remoting

    broker = make_broker()
    latency = Histogram("rocketmq_rpc_latency_seconds", "t", ["method", "code"], registry=CollectorRegistry())
    door = build_remoting(broker.core, "127.0.0.1", "127.0.0.1", 0, False, latency)
    door.start()
    try:
        topics("TimedT", queue_nums=1)
        with RemotingTestClient(door.context.address) as client:
            client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TimedT"})
            client.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Missing"})
            client.pull("G1", "TimedT", 0, 0, sys_flag=0x2 | 0x4, suspend_ms=50)
    finally:
        door.stop()
    counts = {
        (s.labels["method"], s.labels["code"]): s.value
        for metric in latency.collect()
        for s in metric.samples
        if s.name.endswith("_count")
    }
    assert counts[("GET_ROUTEINFO_BY_TOPIC", "0")] == 1 and counts[("GET_ROUTEINFO_BY_TOPIC", "17")] == 1
    assert counts[("PULL_MESSAGE", "19")] == 1  # a held pull, timed when answered


def test_a_pulls_commit_offset_is_answered_at_once_and_stored_in_rounds(
    remoting: RemotingTestClient, topics: Callable[..., None], door
) -> None:
    topics("CommitT", queue_nums=1)
    door.context.core.admin.create_group("GC")
    assert remoting.pull("GC", "CommitT", 0, 0, sys_flag=0x1 | 0x4, commit_offset=2).code == ResponseCode.PULL_NOT_FOUND
    query = {"consumerGroup": "GC", "topic": "CommitT", "queueId": "0", "setZeroIfNotFound": "false"}
    assert remoting.call(RequestCode.QUERY_CONSUMER_OFFSET, query).ext_fields["offset"] == "2"
    store = door.context.core.store
    assert store.query_consumer_offset("GC", "CommitT", 0) < 0  # not written yet: the next round does
    assert door.context.core.classic_offsets.run_once() == 1
    assert store.query_consumer_offset("GC", "CommitT", 0) == 2


def test_route_json_follows_the_clients_version_as_rocketmqs_name_server(topics: Callable[..., None], door) -> None:
    topics("FormT", queue_nums=2)
    address = door.context.address
    with RemotingTestClient(address, version=121) as old, RemotingTestClient(address, version=401) as new:
        native = old.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "FormT"}).body
        asked = old.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "FormT", "acceptStandardJsonOnly": "true"}).body
        standard = new.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "FormT"}).body
    assert f'"brokerAddrs":{{0:"{address}"}}'.encode() in native  # fastjson's native map keys
    assert f'"brokerAddrs":{{"0":"{address}"}}'.encode() in standard and asked == standard
    assert json.loads(standard)["queueDatas"][0]["topicSysFlag"] == 0
