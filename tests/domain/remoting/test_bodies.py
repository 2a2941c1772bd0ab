"""Name-server and admin bodies in fastjson's forms (../shared/docs/remoting.md §2.3, §2.6, §2.7,
§3): route JSON in both version-dependent forms, ClusterInfo, Map<MessageQueue, X> bodies with
raw-object keys, LOCK_BATCH_MQ and KVTable."""

from __future__ import annotations

import pytest

from services.domain.remoting.bodies import (
    BrokerData,
    ClusterInfo,
    ConsumeStats,
    LockBatchRequest,
    MessageQueue,
    OffsetWrapper,
    QueueData,
    TopicOffset,
    TopicRouteData,
    TopicStatsTable,
    encode_cluster_info,
    encode_consume_stats,
    encode_kv_table,
    encode_lock_batch_request,
    encode_lock_batch_response,
    encode_topic_route,
    encode_topic_stats_table,
    parse_cluster_info,
    parse_consume_stats,
    parse_kv_table,
    parse_lock_batch_request,
    parse_lock_batch_response,
    parse_topic_route,
    parse_topic_stats_table,
    route_json_is_standard,
)
from services.domain.remoting.fastjson_codec import BodyError

BROKER_A = BrokerData("DefaultCluster", "broker-a", {0: "127.0.0.1:10911"})
ROUTE = TopicRouteData((BROKER_A,), (QueueData("broker-a", 4, 4, 6),))
# §2.6's TopicRouteData, compact.
ROUTE_STANDARD = (
    '{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster",'
    '"enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,'
    '"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
)
ROUTE_NATIVE = ROUTE_STANDARD.replace('{"0":', "{0:")
MQ = MessageQueue("T", "b", 0)


def test_route_standard_form_is_the_docs_json():
    assert encode_topic_route(ROUTE, standard=True) == ROUTE_STANDARD.encode()


def test_route_native_form_has_bare_numeric_keys():
    assert encode_topic_route(ROUTE, standard=False) == ROUTE_NATIVE.encode()


@pytest.mark.parametrize(
    "version,flag,standard",
    [(121, None, False), (317, None, False), (399, None, False), (401, None, True), (479, None, True)]
    + [(121, "true", True), (121, "TRUE", True), (121, "false", False), (121, True, True), (121, "yes", False)],
)
def test_route_form_by_request_version(version, flag, standard):
    assert route_json_is_standard(version, flag) is standard


def test_route_with_every_optional_key_and_several_brokers():
    route = TopicRouteData(
        broker_datas=(
            BrokerData("c1", "broker-b", {1: "10.0.0.2:10911", 0: "10.0.0.1:10911"}, True, "zone-1"),
            BROKER_A,
        ),
        queue_datas=(QueueData("broker-b", 8, 8, 4, 1), QueueData("broker-a", 4, 4, 6)),
        order_topic_conf="broker-a:4;broker-b:8",
        filter_server_table={"10.0.0.1:10911": ("10.0.0.1:8000",)},
    )
    text = encode_topic_route(route, standard=True).decode()
    assert '"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"}' in text
    assert '"enableActingMaster":true,"zoneName":"zone-1"}' in text
    assert '"filterServerTable":{"10.0.0.1:10911":["10.0.0.1:8000"]},"orderTopicConf":"broker-a:4;broker-b:8",' in text
    assert '{"brokerName":"broker-b","perm":4,"readQueueNums":8,"topicSysFlag":1,"writeQueueNums":8}' in text
    assert " " not in text and "\n" not in text  # the Go client breaks on whitespace
    for standard in (True, False):
        assert parse_topic_route(encode_topic_route(route, standard=standard)) == route


def test_route_non_ascii_is_escaped_only_in_the_standard_form():
    route = TopicRouteData((BrokerData("集群", "broker-a", {0: "127.0.0.1:10911"}),), ())
    assert b'"cluster":"\\u96C6\\u7FA4"' in encode_topic_route(route, standard=True)
    assert '"cluster":"集群"'.encode() in encode_topic_route(route, standard=False)
    assert parse_topic_route(encode_topic_route(route, standard=True)) == route


def test_route_parse_reads_the_old_topic_syn_flag_key():
    old = ROUTE_NATIVE.replace('"topicSysFlag":0', '"topicSynFlag":3')
    assert parse_topic_route(old).queue_datas[0].topic_sys_flag == 3


def test_cluster_info_golden():
    info = ClusterInfo({"broker-a": BROKER_A}, {"DefaultCluster": {"broker-b", "broker-a"}})
    expected = (
        '{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a",'
        '"cluster":"DefaultCluster","enableActingMaster":false}},"clusterAddrTable":{"DefaultCluster":["broker-a","broker-b"]}}'
    )
    assert encode_cluster_info(info) == expected.encode()
    assert encode_cluster_info(info, standard=False) == expected.replace('{"0":', "{0:").encode()
    parsed = parse_cluster_info(expected.replace('{"0":', "{0:"))
    assert parsed.broker_addr_table == {"broker-a": BROKER_A}
    assert parsed.cluster_addr_table == {"DefaultCluster": frozenset({"broker-a", "broker-b"})}


def test_topic_stats_table_golden():
    table = TopicStatsTable({MessageQueue("T", "b", 1): TopicOffset(0, 7, 5), MQ: TopicOffset(0, 9, 0)}, 1.5)
    expected = (
        '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"lastUpdateTimestamp":0,"maxOffset":9,"minOffset":0},'
        '{"brokerName":"b","queueId":1,"topic":"T"}:{"lastUpdateTimestamp":5,"maxOffset":7,"minOffset":0}},"topicPutTps":1.5}'
    )
    assert encode_topic_stats_table(table) == expected.encode()
    assert parse_topic_stats_table(expected) == table


def test_consume_stats_golden():
    # §2.7: {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":9,...}}}
    stats = ConsumeStats({MQ: OffsetWrapper(broker_offset=9, consumer_offset=4, pull_offset=6, last_timestamp=17)})
    expected = (
        '{"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:'
        '{"brokerOffset":9,"consumerOffset":4,"lastTimestamp":17,"pullOffset":6}}}'
    )
    assert encode_consume_stats(stats) == expected.encode()
    assert parse_consume_stats(expected) == stats


def test_map_bodies_also_parse_with_stringified_keys():
    # What fastjson >= 1.2.66 and the Go client also read; and a 4.x body without pullOffset.
    text = (
        '{"offsetTable":{"{\\"brokerName\\":\\"b\\",\\"queueId\\":0,\\"topic\\":\\"T\\"}":'
        '{"brokerOffset":9,"consumerOffset":4,"lastTimestamp":17}},"consumeTps":2}'
    )
    assert parse_consume_stats(text) == ConsumeStats({MQ: OffsetWrapper(9, 4, 0, 17)}, 2.0)
    text = '{"offsetTable":{"{\\"topic\\":\\"T\\",\\"brokerName\\":\\"b\\",\\"queueId\\":0}":{"maxOffset":3}}}'
    assert parse_topic_stats_table(text) == TopicStatsTable({MQ: TopicOffset(0, 3, 0)})


@pytest.mark.parametrize(
    "text",
    [
        '{"offsetTable":{"T-0":{"maxOffset":3}}}',  # a key that is no MessageQueue
        '{"offsetTable":{{"brokerName":"b","topic":"T"}:{"maxOffset":3}}}',  # no queueId
        '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":"x"}}}',
        '{"offsetTable":[]}',
        "[]",
        "not json",
    ],
)
def test_bad_stats_bodies_raise_body_error(text):
    with pytest.raises(BodyError):
        parse_topic_stats_table(text)


def test_lock_batch_request_java_form():
    body = (
        '{"clientId":"10.0.0.5@1","consumerGroup":"G","mqSet":[{"brokerName":"b","queueId":1,"topic":"T"},'
        '{"brokerName":"b","queueId":0,"topic":"T"}],"onlyThisBroker":true}'
    )
    request = parse_lock_batch_request(body)
    assert request == LockBatchRequest("G", "10.0.0.5@1", frozenset({MQ, MessageQueue("T", "b", 1)}), True)
    # written back with the set in MessageQueue order (topic, brokerName, queueId)
    assert encode_lock_batch_request(request) == (
        b'{"clientId":"10.0.0.5@1","consumerGroup":"G","mqSet":[{"brokerName":"b","queueId":0,"topic":"T"},'
        b'{"brokerName":"b","queueId":1,"topic":"T"}],"onlyThisBroker":true}'
    )


def test_lock_batch_request_cpp_form():
    # jsoncpp FastWriter: sorted keys, a trailing newline, no onlyThisBroker; no mqSet when empty.
    body = b'{"clientId":"c","consumerGroup":"G","mqSet":[{"brokerName":"b","queueId":0,"topic":"T"}]}\n'
    assert parse_lock_batch_request(body) == LockBatchRequest("G", "c", frozenset({MQ}))
    assert parse_lock_batch_request(b'{"clientId":"c","consumerGroup":"G"}\n').mq_set == frozenset()


def test_lock_batch_response_golden():
    body = encode_lock_batch_response([MessageQueue("T", "b", 1), MQ])
    assert (
        body
        == b'{"lockOKMQSet":[{"brokerName":"b","queueId":0,"topic":"T"},{"brokerName":"b","queueId":1,"topic":"T"}]}'
    )
    assert parse_lock_batch_response(body) == {MQ, MessageQueue("T", "b", 1)}
    assert encode_lock_batch_response([]) == b'{"lockOKMQSet":[]}'


@pytest.mark.parametrize("body", ['{"clientId":"c"}', '{"consumerGroup":"G","clientId":"c","mqSet":{}}', "{"])
def test_bad_lock_bodies_raise_body_error(body):
    with pytest.raises(BodyError):
        parse_lock_batch_request(body)


def test_kv_table_golden():
    body = encode_kv_table({"putTps": "1.0 2.0 3.0", "brokerVersionDesc": "V5_3_3", "bootTimestamp": "1700000000000"})
    assert body == b'{"table":{"bootTimestamp":"1700000000000","brokerVersionDesc":"V5_3_3","putTps":"1.0 2.0 3.0"}}'
    assert parse_kv_table(body) == {
        "putTps": "1.0 2.0 3.0",
        "brokerVersionDesc": "V5_3_3",
        "bootTimestamp": "1700000000000",
    }
    with pytest.raises(TypeError):
        encode_kv_table({"n": 1})  # type: ignore[dict-item]
