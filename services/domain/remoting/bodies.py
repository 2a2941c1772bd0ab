"""JSON bodies of the name-server and admin codes, in the forms RocketMQ's namesrv and broker
write them with fastjson (../shared/docs/remoting.md §2.3, §2.6, §2.7, §3; writing and reading
rules in services/domain/remoting/fastjson_codec.py). Field names are the Java getters' names.

| body | code | shape |
|---|---|---|
| TopicRouteData | GET_ROUTEINFO_BY_TOPIC 105 | ``{brokerDatas:[BrokerData], filterServerTable:{}, orderTopicConf?, queueDatas:[QueueData]}`` |
| BrokerData | in 105 and 106 | ``{brokerAddrs:{brokerId:addr}, brokerName, cluster, enableActingMaster, zoneName?}`` |
| QueueData | in 105 | ``{brokerName, perm, readQueueNums, topicSysFlag, writeQueueNums}`` |
| ClusterInfo | GET_BROKER_CLUSTER_INFO 106 | ``{brokerAddrTable:{brokerName:BrokerData}, clusterAddrTable:{cluster:[brokerName]}}`` |
| TopicStatsTable | GET_TOPIC_STATS_INFO 202 | ``{offsetTable:{MQ:{lastUpdateTimestamp, maxOffset, minOffset}}, topicPutTps}`` |
| ConsumeStats | GET_CONSUME_STATS 208 | ``{consumeTps, offsetTable:{MQ:{brokerOffset, consumerOffset, lastTimestamp, pullOffset}}}`` |
| LockBatchRequestBody | LOCK_BATCH_MQ 41, UNLOCK_BATCH_MQ 42 | ``{clientId, consumerGroup, mqSet:[MQ], onlyThisBroker}`` |
| LockBatchResponseBody | answer to 41 | ``{lockOKMQSet:[MQ]}`` |
| KVTable | GET_BROKER_RUNTIME_INFO 28, GET_KVLIST_BY_NAMESPACE 219 | ``{table:{k:v}}``, values strings |

MQ is a MessageQueue ``{brokerName, queueId, topic}``; a ``Map<MessageQueue, X>`` key is written
as that raw object (fastjson's form, which every Java tool reads; the parsers also read the
stringified form). Route JSON has two forms, chosen per request (:func:`route_json_is_standard`):
the native one with bare numeric keys ``{0:"addr"}`` for clients older than V4_9_4, and standard
JSON with quoted keys and ``\\uXXXX`` for non-ASCII (BrowserCompatible) for the others.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from services.domain.remoting.fastjson_codec import (
    BodyError,
    as_int,
    expect,
    fastjson_dumpb,
    fastjson_loads,
    key_object,
)

STANDARD_ROUTE_JSON_VERSION_MIN = 401  # MQVersion V4_9_4: namesrv answers standard JSON from here


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """RocketMQ's MessageQueue; ordered as its ``compareTo`` (topic, brokerName, queueId)."""

    topic: str
    broker_name: str
    queue_id: int

    def fastjson_fields(self) -> dict[str, object]:
        return {"brokerName": self.broker_name, "queueId": self.queue_id, "topic": self.topic}


@dataclass(frozen=True, slots=True)
class BrokerData:
    """One broker group: its cluster, name and ``{brokerId: "host:port"}`` (0 = master)."""

    cluster: str
    broker_name: str
    broker_addrs: Mapping[int, str]
    enable_acting_master: bool = False
    zone_name: str | None = None

    def fastjson_fields(self) -> dict[str, object]:
        return {
            "brokerAddrs": self.broker_addrs,
            "brokerName": self.broker_name,
            "cluster": self.cluster,
            "enableActingMaster": self.enable_acting_master,
            "zoneName": self.zone_name,
        }


@dataclass(frozen=True, slots=True)
class QueueData:
    """A topic's queues on one broker group; ``perm``: READ 4 | WRITE 2 (PermName)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def fastjson_fields(self) -> dict[str, object]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """GET_ROUTEINFO_BY_TOPIC's answer; ``order_topic_conf`` like ``"broker-a:4;broker-b:4"``."""

    broker_datas: tuple[BrokerData, ...]
    queue_datas: tuple[QueueData, ...]
    order_topic_conf: str | None = None
    filter_server_table: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def fastjson_fields(self) -> dict[str, object]:
        return {
            "brokerDatas": self.broker_datas,
            "filterServerTable": self.filter_server_table,
            "orderTopicConf": self.order_topic_conf,
            "queueDatas": self.queue_datas,
        }


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """GET_BROKER_CLUSTER_INFO's answer: broker groups by name, broker names by cluster."""

    broker_addr_table: Mapping[str, BrokerData]
    cluster_addr_table: Mapping[str, Collection[str]]

    def fastjson_fields(self) -> dict[str, object]:
        return {
            "brokerAddrTable": self.broker_addr_table,
            "clusterAddrTable": {name: sorted(brokers) for name, brokers in self.cluster_addr_table.items()},
        }


@dataclass(frozen=True, slots=True)
class TopicOffset:
    """One queue's offsets in a TopicStatsTable; ``max_offset`` is the next offset to write."""

    min_offset: int
    max_offset: int
    last_update_timestamp: int = 0

    def fastjson_fields(self) -> dict[str, object]:
        return {
            "lastUpdateTimestamp": self.last_update_timestamp,
            "maxOffset": self.max_offset,
            "minOffset": self.min_offset,
        }


@dataclass(frozen=True, slots=True)
class TopicStatsTable:
    offset_table: Mapping[MessageQueue, TopicOffset]
    topic_put_tps: float = 0.0

    def fastjson_fields(self) -> dict[str, object]:
        return {"offsetTable": self.offset_table, "topicPutTps": self.topic_put_tps}


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    """One queue's progress in ConsumeStats (``OffsetWrapper``)."""

    broker_offset: int
    consumer_offset: int
    pull_offset: int = 0
    last_timestamp: int = 0

    def fastjson_fields(self) -> dict[str, object]:
        return {
            "brokerOffset": self.broker_offset,
            "consumerOffset": self.consumer_offset,
            "lastTimestamp": self.last_timestamp,
            "pullOffset": self.pull_offset,
        }


@dataclass(frozen=True, slots=True)
class ConsumeStats:
    offset_table: Mapping[MessageQueue, OffsetWrapper]
    consume_tps: float = 0.0

    def fastjson_fields(self) -> dict[str, object]:
        return {"consumeTps": self.consume_tps, "offsetTable": self.offset_table}


@dataclass(frozen=True, slots=True)
class LockBatchRequest:
    """LOCK_BATCH_MQ's and UNLOCK_BATCH_MQ's body (the C++ client sends no onlyThisBroker)."""

    consumer_group: str
    client_id: str
    mq_set: frozenset[MessageQueue]
    only_this_broker: bool = False

    def fastjson_fields(self) -> dict[str, object]:
        return {
            "clientId": self.client_id,
            "consumerGroup": self.consumer_group,
            "mqSet": self.mq_set,
            "onlyThisBroker": self.only_this_broker,
        }


# -- writing ----------------------------------------------------------------------------------


def route_json_is_standard(version: int, accept_standard_json_only: str | bool | None = None) -> bool:
    """Whether GET_ROUTEINFO_BY_TOPIC answers standard JSON: request version >= 401 (V4_9_4) or
    header ``acceptStandardJsonOnly`` true (``Boolean.parseBoolean``: "true" in any case)."""
    if isinstance(accept_standard_json_only, str):
        accept_standard_json_only = accept_standard_json_only.lower() == "true"
    return version >= STANDARD_ROUTE_JSON_VERSION_MIN or bool(accept_standard_json_only)


def encode_topic_route(route: TopicRouteData, *, standard: bool) -> bytes:
    """A TopicRouteData body: standard JSON (quoted keys, BrowserCompatible) or fastjson's
    native form (``{0:"addr"}``). Both compact. Cache it: it changes only with the route."""
    return fastjson_dumpb(route, browser_compatible=standard)


def encode_cluster_info(info: ClusterInfo, *, standard: bool = True) -> bytes:
    """A ClusterInfo body; quoted keys by default (Java namesrv writes the native form; fastjson
    reads both, and no other reader of 106 is known to need the native one)."""
    return fastjson_dumpb(info, browser_compatible=standard)


def encode_topic_stats_table(table: TopicStatsTable) -> bytes:
    """A TopicStatsTable body, MessageQueue keys as raw objects (fastjson's form)."""
    return fastjson_dumpb(table)


def encode_consume_stats(stats: ConsumeStats) -> bytes:
    """A ConsumeStats body, MessageQueue keys as raw objects (fastjson's form)."""
    return fastjson_dumpb(stats)


def encode_lock_batch_request(request: LockBatchRequest) -> bytes:
    return fastjson_dumpb(request)


def encode_lock_batch_response(locked: Iterable[MessageQueue]) -> bytes:
    """LOCK_BATCH_MQ's answer: the queues now locked by the asking client."""
    return fastjson_dumpb({"lockOKMQSet": sorted(locked)})


def encode_kv_table(table: Mapping[str, str]) -> bytes:
    """A KVTable body ``{"table":{...}}``; every value must already be a string."""
    for key, value in table.items():
        if not isinstance(value, str):
            raise TypeError(f"KVTable value of {key!r} must be a string, got {type(value).__name__}")
    return fastjson_dumpb({"table": table})


# -- reading ----------------------------------------------------------------------------------


def _object(data: bytes | str, what: str) -> dict[Any, Any]:
    value = fastjson_loads(data)
    return expect(value, dict, what)


def _member(fields: dict[str, Any], key: str, kind: type[dict[Any, Any]] | type[list[Any]], what: str) -> Any:
    """``fields[key]`` checked to be a ``kind`` (an object or an array); empty when missing or null."""
    value = fields.get(key)
    return kind() if value is None else expect(value, kind, what)


def _float(value: object, what: str) -> float:
    if value is None:
        return 0.0
    return float(expect(value, (int, float), what))


def _str(value: object, what: str) -> str:
    return expect(value, str, what)


def parse_message_queue(value: object, what: str = "message queue") -> MessageQueue:
    fields = expect(value, dict, what)
    return MessageQueue(
        _str(fields.get("topic"), f"{what}.topic"),
        _str(fields.get("brokerName"), f"{what}.brokerName"),
        as_int(fields.get("queueId"), f"{what}.queueId"),
    )


def _queue_key(key: object, what: str) -> MessageQueue:
    fields = key_object(key)
    if fields is None:
        raise BodyError(f"{what}: key {key!r:.80} is not a MessageQueue object")
    return parse_message_queue(fields, what)


def parse_broker_data(value: object, what: str = "broker data") -> BrokerData:
    fields = expect(value, dict, what)
    addrs = _member(fields, "brokerAddrs", dict, f"{what}.brokerAddrs")
    return BrokerData(
        cluster=_str(fields.get("cluster"), f"{what}.cluster"),
        broker_name=_str(fields.get("brokerName"), f"{what}.brokerName"),
        broker_addrs={as_int(k, f"{what}.brokerAddrs key"): _str(v, f"{what}.brokerAddrs") for k, v in addrs.items()},
        enable_acting_master=bool(fields.get("enableActingMaster", False)),
        zone_name=fields.get("zoneName"),
    )


def parse_topic_route(data: bytes | str) -> TopicRouteData:
    """A TopicRouteData body in either form (also the old ``topicSynFlag`` key)."""
    fields = _object(data, "topic route")
    queues = []
    for i, q in enumerate(_member(fields, "queueDatas", list, "queueDatas")):
        what = f"queueDatas[{i}]"
        q = expect(q, dict, what)
        queues.append(
            QueueData(
                broker_name=_str(q.get("brokerName"), f"{what}.brokerName"),
                read_queue_nums=as_int(q.get("readQueueNums", 0), f"{what}.readQueueNums"),
                write_queue_nums=as_int(q.get("writeQueueNums", 0), f"{what}.writeQueueNums"),
                perm=as_int(q.get("perm", 0), f"{what}.perm"),
                topic_sys_flag=as_int(q.get("topicSysFlag", q.get("topicSynFlag", 0)), f"{what}.topicSysFlag"),
            )
        )
    brokers = [
        parse_broker_data(b, f"brokerDatas[{i}]")
        for i, b in enumerate(_member(fields, "brokerDatas", list, "brokerDatas"))
    ]
    filters = _member(fields, "filterServerTable", dict, "filterServerTable")
    return TopicRouteData(
        broker_datas=tuple(brokers),
        queue_datas=tuple(queues),
        order_topic_conf=fields.get("orderTopicConf"),
        filter_server_table={str(k): tuple(v) for k, v in filters.items()},
    )


def parse_cluster_info(data: bytes | str) -> ClusterInfo:
    fields = _object(data, "cluster info")
    brokers = _member(fields, "brokerAddrTable", dict, "brokerAddrTable")
    clusters = _member(fields, "clusterAddrTable", dict, "clusterAddrTable")
    return ClusterInfo(
        broker_addr_table={str(k): parse_broker_data(v, f"brokerAddrTable[{k}]") for k, v in brokers.items()},
        cluster_addr_table={str(k): frozenset(expect(v, list, f"clusterAddrTable[{k}]")) for k, v in clusters.items()},
    )


def parse_topic_stats_table(data: bytes | str) -> TopicStatsTable:
    """A TopicStatsTable body, MessageQueue keys raw or stringified."""
    fields = _object(data, "topic stats")
    table = _member(fields, "offsetTable", dict, "offsetTable")
    offsets = {}
    for key, value in table.items():
        mq = _queue_key(key, "offsetTable")
        entry = expect(value, dict, f"offsetTable[{mq}]")
        offsets[mq] = TopicOffset(
            min_offset=as_int(entry.get("minOffset", 0), "minOffset"),
            max_offset=as_int(entry.get("maxOffset", 0), "maxOffset"),
            last_update_timestamp=as_int(entry.get("lastUpdateTimestamp", 0), "lastUpdateTimestamp"),
        )
    return TopicStatsTable(offsets, _float(fields.get("topicPutTps"), "topicPutTps"))


def parse_consume_stats(data: bytes | str) -> ConsumeStats:
    """A ConsumeStats body, MessageQueue keys raw or stringified."""
    fields = _object(data, "consume stats")
    table = _member(fields, "offsetTable", dict, "offsetTable")
    offsets = {}
    for key, value in table.items():
        mq = _queue_key(key, "offsetTable")
        entry = expect(value, dict, f"offsetTable[{mq}]")
        offsets[mq] = OffsetWrapper(
            broker_offset=as_int(entry.get("brokerOffset", 0), "brokerOffset"),
            consumer_offset=as_int(entry.get("consumerOffset", 0), "consumerOffset"),
            pull_offset=as_int(entry.get("pullOffset", 0), "pullOffset"),
            last_timestamp=as_int(entry.get("lastTimestamp", 0), "lastTimestamp"),
        )
    return ConsumeStats(offsets, _float(fields.get("consumeTps"), "consumeTps"))


def parse_lock_batch_request(data: bytes | str) -> LockBatchRequest:
    """LOCK_BATCH_MQ's or UNLOCK_BATCH_MQ's body; a missing ``mqSet`` (the C++ client leaves
    it out when empty) is empty, a missing ``onlyThisBroker`` false."""
    fields = _object(data, "lock batch request")
    queues = _member(fields, "mqSet", list, "mqSet")
    return LockBatchRequest(
        consumer_group=_str(fields.get("consumerGroup"), "consumerGroup"),
        client_id=_str(fields.get("clientId"), "clientId"),
        mq_set=frozenset(parse_message_queue(q, f"mqSet[{i}]") for i, q in enumerate(queues)),
        only_this_broker=fields.get("onlyThisBroker") in (True, "true"),
    )


def parse_lock_batch_response(data: bytes | str) -> frozenset[MessageQueue]:
    fields = _object(data, "lock batch response")
    queues = _member(fields, "lockOKMQSet", list, "lockOKMQSet")
    return frozenset(parse_message_queue(q, f"lockOKMQSet[{i}]") for i, q in enumerate(queues))


def parse_kv_table(data: bytes | str) -> dict[str, str]:
    fields = _object(data, "KVTable")
    table = _member(fields, "table", dict, "table")
    return {str(k): _str(v, f"table[{k}]") for k, v in table.items()}
