"""Operator codes (../shared/docs/remoting.md §3 "Minimum set"): what mqadmin's common commands,
rocketmq-dashboard and rocketmq-exporter ask a broker, answered from the core. ``Admin`` registers
the codes below and those of queries.py (messages, stats, progress, reset) and connections.py
(connected clients, relays to a consumer).

| code | answer |
|---|---|
| UPDATE_AND_CREATE_TOPIC 17 | the topic created or updated (``TopicPlacement.create``) on the request's group (``bname`` or its port's, as mqadmin ``-c`` asks each broker), else on every group of the cluster: ``writeQueueNums`` queues (pyrmq keeps read = write), the type from ``attributes`` ``+message.type=X``, else FIFO when ``order`` is true, else the stored one (NORMAL for a new topic); other ``+key=value`` attributes as topic attributes (the core refuses unknown ones); ``perm`` is not changed; INVALID_PARAMETER 29 for an illegal or system topic name, in TopicValidator's words |
| DELETE_TOPIC_IN_BROKER 215 | deleted from every group of its route (``TopicPlacement.delete``); SUCCESS whether it existed or not, as RocketMQ; INVALID_PARAMETER for a blank or system topic |
| DELETE_TOPIC_IN_NAMESRV 216 | SUCCESS, nothing to do: routes come from the stores (and etcd) |
| GET_ALL_TOPIC_CONFIG 21 | TopicConfigAndMappingSerializeWrapper of every topic (system ones too) of the request's group, else of every group; no ``totalTopicNum`` header: clients take the page as the whole |
| GET_TOPIC_CONFIG 351 | TopicConfigAndQueueMapping (a TopicConfig); TOPIC_NOT_EXIST "No topic in this broker. topic: T" |
| UPDATE_AND_CREATE_SUBSCRIPTIONGROUP 200 | body SubscriptionGroupConfig: ``consumeMessageOrderly``, ``retryMaxTimes`` (+ 1 deliveries), ``groupRetryPolicy``, ``attributes`` (``+k=v`` / ``-k``) stored in every group's store (``TopicPlacement.create_group``); the other fields (consumeEnable, consumeBroadcastEnable, brokerId ...) are not kept; INVALID_PARAMETER for an illegal group name |
| GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201 | SubscriptionGroupWrapper of the home group's store (groups are written to every group's), any header or none, no ``totalGroupNum`` |
| GET_SUBSCRIPTIONGROUP_CONFIG 352 | SubscriptionGroupConfig; SUBSCRIPTION_GROUP_NOT_EXIST "No group in this broker" |
| DELETE_SUBSCRIPTIONGROUP 207 | the group's config deleted from every group's store; its committed offsets stay (``cleanOffset`` is not done) |
| GET_BROKER_CONFIG 26 | ``java.util.Properties`` text: RocketMQ's names for the settings pyrmq has (brokerClusterName, brokerName, brokerId 0, brokerIP1, listenPort, namesrvAddr ...) then every ``BrokerConfig`` field in camelCase (``init_authentication_user`` left out: it holds a secret); header ``version`` = DataVersion JSON |
| GET_BROKER_RUNTIME_INFO 28 | KVTable of the request's group, else of every group, with every key ClusterListSubCommand and rocketmq-exporter's BrokerRuntimeStats read, values strings (below) |
| VIEW_BROKER_STATS_DATA 315 | SYSTEM_ERROR "The stats <name> <key> not exist": pyrmq keeps no minute/hour/day stats items (the tools skip it) |

GET_BROKER_RUNTIME_INFO's figures. Real: ``msgPutTotalTodayNow`` and ``putMessageTimesTotal`` (the
stores' appended messages since each store started, summed over the groups answered for:
GetStats), ``putMessageSizeTotal``, ``putMessageAverageSize``, ``commitLogMinOffset`` /
``commitLogMaxOffset`` (the first group's store: the home group's when all are asked),
``dispatchBehindBytes``, ``remainHowManyDataToFlush``, ``earliestMessageTimeStamp`` (the store time
of that store's first record; this door's start when it has none), ``sendThreadPoolQueueSize``
(sends waiting in those groups' send queues) and
``putTps`` ("10 s, 60 s, 600 s" rates from the put counts this door saw at earlier calls: 0.0
until a call that far back). Estimates: ``bootTimestamp`` / ``runtime`` are this door's start;
``commitLogDiskRatio``, ``consumeQueueDiskRatio`` and ``commitLogDirCapacity`` describe the disk
of the broker's ``data_dir`` (the store's only when they share it, as under ``pyrmq up``); the
``...Morning`` counts are 0 (counts start at the store's start, not midnight); the pull, query
and ack pool capacities are the door's worker threads. Zero because pyrmq does not count them:
every ``msgGet...`` count and get TPS, latencies and time maxima, the put time distribution,
queue head waits, page-cache lock time, timer figures.
"""

from __future__ import annotations

import shutil
import threading
from collections import deque
from dataclasses import fields as dataclass_fields
from typing import Any

from services.broker.errors import FAILURES
from services.broker.remoting.connections import Connections
from services.broker.remoting.context import RemotingContext
from services.broker.remoting.dispatch import Dispatcher, RemotingError, optional_bool, required, required_int
from services.broker.remoting.queries import Queries, group_cores, topic_cores
from services.broker.remoting.server import Channel
from services.domain.names import is_system_topic, validate_group_name, validate_topic_name
from services.domain.remoting.bodies import encode_kv_table
from services.domain.remoting.codes import SERVER_VERSION, RequestCode, ResponseCode
from services.domain.remoting.command import RemotingCommand
from services.domain.remoting.fastjson_codec import (
    BodyError,
    fastjson_dumpb,
    fastjson_dumps,
    fastjson_loads,
    java_double,
)
from services.domain.retry_policy import GroupRetryPolicy
from services.domain.topic_types import MESSAGE_TYPE_ATTRIBUTE
from services.store.client.model import GroupInfo, StoreStats, TopicInfo

GET_SUBSCRIPTIONGROUP_CONFIG = 352  # RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG
MASTER_ID = 0
INT_MAX = 2**31 - 1  # remainTransientStoreBufferNumbs with no transient store pool
TPS_WINDOWS_S = (10, 60, 600)  # StoreStatsService's putTps windows
PUT_TIME_BUCKETS = (
    "[<=0ms]", "[0~10ms]", "[10~50ms]", "[50~100ms]", "[100~200ms]", "[200~500ms]", "[500ms~1s]",
    "[1~2s]", "[2~3s]", "[3~4s]", "[4~5s]", "[5~10s]", "[10s~]",
)  # fmt: skip
SECRET_SETTINGS = frozenset({"init_authentication_user"})


class Admin:
    def __init__(self, context: RemotingContext) -> None:
        self._context = context
        self._queries = Queries(context)
        self._connections = Connections(context)
        self._boot_ms = context.clock.now_ms()
        self._puts: dict[str, RateSampler] = {}  # by broker group ("": all of them)

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(RequestCode.UPDATE_AND_CREATE_TOPIC, self.update_topic)
        dispatcher.register(RequestCode.DELETE_TOPIC_IN_BROKER, self.delete_topic)
        dispatcher.register(RequestCode.DELETE_TOPIC_IN_NAMESRV, self.delete_topic_in_namesrv, inline=True)
        dispatcher.register(RequestCode.GET_ALL_TOPIC_CONFIG, self.all_topic_config)
        dispatcher.register(RequestCode.GET_TOPIC_CONFIG, self.topic_config)
        dispatcher.register(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, self.update_group)
        dispatcher.register(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self.all_group_config)
        dispatcher.register(GET_SUBSCRIPTIONGROUP_CONFIG, self.group_config)
        dispatcher.register(RequestCode.DELETE_SUBSCRIPTIONGROUP, self.delete_group)
        dispatcher.register(RequestCode.GET_BROKER_CONFIG, self.broker_config, inline=True)
        dispatcher.register(RequestCode.GET_BROKER_RUNTIME_INFO, self.runtime_info)
        dispatcher.register(RequestCode.VIEW_BROKER_STATS_DATA, self.broker_stats, inline=True)
        self._queries.register(dispatcher)
        self._connections.register(dispatcher)

    # -- topics ------------------------------------------------------------------------------------
    def update_topic(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        topic = required(fields, "topic")
        queue_nums = required_int(fields, "writeQueueNums")
        required_int(fields, "readQueueNums")
        _check_topic(topic)
        message_type = ""
        attributes: dict[str, str] = {}
        for key, value in parse_attributes(fields.get("attributes") or "").items():
            if key.startswith("-"):
                raise RemotingError(ResponseCode.SYSTEM_ERROR, f"deleting topic attribute {key[1:]} is not supported")
            if key[1:] == MESSAGE_TYPE_ATTRIBUTE:
                message_type = value
            else:
                attributes[key[1:]] = value
        if not message_type and optional_bool(fields, "order"):
            message_type = "FIFO"
        scope = self._context.broker_name(channel, fields)  # mqadmin -c asks each broker of the cluster
        on = (self._context.group_core(scope).name,) if scope else ()
        self._context.core.placement.create(topic, message_type, queue_nums, on, attributes or None)
        return request.response(ResponseCode.SUCCESS)

    def delete_topic(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        topic = required(request.ext_fields, "topic")
        if not topic.strip():
            raise RemotingError(ResponseCode.INVALID_PARAMETER, "The specified topic is blank.")
        _check_topic(topic)
        self._context.core.placement.delete(topic)
        return request.response(ResponseCode.SUCCESS)

    def delete_topic_in_namesrv(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        return request.response(ResponseCode.SUCCESS)

    def all_topic_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        placement = self._context.core.placement
        scope = self._context.broker_name(channel, request.ext_fields)
        if scope:
            topics = placement.admin(self._context.group_core(scope).name).list_topics(include_system=True)
        else:
            topics = [info for info, _ in placement.list_topics(include_system=True)]
        version = self._data_version()
        body = {
            "dataVersion": version,
            "mappingDataVersion": version,
            "topicConfigTable": {info.name: topic_config(info) for info in topics},
            "topicQueueMappingDetailMap": {},
            "topicQueueMappingInfoMap": {},
        }
        return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb(body))

    def topic_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        topic = required(request.ext_fields, "topic")
        if validate_topic_name(topic) is None:
            for core in topic_cores(self._context, topic, self._context.broker_name(channel, request.ext_fields)):
                info = core.store.get_topic(topic)
                if info is not None:
                    return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb(topic_config(info)))
        return request.response(ResponseCode.TOPIC_NOT_EXIST, f"No topic in this broker. topic: {topic}")

    # -- subscription groups -----------------------------------------------------------------------
    def update_group(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        try:
            config = fastjson_loads(request.body) if request.body else None
        except BodyError as exc:
            raise RemotingError(
                ResponseCode.SYSTEM_ERROR, f"the body is not a SubscriptionGroupConfig: {exc}"
            ) from None
        if not isinstance(config, dict):  # RocketMQ answers SUCCESS for an empty body
            return request.response(ResponseCode.SUCCESS)
        name = str(config.get("groupName") or "")
        reason = validate_group_name(name)
        if reason:
            raise RemotingError(ResponseCode.INVALID_PARAMETER, reason)
        retry_max_times = config.get("retryMaxTimes")
        attempts = retry_max_times + 1 if isinstance(retry_max_times, int) and retry_max_times >= 0 else 0
        try:
            policy = GroupRetryPolicy.from_json(config["groupRetryPolicy"]) if "groupRetryPolicy" in config else None
        except ValueError as exc:
            raise RemotingError(ResponseCode.INVALID_PARAMETER, f"groupRetryPolicy: {exc}") from None
        added: dict[str, str] = {}
        removed: list[str] = []
        raw_attributes = config.get("attributes")
        for key, value in (raw_attributes if isinstance(raw_attributes, dict) else {}).items():
            key = str(key)
            if key.startswith("-"):
                removed.append(key[1:])
            else:
                added[key.removeprefix("+")] = str(value)
        fifo = config.get("consumeMessageOrderly")
        self._context.core.placement.create_group(
            name, fifo if isinstance(fifo, bool) else None, attempts, policy, False, added or None, removed
        )
        return request.response(ResponseCode.SUCCESS)

    def all_group_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        groups = self._context.core.admin.list_groups(include_system=True)
        body = {
            "dataVersion": self._data_version(),
            "forbiddenTable": {},
            "subscriptionGroupTable": {group.name: group_config(group) for group in groups},
        }
        return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb(body))

    def group_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        name = required(request.ext_fields, "group")
        group = self._context.core.store.get_group(name) if validate_group_name(name) is None else None
        if group is None:
            return request.response(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, "No group in this broker")
        return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb(group_config(group)))

    def delete_group(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        name = required(request.ext_fields, "groupName")
        reason = validate_group_name(name)
        if reason:
            raise RemotingError(ResponseCode.INVALID_PARAMETER, reason)
        for core in group_cores(self._context):
            core.store.delete_group(name)
        return request.response(ResponseCode.SUCCESS)

    # -- the broker ----------------------------------------------------------------------------------
    def broker_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        context = self._context
        config = context.config
        host, _, port = context.address.rpartition(":")
        known: dict[str, object] = {
            "brokerClusterName": config.cluster_name,
            "brokerName": config.broker_name,
            "brokerId": MASTER_ID,
            "brokerIP1": host.strip("[]"),
            "listenPort": port,
            "namesrvAddr": context.address,
            "autoCreateTopicEnable": config.auto_create_topic_enable,
            "autoCreateSubscriptionGroup": True,
            "defaultTopicQueueNums": config.auto_create_topic_queue_nums,
            "maxMessageSize": config.body_size_max_bytes,
            "authenticationEnabled": config.authentication_enabled,
            "authorizationEnabled": config.authorization_enabled,
        }
        for field in dataclass_fields(config):
            if field.name not in SECRET_SETTINGS:
                known.setdefault(camel_case(field.name), getattr(config, field.name))
        text = "".join(f"{key}={_property(value)}\n" for key, value in known.items())
        header = {"version": fastjson_dumps(self._data_version())}
        return request.response(ResponseCode.SUCCESS, ext_fields=header, body=text.encode())

    def runtime_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        table = self.runtime_table(self._context.broker_name(channel, request.ext_fields))
        return request.response(ResponseCode.SUCCESS, body=encode_kv_table(table))

    def runtime_table(self, broker_name: str = "") -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's table for one broker group, or all ("") (module docstring:
        which figures are real)."""
        context = self._context
        config = context.config
        cores = group_cores(context, broker_name)
        stats: list[StoreStats] = []
        for core in cores:
            try:
                stats.append(core.store.stats())
            except FAILURES:  # a group down: the others' figures
                if core is cores[0]:
                    raise
        home = stats[0]
        puts = sum(s.put_messages_total for s in stats)
        put_bytes = sum(s.put_bytes_total for s in stats)
        now_ms = context.clock.now_ms()
        put_tps = self._puts.setdefault(broker_name, RateSampler()).rates(context.clock.monotonic_s(), puts)
        earliest = self._boot_ms
        if home.commitlog_max_offset > home.commitlog_min_offset:
            first = cores[0].store.look_message(home.commitlog_min_offset)
            earliest = first.store_timestamp_ms if first is not None else earliest
        disk = shutil.disk_usage(config.data_dir or ".")
        ratio = java_double(disk.used / disk.total if disk.total else 0.0)
        zero_tps = "0.0 0.0 0.0"
        workers = str(config.remoting_workers)
        table = {
            "bootTimestamp": str(self._boot_ms),
            "runtime": _runtime(now_ms - self._boot_ms),
            "brokerVersion": str(SERVER_VERSION),
            "brokerVersionDesc": version_desc(SERVER_VERSION),
            "brokerActive": "true",
            "msgPutTotalTodayNow": str(puts),
            "msgPutTotalTodayMorning": "0",
            "msgPutTotalYesterdayMorning": "0",
            "msgGetTotalTodayNow": "0",
            "msgGetTotalTodayMorning": "0",
            "msgGetTotalYesterdayMorning": "0",
            "putMessageTimesTotal": str(puts),
            "putMessageFailedTimes": "0",
            "putMessageSizeTotal": str(put_bytes),
            "putMessageAverageSize": java_double(put_bytes / max(puts, 1)),
            "putMessageEntireTimeMax": "0",
            "putMessageDistributeTime": " ".join(f"{bucket}:0" for bucket in PUT_TIME_BUCKETS),
            "putLatency99": "0.00",
            "putLatency999": "0.00",
            "getMessageEntireTimeMax": "0",
            "dispatchMaxBuffer": "0",
            "putTps": " ".join(java_double(rate) for rate in put_tps),
            "getFoundTps": zero_tps,
            "getMissTps": zero_tps,
            "getTotalTps": zero_tps,
            "getTransferredTps": zero_tps,
            "getTransferedTps": zero_tps,  # the 4.9 name rocketmq-exporter reads
            "commitLogMinOffset": str(home.commitlog_min_offset),
            "commitLogMaxOffset": str(home.commitlog_max_offset),
            "dispatchBehindBytes": str(sum(s.dispatch_behind_bytes for s in stats)),
            "remainHowManyDataToFlush": human_bytes(sum(s.flush_behind_bytes for s in stats)),
            "remainTransientStoreBufferNumbs": str(INT_MAX),
            "earliestMessageTimeStamp": str(earliest),
            "startAcceptSendRequestTimeStamp": "0",
            "pageCacheLockTimeMills": "0",
            "commitLogDiskRatio": ratio,
            "consumeQueueDiskRatio": ratio,
            "commitLogDirCapacity": f"Total : {human_bytes(disk.total)}, Free : {human_bytes(disk.free)}.",
            "sendThreadPoolQueueSize": str(sum(core.sink.stats().queued_messages for core in cores)),
            "sendThreadPoolQueueCapacity": str(config.put_queue_messages_max),
            "EndTransactionQueueSize": "0",
            "EndTransactionThreadPoolQueueCapacity": workers,
        }
        for pool in ("pull", "litePull", "query", "ack"):
            table[f"{pool}ThreadPoolQueueSize"] = "0"
            table[f"{pool}ThreadPoolQueueCapacity"] = workers
        for pool in ("send", "pull", "litePull", "query", "ack"):
            table[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = "0"
        for name in ("timerReadBehind", "timerOffsetBehind", "timerCongestNum"):
            table[name] = "0"
        table["timerEnqueueTps"] = table["timerDequeueTps"] = "0.0"
        return table

    def broker_stats(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        name = required(request.ext_fields, "statsName")
        key = required(request.ext_fields, "statsKey")
        return request.response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")

    def _data_version(self) -> dict[str, int]:
        return {"counter": 0, "stateVersion": 0, "timestamp": self._boot_ms}


class RateSampler:
    """Rates of a growing count over the last 10, 60 and 600 s, from the counts seen at calls
    (StoreStatsService samples every second; this door only when asked)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: deque[tuple[float, int]] = deque()

    def rates(self, now_s: float, count: int) -> tuple[float, ...]:
        with self._lock:
            samples = self._samples
            while samples and now_s - samples[0][0] > TPS_WINDOWS_S[-1] * 2:
                samples.popleft()
            found = []
            for window in TPS_WINDOWS_S:
                # the newest sample at least a window old, else the oldest one
                old = next((s for s in reversed(samples) if now_s - s[0] >= window), samples[0] if samples else None)
                elapsed = now_s - old[0] if old is not None else 0.0
                found.append(max(0, count - old[1]) / elapsed if old is not None and elapsed > 0 else 0.0)
            samples.append((now_s, count))
            return tuple(found)


# -- bodies ----------------------------------------------------------------------------------------


def topic_config(info: TopicInfo) -> dict[str, Any]:
    """A TopicConfig as fastjson writes it (TopicConfigAndQueueMapping with no mapping too)."""
    return {
        "attributes": {**info.attributes, MESSAGE_TYPE_ATTRIBUTE: info.message_type},
        "order": info.message_type == "FIFO",
        "perm": info.perm,
        "readQueueNums": info.read_queue_nums,
        "topicFilterType": "SINGLE_TAG",
        "topicName": info.name,
        "topicSysFlag": 0,
        "writeQueueNums": info.write_queue_nums,
    }


def group_config(group: GroupInfo) -> dict[str, Any]:
    """A SubscriptionGroupConfig: pyrmq's fields, RocketMQ's defaults for the rest."""
    return {
        "attributes": dict(group.attributes),
        "brokerId": MASTER_ID,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeMessageOrderly": group.consume_message_orderly,
        "consumeTimeoutMinute": 15,
        "groupName": group.name,
        "groupRetryPolicy": group.retry_policy.to_json(),
        "groupSysFlag": 0,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": group.retry_max_times,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }


def parse_attributes(text: str) -> dict[str, str]:
    """``AttributeParser.parseToMap``: ``+k1=v1,+k2=v2,-k3`` -> {"+k1": "v1", "+k2": "v2", "-k3": ""}."""
    found: dict[str, str] = {}
    for item in text.split(",") if text else ():
        if "=" in item:
            key, _, value = item.partition("=")
            if not key.startswith("+"):
                raise RemotingError(ResponseCode.SYSTEM_ERROR, f"add/alter attribute format is wrong: {key}")
        else:
            key, value = item, ""
            if not key.startswith("-"):
                raise RemotingError(ResponseCode.SYSTEM_ERROR, f"delete attribute format is wrong: {key}")
        if key in found:
            raise RemotingError(ResponseCode.SYSTEM_ERROR, f"key duplication: {key}")
        found[key] = value
    return found


def version_desc(version: int) -> str:
    """``MQVersion.getVersionDesc`` for the 5.x ordinals (V5_0_0 = 413, two per release)."""
    step = version - 413
    if 0 <= step < 200 and step % 2 == 0:
        return f"V5_{step // 20}_{step % 20 // 2}"
    return str(version)


def camel_case(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def human_bytes(count: int) -> str:
    """``MixAll.humanReadableByteCount(bytes, false)``: ``512 B``, ``1.5 KiB``, ``2.0 GiB``."""
    if count < 1024:
        return f"{count} B"
    exponent, rest = 0, count
    while rest >= 1024 and exponent < 6:
        rest //= 1024
        exponent += 1
    return f"{count / 1024**exponent:.1f} {'KMGTPE'[exponent - 1]}iB"


def _runtime(elapsed_ms: int) -> str:
    seconds = max(elapsed_ms, 0) // 1000
    days, seconds = divmod(seconds, 86400)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    return f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]"


def _property(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return ",".join(_property(v) for v in value)
    return str(value)


def _check_topic(topic: str) -> None:
    reason = validate_topic_name(topic)
    if reason:
        raise RemotingError(ResponseCode.INVALID_PARAMETER, reason)
    if is_system_topic(topic):
        raise RemotingError(ResponseCode.INVALID_PARAMETER, f"The topic[{topic}] is conflict with system topic.")
