"""The operator codes (services/broker/remoting/admin.py, queries.py, connections.py) end to end
through the door, each answer parsed with the domain codecs, and mqadmin's flows of
../shared/docs/remoting.md §3 as the sequences of calls the tool makes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.broker.model import ClientType
from services.broker.remoting import connections
from services.broker.remoting.admin import RateSampler, human_bytes, parse_attributes, version_desc
from services.broker.remoting.dispatch import RemotingError
from services.broker.remoting.door import RemotingDoor, build_remoting
from services.broker.telemetry import ClientFacts, ClientSession
from services.domain.remoting.bodies import (
    MessageQueue,
    parse_cluster_info,
    parse_consume_stats,
    parse_kv_table,
    parse_topic_route,
    parse_topic_stats_table,
)
from services.domain.remoting.codes import FLAG_RESPONSE, RequestCode, ResponseCode
from services.domain.remoting.command import RemotingCommand, encode
from services.domain.remoting.fastjson_codec import fastjson_loads, key_object
from services.domain.remoting.message_id import decode_offset_msg_id
from tests.support.broker_groups import GROUP_A, GROUP_B, two_groups
from tests.support.remoting_client import RemotingTestClient
from tests.support.remoting_client import stored_records as records
from tests.support.waits import wait_until

BROKER = "broker-a"
UNIQUE = {"_UNIQUE_KEY_QUERY": "true"}
FOREVER = {"beginTimestamp": "0", "endTimestamp": str(2**63 - 1)}
# GET_BROKER_RUNTIME_INFO keys ClusterListSubCommand reads (longs, doubles, "x y z" rates)
CLUSTER_LIST_LONGS = ("timerReadBehind", "timerOffsetBehind", "timerCongestNum", "earliestMessageTimeStamp")
# and those rocketmq-exporter's BrokerRuntimeStats parses with Long.parseLong / Double.parseDouble
EXPORTER_LONGS = (
    "msgPutTotalTodayNow msgGetTotalTodayNow msgPutTotalTodayMorning msgGetTotalTodayMorning "
    "msgPutTotalYesterdayMorning msgGetTotalYesterdayMorning sendThreadPoolQueueHeadWaitTimeMills "
    "queryThreadPoolQueueHeadWaitTimeMills queryThreadPoolQueueSize bootTimestamp pullThreadPoolQueueSize "
    "commitLogMinOffset pullThreadPoolQueueHeadWaitTimeMills dispatchMaxBuffer brokerVersion "
    "pageCacheLockTimeMills commitLogMaxOffset getMessageEntireTimeMax putMessageTimesTotal "
    "sendThreadPoolQueueSize startAcceptSendRequestTimeStamp putMessageEntireTimeMax "
    "remainTransientStoreBufferNumbs queryThreadPoolQueueCapacity dispatchBehindBytes putMessageSizeTotal "
    "sendThreadPoolQueueCapacity pullThreadPoolQueueCapacity"
).split()
EXPORTER_DOUBLES = ("consumeQueueDiskRatio", "commitLogDiskRatio", "putMessageAverageSize", "timerEnqueueTps")
RATES = ("putTps", "getTransferredTps", "getTransferedTps", "getMissTps", "getTotalTps", "getFoundTps")


def ok(response: RemotingCommand) -> RemotingCommand:
    assert response.code == ResponseCode.SUCCESS, (response.code, response.remark)
    return response


def heartbeat(client: RemotingTestClient, client_id: str, group: str, *topics: str, producer: str = "") -> None:
    data: dict[str, object] = {"clientID": client_id}
    if group:
        data["consumerDataSet"] = [
            {
                "groupName": group,
                "consumeType": "CONSUME_PASSIVELY",
                "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                "subscriptionDataSet": [{"topic": t, "subString": "A || B", "subVersion": 7} for t in topics],
            }
        ]
    if producer:
        data["producerDataSet"] = [{"groupName": producer}]
    ok(client.call(RequestCode.HEART_BEAT, body=json.dumps(data).encode()))


def send(client: RemotingTestClient, topic: str, count: int, queue_id: int = 0, keys: str = "") -> list[str]:
    """``count`` sends; their offsetMsgIds, once the messages can be read."""
    ids = []
    for i in range(count):
        properties = {"UNIQ_KEY": f"{topic}-U{queue_id}-{i}", "TAGS": "A", **({"KEYS": keys} if keys else {})}
        ids.append(ok(client.send_v2(topic, b"body-%d" % i, properties, queue_id)).ext_fields["msgId"])
    wait_until(
        lambda: (
            client.call(RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(queue_id)}).ext_fields["offset"]
            == str(count)
        ),
        what=f"{count} messages dispatched in {topic}/{queue_id}",
    )
    return ids


def answer(
    client: RemotingTestClient, request: RemotingCommand, code: int, body: bytes = b"", remark: str = ""
) -> None:
    client.sock.sendall(encode(RemotingCommand(code, request.opaque, FLAG_RESPONSE, {}, body, remark or None)))


def server_request(client: RemotingTestClient, code: int) -> RemotingCommand:
    return wait_until(
        lambda: next((r for r in client.server_requests if r.code == code), None), 5, what=f"request {code}"
    )


@pytest.fixture
def consumer(door: RemotingDoor) -> Iterator[RemotingTestClient]:
    with RemotingTestClient(door.context.address) as client:
        yield client


# -- mqadmin flows ------------------------------------------------------------------------------------


def test_cluster_list_is_106_then_28_per_broker(
    remoting: RemotingTestClient, topics: Callable[..., None], door
) -> None:
    topics("ClusterT", queue_nums=1)
    send(remoting, "ClusterT", 2)
    info = parse_cluster_info(ok(remoting.call(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
    [cluster] = info.cluster_addr_table
    for name in info.cluster_addr_table[cluster]:
        address = info.broker_addr_table[name].broker_addrs[0]
        with RemotingTestClient(address) as broker:
            table = parse_kv_table(ok(broker.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body)
        for key in CLUSTER_LIST_LONGS + tuple(EXPORTER_LONGS):
            int(table[key])
        for key in EXPORTER_DOUBLES:
            float(table[key])
        for key in RATES:
            assert [float(rate) for rate in table[key].split(" ")]  # split on space, as both tools do
        assert table["brokerActive"] == "true" and table["brokerVersionDesc"] == "V5_3_3"
        assert table["brokerVersion"] == "479"
        assert table["msgPutTotalTodayNow"] == table["putMessageTimesTotal"] == "2"
        assert int(table["putMessageSizeTotal"]) > 0 and int(table["commitLogMaxOffset"]) > 0
        assert int(table["earliestMessageTimeStamp"]) <= door.context.clock.now_ms()
        # rocketmq-exporter's parses of the composite values
        for bucket in table["putMessageDistributeTime"].split(" "):
            label, _, count = bucket.partition(":")
            assert label.startswith("[") and int(count) == 0
        number, unit = table["remainHowManyDataToFlush"].split(" ")
        assert float(number) >= 0 and unit.endswith("B")
        words = table["commitLogDirCapacity"].split(" ")
        assert words[0] == "Total" and words[4] == "Free" and words[3].endswith(",") and words[7].endswith(".")


def test_topic_list_with_clusters_asks_who_consumes_each_topic(
    remoting: RemotingTestClient, consumer: RemotingTestClient, topics: Callable[..., None], door
) -> None:
    topics("WhoT", "NobodyT", queue_nums=1)
    door.context.core.admin.create_group("OffsetG")  # a group that only commits offsets (a pull consumer's)
    heartbeat(consumer, "10.0.0.9@c1", "LiveG", "WhoT")
    query = {"consumerGroup": "OffsetG", "topic": "WhoT", "queueId": "0"}
    ok(remoting.call(RequestCode.UPDATE_CONSUMER_OFFSET, {**query, "commitOffset": "0"}))
    names = json.loads(ok(remoting.call(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)["topicList"]
    ok(remoting.call(RequestCode.GET_BROKER_CLUSTER_INFO))
    consumed = {}
    for topic in ("WhoT", "NobodyT"):
        assert topic in names
        ok(remoting.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
        body = ok(remoting.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})).body
        consumed[topic] = fastjson_loads(body)["groupList"]
    assert consumed == {"WhoT": ["LiveG", "OffsetG"], "NobodyT": []}


def test_consumer_progress_is_105_retry_then_208_then_203(
    remoting: RemotingTestClient, consumer: RemotingTestClient, topics: Callable[..., None]
) -> None:
    topics("ProgT", queue_nums=2)
    heartbeat(consumer, "10.0.0.9@c1", "ProgG", "ProgT")
    send(remoting, "ProgT", 3)
    offset = {"consumerGroup": "ProgG", "topic": "ProgT", "queueId": "0", "commitOffset": "2"}
    ok(remoting.call(RequestCode.UPDATE_CONSUMER_OFFSET, offset))

    route = parse_topic_route(ok(remoting.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "%RETRY%ProgG"})).body)
    [broker] = route.broker_datas
    stats = parse_consume_stats(ok(remoting.call(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "ProgG"})).body)
    assert set(stats.offset_table) == {MessageQueue("ProgT", broker.broker_name, q) for q in (0, 1)}
    queue0 = stats.offset_table[MessageQueue("ProgT", BROKER, 0)]
    assert (queue0.broker_offset, queue0.consumer_offset, queue0.pull_offset) == (3, 2, 2)
    assert queue0.last_timestamp > 0  # the store time of message 1, the last consumed
    queue1 = stats.offset_table[MessageQueue("ProgT", BROKER, 1)]
    assert (queue1.broker_offset, queue1.consumer_offset, queue1.last_timestamp) == (0, 0, 0)
    assert stats.consume_tps == 0.0

    connection = fastjson_loads(
        ok(remoting.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "ProgG"})).body
    )
    [client] = connection["connectionSet"]
    assert client["clientId"] == "10.0.0.9@c1" and client["language"] == "JAVA" and client["version"] == 479
    assert client["clientAddr"].startswith("127.0.0.1:")
    assert connection["consumeType"] == "CONSUME_PASSIVELY" and connection["messageModel"] == "CLUSTERING"
    assert connection["consumeFromWhere"] == "CONSUME_FROM_FIRST_OFFSET"
    sub = connection["subscriptionTable"]["ProgT"]
    assert sub["subString"] == "A || B" and sorted(sub["tagsSet"]) == ["A", "B"] and len(sub["codeSet"]) == 2
    assert sub["subVersion"] == 7 and sub["expressionType"] == "TAG" and sub["classFilterMode"] is False


def test_query_msg_by_id_views_at_the_ids_address_else_queries_the_unique_key(
    remoting: RemotingTestClient, topics: Callable[..., None], door
) -> None:
    topics("IdT", queue_nums=1)
    [msg_id] = send(remoting, "IdT", 1)
    host, port, offset = decode_offset_msg_id(msg_id)
    if f"{host}:{port}" == door.context.address:  # the id names this door: mqadmin views it there
        found = ok(remoting.call(RequestCode.VIEW_MESSAGE_BY_ID, {"topic": "IdT", "offset": str(offset)})).body
    else:  # it names the store: the view fails to connect, and mqadmin queries the unique key instead
        ok(remoting.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "IdT"}))
        query = {"topic": "IdT", "key": "IdT-U0-0", "maxNum": "64", **FOREVER, **UNIQUE}
        found = ok(remoting.call(RequestCode.QUERY_MESSAGE, query)).body
    [record] = records(found)
    assert record.phy_offset == offset and record.body == b"body-0"
    assert record.properties["UNIQ_KEY"] == "IdT-U0-0"
    viewed = ok(remoting.call(RequestCode.VIEW_MESSAGE_BY_ID, {"topic": "IdT", "offset": str(offset)})).body
    pulled = ok(remoting.pull("AnyG", "IdT", 0, 0)).body
    assert viewed == pulled == found  # the record as the commit log holds it
    missing = remoting.call(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(offset + 1)})
    assert (missing.code, missing.remark) == (
        ResponseCode.SYSTEM_ERROR,
        f"can not find message by the offset, {offset + 1}",
    )


def test_query_msg_by_key_is_105_then_12(remoting: RemotingTestClient, topics: Callable[..., None]) -> None:
    topics("KeyT", queue_nums=2)
    send(remoting, "KeyT", 2, keys="order-1 shared")
    send(remoting, "KeyT", 1, queue_id=1, keys="order-2")
    route = parse_topic_route(ok(remoting.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "KeyT"})).body)
    assert [b.broker_name for b in route.broker_datas] == [BROKER]
    query = {"topic": "KeyT", "key": "order-1", "maxNum": "64", **FOREVER}
    response = wait_until(lambda: remoting.call(RequestCode.QUERY_MESSAGE, query), accept=lambda r: r.code == 0)
    found = records(response.body)
    assert [r.body for r in found] == [b"body-0", b"body-1"]
    assert all("order-1" in r.properties["KEYS"].split(" ") for r in found)
    assert int(response.ext_fields["indexLastUpdateTimestamp"]) == max(r.store_timestamp_ms for r in found)
    assert int(response.ext_fields["indexLastUpdatePhyoffset"]) == found[-1].phy_offset
    limited = ok(remoting.call(RequestCode.QUERY_MESSAGE, {**query, "maxNum": "1"}))
    assert len(records(limited.body)) == 1
    for miss in ({**query, "key": "nope"}, {**query, "endTimestamp": "1"}, {**query, "topic": "Not-There"}):
        response = remoting.call(RequestCode.QUERY_MESSAGE, miss)
        assert (response.code, response.remark) == (
            ResponseCode.QUERY_NOT_FOUND,
            "can not find message, maybe time range not correct",
        )
    assert remoting.call(RequestCode.QUERY_MESSAGE, {"topic": "KeyT", "key": "k"}).code == ResponseCode.SYSTEM_ERROR


# -- topics -------------------------------------------------------------------------------------------


def test_update_topic_then_configs_then_delete(remoting: RemotingTestClient) -> None:
    create = {
        "topic": "MadeT",
        "defaultTopic": "TBW102",
        "readQueueNums": "4",
        "writeQueueNums": "4",
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": "0",
        "order": "false",
        "attributes": "+message.type=FIFO",
    }
    ok(remoting.call(RequestCode.UPDATE_AND_CREATE_TOPIC, create))
    config = fastjson_loads(ok(remoting.call(RequestCode.GET_TOPIC_CONFIG, {"topic": "MadeT", "lo": "false"})).body)
    assert config == {
        "attributes": {"message.type": "FIFO"},
        "order": True,
        "perm": 6,
        "readQueueNums": 4,
        "topicFilterType": "SINGLE_TAG",
        "topicName": "MadeT",
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    ok(remoting.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {**create, "attributes": "", "writeQueueNums": "6"}))
    everything = ok(remoting.call(RequestCode.GET_ALL_TOPIC_CONFIG, {"topicSeq": "0", "maxTopicNum": "1000"}))
    assert "totalTopicNum" not in everything.ext_fields  # one page: the client stops here
    wrapper = fastjson_loads(everything.body)
    assert wrapper["topicConfigTable"]["MadeT"]["writeQueueNums"] == 6
    assert wrapper["topicConfigTable"]["MadeT"]["attributes"]["message.type"] == "FIFO"  # kept
    assert set(wrapper["dataVersion"]) == {"counter", "stateVersion", "timestamp"}

    for bad, remark in (("bad topic", "contains illegal characters"), ("TBW102", "conflict with system topic")):
        refused = remoting.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {**create, "topic": bad})
        assert refused.code == ResponseCode.INVALID_PARAMETER and remark in (refused.remark or "")
    wrong = remoting.call(RequestCode.UPDATE_AND_CREATE_TOPIC, {**create, "attributes": "message.type=FIFO"})
    assert (wrong.code, wrong.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "add/alter attribute format is wrong: message.type",
    )

    ok(remoting.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "MadeT"}))
    ok(remoting.call(RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "MadeT", "clusterName": "DefaultCluster"}))
    gone = remoting.call(RequestCode.GET_TOPIC_CONFIG, {"topic": "MadeT"})
    assert (gone.code, gone.remark) == (ResponseCode.TOPIC_NOT_EXIST, "No topic in this broker. topic: MadeT")
    ok(remoting.call(RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "MadeT"}))  # again: SUCCESS, as RocketMQ


def test_topic_status_is_105_then_202(remoting: RemotingTestClient, topics: Callable[..., None]) -> None:
    topics("StatT", queue_nums=2)
    send(remoting, "StatT", 3, queue_id=1)
    ok(remoting.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "StatT"}))
    table = parse_topic_stats_table(ok(remoting.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "StatT"})).body)
    empty, full = (table.offset_table[MessageQueue("StatT", BROKER, q)] for q in (0, 1))
    assert (empty.min_offset, empty.max_offset, empty.last_update_timestamp) == (0, 0, 0)
    assert (full.min_offset, full.max_offset) == (0, 3) and full.last_update_timestamp > 0
    assert table.topic_put_tps == 0.0
    missing = remoting.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "NoStatT"})
    assert (missing.code, missing.remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[NoStatT] not exist")


# -- subscription groups ------------------------------------------------------------------------------


def test_update_sub_group_then_configs_then_delete(remoting: RemotingTestClient) -> None:
    config = {
        "groupName": "SubG",
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True,
        "consumeMessageOrderly": True,
        "retryQueueNums": 1,
        "retryMaxTimes": 3,
        "groupRetryPolicy": {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [1000, 2000]}},
        "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1,
        "notifyConsumerIdsChangedEnable": True,
        "groupSysFlag": 0,
        "consumeTimeoutMinute": 15,
        "attributes": {"+priority.factor": "50"},
    }
    ok(remoting.call(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps(config).encode()))
    everything = ok(remoting.call(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))  # no header, as the dashboard
    assert "totalGroupNum" not in everything.ext_fields
    wrapper = fastjson_loads(everything.body)
    assert wrapper["forbiddenTable"] == {}
    stored = wrapper["subscriptionGroupTable"]["SubG"]
    expected = {**config, "attributes": {"priority.factor": "50"}}
    assert stored == expected
    one = fastjson_loads(ok(remoting.call(352, {"group": "SubG"})).body)
    assert one == stored

    refused = remoting.call(
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=json.dumps({"groupName": "a b"}).encode()
    )
    assert refused.code == ResponseCode.INVALID_PARAMETER and "illegal characters" in (refused.remark or "")

    ok(remoting.call(RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "SubG", "cleanOffset": "false"}))
    gone = remoting.call(352, {"group": "SubG"})
    assert (gone.code, gone.remark) == (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")


# -- the broker ----------------------------------------------------------------------------------------


def test_broker_config_is_properties_text_with_a_data_version(remoting: RemotingTestClient, door) -> None:
    response = ok(remoting.call(RequestCode.GET_BROKER_CONFIG))
    properties = dict(line.split("=", 1) for line in response.body.decode().splitlines())
    host, _, port = door.context.address.rpartition(":")
    assert properties["brokerName"] == BROKER and properties["brokerClusterName"] == "DefaultCluster"
    assert (properties["brokerIP1"], properties["listenPort"], properties["brokerId"]) == (host, port, "0")
    assert properties["autoCreateTopicEnable"] == "false" and properties["remotingWorkers"] == "64"
    assert properties["consumerRetryDelaysMs"].startswith("1000,5000,")
    assert "initAuthenticationUser" not in properties
    version = fastjson_loads(response.ext_fields["version"])
    assert set(version) == {"counter", "stateVersion", "timestamp"}


def test_broker_stats_data_is_not_kept(remoting: RemotingTestClient) -> None:
    response = remoting.call(RequestCode.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "T"})
    assert (response.code, response.remark) == (ResponseCode.SYSTEM_ERROR, "The stats <TOPIC_PUT_NUMS> <T> not exist")


# -- offsets reset ------------------------------------------------------------------------------------


def test_reset_offset_by_timestamp_tells_the_live_consumers(
    remoting: RemotingTestClient, consumer: RemotingTestClient, topics: Callable[..., None], door
) -> None:
    topics("ResetT", queue_nums=2)
    heartbeat(consumer, "10.0.0.9@c1", "ResetG", "ResetT")
    send(remoting, "ResetT", 3)
    for queue_id in (0, 1):
        offset = {"consumerGroup": "ResetG", "topic": "ResetT", "queueId": str(queue_id), "commitOffset": "3"}
        ok(remoting.call(RequestCode.UPDATE_CONSUMER_OFFSET, offset))
    reset = {"topic": "ResetT", "group": "ResetG", "timestamp": "0", "isForce": "true"}
    body = fastjson_loads(ok(remoting.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, reset)).body)
    offsets = {_mq(key): value for key, value in body["offsetTable"].items()}
    assert offsets == {MessageQueue("ResetT", BROKER, 0): 0, MessageQueue("ResetT", BROKER, 1): 0}
    query = {"consumerGroup": "ResetG", "topic": "ResetT", "queueId": "0"}
    assert ok(remoting.call(RequestCode.QUERY_CONSUMER_OFFSET, query)).ext_fields["offset"] == "0"
    told = server_request(consumer, 220)
    assert told.is_oneway and told.ext_fields["group"] == "ResetG" and told.ext_fields["topic"] == "ResetT"
    assert {_mq(k): v for k, v in fastjson_loads(told.body)["offsetTable"].items()} == offsets

    latest = ok(remoting.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**reset, "timestamp": "-1"}))
    assert sorted(fastjson_loads(latest.body)["offsetTable"].values()) == [0, 3]
    one = ok(remoting.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**reset, "queueId": "0", "offset": "1"}))
    assert list(fastjson_loads(one.body)["offsetTable"].values()) == [1]
    beyond = remoting.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**reset, "queueId": "0", "offset": "9"})
    assert (beyond.code, beyond.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "Target offset 9 not in consume queue range [0-3]",
    )
    no_group = remoting.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**reset, "group": "NoG"})
    assert (no_group.code, no_group.remark) == (ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "Group NoG does not exist")
    no_topic = remoting.call(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, {**reset, "topic": "NoT"})
    assert (no_topic.code, no_topic.remark) == (ResponseCode.TOPIC_NOT_EXIST, "Topic NoT does not exist")


def _mq(key: object) -> MessageQueue:
    """A ResetOffsetBody key: a MessageQueue written as a raw object (fastjson's form)."""
    fields = key_object(key)
    assert fields is not None, key
    return MessageQueue(fields["topic"], fields["brokerName"], fields["queueId"])


# -- connections and relays ---------------------------------------------------------------------------


def test_consumer_connection_of_a_group_with_nobody_is_206(remoting: RemotingTestClient) -> None:
    response = remoting.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "EmptyG"})
    assert (response.code, response.remark) == (
        ResponseCode.CONSUMER_NOT_ONLINE,
        "the consumer group[EmptyG] not online",
    )


def test_producer_connections_and_all_producers(remoting: RemotingTestClient, consumer: RemotingTestClient) -> None:
    heartbeat(consumer, "10.0.0.9@p1", "", producer="ProdG")
    body = fastjson_loads(ok(remoting.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "ProdG"})).body)
    [connection] = body["connectionSet"]
    assert connection["clientId"] == "10.0.0.9@p1" and connection["language"] == "JAVA" and connection["version"] == 479
    data = fastjson_loads(ok(remoting.call(RequestCode.GET_ALL_PRODUCER_INFO)).body)["data"]
    [info] = data["ProdG"]
    assert info["clientId"] == "10.0.0.9@p1" and info["remoteIP"] == connection["clientAddr"]
    assert info["lastUpdateTimestamp"] > 0
    missing = remoting.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "NoProdG"})
    assert (missing.code, missing.remark) == (ResponseCode.SYSTEM_ERROR, "the producer group[NoProdG] not exist")


def test_running_info_is_relayed_to_the_consumer_and_back(
    remoting: RemotingTestClient, consumer: RemotingTestClient, topics: Callable[..., None]
) -> None:
    topics("RunT", queue_nums=1)
    heartbeat(consumer, "10.0.0.9@c1", "RunG", "RunT")
    asked = {"consumerGroup": "RunG", "clientId": "10.0.0.9@c1", "jstackEnable": "false"}
    pending = remoting.send_command(remoting.command(RequestCode.GET_CONSUMER_RUNNING_INFO, asked))
    relayed = server_request(consumer, RequestCode.GET_CONSUMER_RUNNING_INFO)
    assert relayed.ext_fields == asked and not relayed.is_oneway
    running = json.dumps({"properties": {"consumeType": "CONSUME_PASSIVELY"}, "subscriptionSet": []}).encode()
    answer(consumer, relayed, ResponseCode.SUCCESS, running)
    response = ok(pending.result(10))
    assert response.body == running

    offline = remoting.call(RequestCode.GET_CONSUMER_RUNNING_INFO, {**asked, "clientId": "nobody"})
    assert (offline.code, offline.remark) == (ResponseCode.SYSTEM_ERROR, "The Consumer <RunG> <nobody> not online")


def test_a_consumer_that_does_not_answer_is_consume_msg_timeout(
    remoting: RemotingTestClient, consumer: RemotingTestClient, topics: Callable[..., None], monkeypatch
) -> None:
    topics("SlowT", queue_nums=1)
    heartbeat(consumer, "10.0.0.9@c1", "SlowG", "SlowT")
    monkeypatch.setattr(connections, "RUNNING_INFO_WAIT_S", 0.2)
    asked = {"consumerGroup": "SlowG", "clientId": "10.0.0.9@c1", "jstackEnable": "false"}
    response = remoting.call(RequestCode.GET_CONSUMER_RUNNING_INFO, asked)
    assert response.code == ResponseCode.CONSUME_MSG_TIMEOUT
    assert (response.remark or "").startswith("consumer <SlowG> <10.0.0.9@c1> Timeout:")


def test_consume_message_directly_carries_the_record_to_the_consumer(
    remoting: RemotingTestClient, consumer: RemotingTestClient, topics: Callable[..., None]
) -> None:
    topics("DirectT", queue_nums=1)
    heartbeat(consumer, "10.0.0.9@c1", "DirectG", "DirectT")
    [msg_id] = send(remoting, "DirectT", 1)
    asked = {"consumerGroup": "DirectG", "clientId": "10.0.0.9@c1", "msgId": msg_id, "topic": "DirectT"}
    pending = remoting.send_command(remoting.command(RequestCode.CONSUME_MESSAGE_DIRECTLY, asked))
    relayed = server_request(consumer, RequestCode.CONSUME_MESSAGE_DIRECTLY)
    assert relayed.ext_fields == {**asked, "brokerName": BROKER}
    [record] = records(relayed.body)
    assert record.body == b"body-0" and record.topic == "DirectT"
    result = json.dumps({"order": False, "autoCommit": True, "consumeResult": "CR_SUCCESS", "spentTimeMills": 1})
    answer(consumer, relayed, ResponseCode.SUCCESS, result.encode())
    assert ok(pending.result(10)).body == result.encode()
    for unknown in ("not-an-id", f"7F00000100002A9F{1 << 40:016X}"):  # no id / no record there
        refused = remoting.call(RequestCode.CONSUME_MESSAGE_DIRECTLY, {**asked, "msgId": unknown})
        assert (refused.code, refused.remark) == (
            ResponseCode.SYSTEM_ERROR,
            f"can not find message by the msgId, {unknown}",
        )


def test_v2_clients_are_listed_beside_remoting_ones(
    remoting: RemotingTestClient, topics: Callable[..., None], door
) -> None:
    topics("MixT", queue_nums=1)
    registry = door.context.core.telemetry.registry
    facts = ClientFacts("golang", "5.0.7", "10.1.1.1:5000")
    consumer = ClientSession("v2-c", lambda command: True, 1, ClientType.SIMPLE_CONSUMER, group="V2G", facts=facts)
    consumer.subscriptions, consumer.language, consumer.version = (("MixT", "x || y"),), "GOLANG", "V5_0_7"
    producer = ClientSession("v2-p", lambda command: True, 1, ClientType.PRODUCER, frozenset({"MixT"}), facts=facts)
    producer.language, producer.version, producer.last_seen_ms = "RUST", "5.0.7", 42
    registry.register(consumer)  # as their Telemetry streams would
    registry.register(producer)
    connection = fastjson_loads(
        ok(remoting.call(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "V2G"})).body
    )
    assert connection["connectionSet"] == [
        {"clientAddr": "10.1.1.1:5000", "clientId": "v2-c", "language": "GO", "version": 413 + 2 * 7}
    ]
    assert connection["consumeType"] == "CONSUME_ACTIVELY" and connection["messageModel"] == "CLUSTERING"
    assert sorted(connection["subscriptionTable"]["MixT"]["tagsSet"]) == ["x", "y"]
    who = fastjson_loads(ok(remoting.call(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "MixT"})).body)
    assert who["groupList"] == ["V2G"]
    producers = fastjson_loads(
        ok(remoting.call(RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "MixT"})).body
    )
    assert producers["connectionSet"] == [  # the proxy's producer group of a v2 producer: its topic
        {"clientAddr": "10.1.1.1:5000", "clientId": "v2-p", "language": "RUST", "version": 479}
    ]
    data = fastjson_loads(ok(remoting.call(RequestCode.GET_ALL_PRODUCER_INFO)).body)["data"]
    assert data["MixT"] == [
        {"clientId": "v2-p", "language": "RUST", "lastUpdateTimestamp": 42, "remoteIP": "10.1.1.1:5000", "version": 479}
    ]


# -- broker groups ------------------------------------------------------------------------------------


def test_a_groups_port_answers_for_that_group_the_main_port_for_all(tmp_path: Path) -> None:
    with two_groups(tmp_path, remoting_group_ports=f"{GROUP_A}=0,{GROUP_B}=0") as groups:
        door = build_remoting(groups.broker.core, "127.0.0.1", "127.0.0.1", 0, False)
        door.start()
        try:
            groups.create("SplitT", queue_nums=1)
            with RemotingTestClient(door.context.address) as main:
                route = parse_topic_route(ok(main.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "SplitT"})).body)
                ports = {b.broker_name: b.broker_addrs[0] for b in route.broker_datas}
                for group, address in ports.items():
                    with RemotingTestClient(address) as client:
                        send(client, "SplitT", 1, keys=f"k-{group} shared")
                query = {"topic": "SplitT", "key": "shared", "maxNum": "64", **FOREVER}
                everywhere = records(ok(main.call(RequestCode.QUERY_MESSAGE, query)).body)
                assert sorted(r.properties["KEYS"] for r in everywhere) == ["k-broker-a shared", "k-broker-b shared"]
                stats = parse_topic_stats_table(
                    ok(main.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "SplitT"})).body
                )
                assert set(stats.offset_table) == {MessageQueue("SplitT", g, 0) for g in (GROUP_A, GROUP_B)}
                totals = parse_kv_table(ok(main.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body)
                assert totals["putMessageTimesTotal"] == "2"
                named = main.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "SplitT", "bname": GROUP_B})
                assert set(parse_topic_stats_table(ok(named).body).offset_table) == {MessageQueue("SplitT", GROUP_B, 0)}
            for group, address in ports.items():  # as a tool asks each broker of the route
                with RemotingTestClient(address) as broker:
                    [record] = records(ok(broker.call(RequestCode.QUERY_MESSAGE, query)).body)
                    assert record.properties["KEYS"] == f"k-{group} shared"
                    stats = parse_topic_stats_table(
                        ok(broker.call(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "SplitT"})).body
                    )
                    [(queue, offsets)] = stats.offset_table.items()
                    assert queue == MessageQueue("SplitT", group, 0) and offsets.max_offset == 1
                    table = parse_kv_table(ok(broker.call(RequestCode.GET_BROKER_RUNTIME_INFO)).body)
                    assert table["putMessageTimesTotal"] == "1"
        finally:
            door.stop()


# -- pure parts --------------------------------------------------------------------------------------------


def test_put_rates_over_the_windows_from_earlier_calls() -> None:
    sampler = RateSampler()
    assert sampler.rates(100.0, 0) == (0.0, 0.0, 0.0)  # nothing to compare with yet
    assert sampler.rates(105.0, 50) == (10.0, 10.0, 10.0)  # only a 5 s old sample: over 5 s
    assert sampler.rates(170.0, 700) == (10.0, 10.0, 10.0)  # 10 s and 60 s: since 105; 600 s: since 100
    assert sampler.rates(171.0, 710)[0] == 10.0  # the newest sample 10 s old is still 105's


def test_attribute_text_and_java_forms() -> None:
    assert parse_attributes("+message.type=FIFO,-queue.type") == {"+message.type": "FIFO", "-queue.type": ""}
    assert parse_attributes("") == {}
    with pytest.raises(RemotingError, match="key duplication"):
        parse_attributes("+a=1,+a=2")
    assert (version_desc(479), version_desc(413), version_desc(401)) == ("V5_3_3", "V5_0_0", "401")
    assert (human_bytes(512), human_bytes(1536), human_bytes(3 << 30)) == ("512 B", "1.5 KiB", "3.0 GiB")
