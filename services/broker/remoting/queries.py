"""Operator codes that read messages and progress (../shared/docs/remoting.md §2.5, §3), answered
from the core for mqadmin, rocketmq-dashboard and rocketmq-exporter; registered by ``admin.Admin``.

| code | answer |
|---|---|
| QUERY_MESSAGE 12 | the stored records of ``topic`` indexed under ``key`` (a KEYS word; with ``_UNIQUE_KEY_QUERY=true`` the UNIQ_KEY, at most 32) stored in [beginTimestamp, endTimestamp], oldest first, concatenated; header ``indexLastUpdateTimestamp`` / ``indexLastUpdatePhyoffset`` (the newest record found: pyrmq's index does not say when it was last written); QUERY_NOT_FOUND 22 "can not find message, maybe time range not correct" |
| VIEW_MESSAGE_BY_ID 33 | the record at commit-log ``offset`` (the home group's store first, then the others'; one whose topic is the header's ``topic`` preferred); SYSTEM_ERROR "can not find message by the offset, N" |
| GET_TOPIC_STATS_INFO 202 | TopicStatsTable: per queue (max of read and write queues) of each group holding the topic, min and max offset and the store time of the newest message; ``topicPutTps`` 0.0 (not counted per topic); TOPIC_NOT_EXIST "topic[T] not exist" |
| GET_CONSUME_STATS 208 | ConsumeStats: per read queue of each topic (``topicList``, else ``topic``, else every topic the group has offsets in, less those its live consumers do not subscribe), the max offset, the committed offset (0 if none), ``pullOffset`` = the committed one (pyrmq keeps no pull offsets) and the store time of the last consumed message; ``consumeTps`` 0.0 (not counted) |
| QUERY_TOPIC_CONSUME_BY_WHO 300 | GroupList: the groups whose live consumers (either door) subscribe the topic and the groups with committed offsets in it (the stores' consumer stats, read at most every 2 s) |
| INVOKE_BROKER_TO_RESET_OFFSET 222 | ResetOffsetBody ``{offsetTable:{MQ:offset}}``: the group's offsets in the topic moved to the first message stored at or after ``timestamp`` (negative: each queue's max offset) in every group (``ClusterAdmin``), or in one queue (``queueId`` >= 0, to ``offset`` if given, within [min, max + 1]); TOPIC_NOT_EXIST "Topic T does not exist", SUBSCRIPTION_GROUP_NOT_EXIST "Group G does not exist" |

The reset also tells each remoting consumer of the group on this door (oneway
RESET_CONSUMER_CLIENT_OFFSET 220, ResetOffsetBody; ResetOffsetBodyForC for the C++ client), as
RocketMQ 4's ``Broker2Client.resetOffset`` did: a running consumer keeps its offsets in memory and
would commit them back over the reset (RocketMQ 5 instead answers the next pull of each reset
queue with the new offset, which pyrmq's pulls do not track).

Broker groups. A tool asks each broker of a route (or of the cluster) in turn. A request that
names its group (``bname``, 5.x clients) or comes in on a group's own port
(``remoting_group_ports``) is answered for that group alone; one on the main port without
``bname`` for every group of the topic (or cluster), each MessageQueue naming its group. When
every group shares the main port, a Java tool therefore gets each group's answer once per group:
the MessageQueue-keyed answers merge, but QUERY_MESSAGE lists a message once per group asked.
"""

from __future__ import annotations

import logging
import struct
import threading
from dataclasses import replace

from services.broker.admin import QueueReset, ResetPosition
from services.broker.broker_group_core import BrokerGroupCore
from services.broker.broker_group_stats import consumer_stats
from services.broker.errors import FAILURES, Code, as_broker_error
from services.broker.remoting.context import RemotingContext
from services.broker.remoting.dispatch import (
    Dispatcher,
    RemotingError,
    optional_int,
    required,
    required_int,
)
from services.broker.remoting.server import Channel
from services.domain.format.commitlog_format import (
    PHY_OFFSET_POS,
    MessageRecord,
    encode_record,
)
from services.domain.names import validate_group_name, validate_topic_name
from services.domain.remoting.bodies import (
    ConsumeStats,
    MessageQueue,
    OffsetWrapper,
    TopicOffset,
    TopicStatsTable,
    encode_consume_stats,
    encode_topic_stats_table,
)
from services.domain.remoting.codes import RequestCode, ResponseCode
from services.domain.remoting.command import RemotingCommand
from services.domain.remoting.fastjson_codec import fastjson_dumpb
from services.domain.remoting.records import record_host, with_store_host
from services.store.client.client import StoreClient
from services.store.client.model import StoredMessage

log = logging.getLogger(__name__)

UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"  # MixAll.UNIQUE_MSG_QUERY_FLAG
DEFAULT_QUERY_MAX_NUM = 32  # MessageStoreConfig.defaultQueryMaxNum: a unique-key query's limit
QUERY_MAX_NUM = 64  # the store's IndexFile query cap (maxMsgsNumBatch)
RESET_CONSUMER_CLIENT_OFFSET = 220
CONSUMED_BY_TTL_S = 2.0  # topicList -c asks 300 once per topic: one consumer-stats read serves them
CONSUMER_STATS_TIMEOUT_S = 5.0
_LONG = struct.Struct(">q")


class Queries:
    def __init__(self, context: RemotingContext) -> None:
        self._context = context
        self._consumed_lock = threading.Lock()
        self._consumed: tuple[float, dict[str, set[str]]] | None = None

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(RequestCode.QUERY_MESSAGE, self.query_message)
        dispatcher.register(RequestCode.VIEW_MESSAGE_BY_ID, self.view_message)
        dispatcher.register(RequestCode.GET_TOPIC_STATS_INFO, self.topic_stats)
        dispatcher.register(RequestCode.GET_CONSUME_STATS, self.consume_stats)
        dispatcher.register(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, self.consumed_by)
        dispatcher.register(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, self.reset_offset)

    # -- QUERY_MESSAGE 12 --------------------------------------------------------------------------
    def query_message(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        topic = required(fields, "topic")
        key = required(fields, "key")
        max_num = required_int(fields, "maxNum")
        begin = required_int(fields, "beginTimestamp")
        end = required_int(fields, "endTimestamp")
        unique = fields.get(UNIQUE_KEY_QUERY) == "true"
        if unique:
            max_num = DEFAULT_QUERY_MAX_NUM
        max_num = max(1, min(max_num, QUERY_MAX_NUM))
        found: list[tuple[BrokerGroupCore, StoredMessage]] = []
        if key and validate_topic_name(topic) is None:  # nothing is indexed under an illegal name
            for core in topic_cores(self._context, topic, self._context.broker_name(channel, fields)):
                matches = [
                    m
                    for m in core.store.query_messages_by_key(topic, key, max_num)
                    if begin <= m.store_timestamp_ms <= end and (m.message_id == key if unique else key in m.keys)
                ]
                found += [(core, m) for m in sorted(matches, key=lambda m: m.phy_offset)]
        found = found[:max_num]
        newest = max((m for _, m in found), key=lambda m: m.store_timestamp_ms, default=None)
        header = {
            "indexLastUpdateTimestamp": str(newest.store_timestamp_ms if newest else 0),
            "indexLastUpdatePhyoffset": str(newest.phy_offset if newest else 0),
        }
        if not found:
            return request.response(
                ResponseCode.QUERY_NOT_FOUND, "can not find message, maybe time range not correct", header
            )
        body = b"".join(
            with_store_host([raw_record(core.store, message)], self._context.store_host(core.name))
            for core, message in found
        )
        return request.response(ResponseCode.SUCCESS, ext_fields=header, body=body)

    # -- VIEW_MESSAGE_BY_ID 33 ---------------------------------------------------------------------
    def view_message(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        offset = required_int(request.ext_fields, "offset")
        topic = request.ext_fields.get("topic") or ""
        first: tuple[BrokerGroupCore, StoredMessage] | None = None
        if offset >= 0:
            for core in group_cores(self._context, self._context.broker_name(channel, request.ext_fields)):
                message = core.store.look_message(offset)
                if message is None:
                    continue
                if not topic or message.topic == topic:
                    first = (core, message)
                    break
                first = first or (core, message)
        if first is None:
            return request.response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        core, message = first
        body = with_store_host([raw_record(core.store, message)], self._context.store_host(core.name))
        return request.response(ResponseCode.SUCCESS, body=body)

    # -- GET_TOPIC_STATS_INFO 202 ------------------------------------------------------------------
    def topic_stats(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        topic = required(request.ext_fields, "topic")
        table: dict[MessageQueue, TopicOffset] = {}
        held = False
        if validate_topic_name(topic) is None:
            for core in topic_cores(self._context, topic, self._context.broker_name(channel, request.ext_fields)):
                info = core.store.get_topic(topic)
                if info is None:
                    continue
                held = True
                for queue_id in range(max(info.read_queue_nums, info.write_queue_nums)):
                    low, high = core.store.queue_offsets(topic, queue_id)
                    last = store_time_at(core.store, topic, queue_id, high - 1)
                    table[MessageQueue(topic, core.name, queue_id)] = TopicOffset(max(low, 0), max(high, 0), last)
        if not held:
            return request.response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        return request.response(ResponseCode.SUCCESS, body=encode_topic_stats_table(TopicStatsTable(table)))

    # -- GET_CONSUME_STATS 208 ---------------------------------------------------------------------
    def consume_stats(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        group = required(fields, "consumerGroup")
        topic = fields.get("topic") or ""
        listed = [t for t in (fields.get("topicList") or "").split(";") if t]
        subscribed = subscribed_topics(self._context, group)
        table: dict[MessageQueue, OffsetWrapper] = {}
        for core in group_cores(self._context, self._context.broker_name(channel, fields)):
            committed: dict[str, dict[int, int]] = {}
            if validate_group_name(group) is None:
                for name, queue_id, offset in core.store.group_offsets(group):
                    committed.setdefault(name, {})[queue_id] = offset
            if listed:
                names = listed
            else:
                names = [topic] if topic else sorted(committed)
                if subscribed:
                    names = [n for n in names if n in subscribed]
            for name in names:
                info = core.store.get_topic(name) if validate_topic_name(name) is None else None
                if info is None:
                    continue
                for queue_id in range(info.read_queue_nums):
                    _, high = core.store.queue_offsets(name, queue_id)
                    consumed = max(committed.get(name, {}).get(queue_id, 0), 0)
                    last = store_time_at(core.store, name, queue_id, consumed - 1)
                    table[MessageQueue(name, core.name, queue_id)] = OffsetWrapper(
                        max(high, 0), consumed, consumed, last
                    )
        return request.response(ResponseCode.SUCCESS, body=encode_consume_stats(ConsumeStats(table)))

    # -- QUERY_TOPIC_CONSUME_BY_WHO 300 ------------------------------------------------------------
    def consumed_by(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        topic = required(request.ext_fields, "topic")
        context = self._context
        groups = {c.group for c in context.clients.all_consumers() if topic in c.subscriptions}
        groups |= {
            s.group
            for s in context.core.telemetry.registry.sessions()
            if s.is_consumer and s.group and any(t == topic for t, _ in s.subscriptions)
        }
        groups |= self._groups_with_offsets().get(topic, set())
        return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb({"groupList": sorted(groups)}))

    def _groups_with_offsets(self) -> dict[str, set[str]]:
        now = self._context.clock.monotonic_s()
        with self._consumed_lock:
            if self._consumed is not None and now - self._consumed[0] < CONSUMED_BY_TTL_S:
                return self._consumed[1]
        report = consumer_stats(self._context.core.broker_groups)(CONSUMER_STATS_TIMEOUT_S)
        by_topic: dict[str, set[str]] = {}
        for row in report.consumers:
            by_topic.setdefault(row.topic, set()).add(row.group)
        with self._consumed_lock:
            self._consumed = (now, by_topic)
        return by_topic

    # -- INVOKE_BROKER_TO_RESET_OFFSET 222 ---------------------------------------------------------
    def reset_offset(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        fields = request.ext_fields
        topic = required(fields, "topic")
        group = required(fields, "group")
        timestamp = required_int(fields, "timestamp")
        queue_id = optional_int(fields, "queueId", -1)
        scope = self._context.broker_name(channel, fields)
        position = ResetPosition.LATEST if timestamp < 0 else None
        since = None if position else timestamp
        core = self._context.core
        try:
            if queue_id >= 0:
                offset = optional_int(fields, "offset", -1)
                resets = self._reset_queue(scope, group, topic, queue_id, timestamp, offset)
            elif scope:  # the group the request is for (a tool asks each broker of the route)
                name = self._context.group_core(scope).name
                resets = [
                    replace(r, broker_name=name)
                    for r in core.placement.admin(name).reset_consumer_offset(
                        group, topic, timestamp_ms=since, position=position
                    )
                ]
            else:
                resets = core.cluster_admin.reset_consumer_offset(group, topic, timestamp_ms=since, position=position)
        except FAILURES as caught:
            error = as_broker_error(caught)
            if error.code is Code.TOPIC_NOT_FOUND:
                raise RemotingError(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} does not exist") from None
            if error.code is Code.CONSUMER_GROUP_NOT_FOUND:
                raise RemotingError(
                    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} does not exist"
                ) from None
            raise
        if not resets:
            return request.response(ResponseCode.SYSTEM_ERROR, "No queues to reset.")
        for r in resets:  # the pulls' commits held here yield to the reset
            core.classic_offsets.stored(r.broker_name, group, topic, r.queue_id, r.new_offset)
        table = {MessageQueue(topic, r.broker_name, r.queue_id): r.new_offset for r in resets}
        self._tell_consumers(group, topic, timestamp, table)
        return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb({"offsetTable": table}))

    def _reset_queue(
        self, broker_name: str, group: str, topic: str, queue_id: int, timestamp: int, offset: int
    ) -> list[QueueReset]:
        core = self._context.group_core(broker_name)
        store = core.store
        if validate_topic_name(topic) is not None or store.get_topic(topic) is None:
            raise RemotingError(ResponseCode.TOPIC_NOT_EXIST, f"Topic {topic} does not exist")
        if validate_group_name(group) is not None or store.get_group(group) is None:
            raise RemotingError(ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, f"Group {group} does not exist")
        low, high = store.queue_offsets(topic, queue_id)
        if offset != -1:
            if offset < low or offset > high + 1:
                raise RemotingError(
                    ResponseCode.SYSTEM_ERROR, f"Target offset {offset} not in consume queue range [{low}-{high}]"
                )
        else:
            offset = high if timestamp < 0 else store.offset_by_timestamp(topic, queue_id, timestamp)
        old = store.query_consumer_offset(group, topic, queue_id)
        store.commit_consumer_offset(group, topic, queue_id, offset)
        log.info("reset group %s on %s/%s queue %d to %d", group, topic, core.name, queue_id, offset)
        return [QueueReset(queue_id, old, offset, core.name)]

    def _tell_consumers(self, group: str, topic: str, timestamp: int, table: dict[MessageQueue, int]) -> None:
        header = {"topic": topic, "group": group, "timestamp": str(timestamp), "isForce": "true"}
        body = fastjson_dumpb({"offsetTable": table})
        body_for_c = fastjson_dumpb(
            {"offsetTable": [{**mq.fastjson_fields(), "offset": offset} for mq, offset in sorted(table.items())]}
        )
        for consumer in self._context.clients.consumers(group):
            target = consumer.channel
            if isinstance(target, Channel) and not target.closed:
                command = RemotingCommand(
                    RESET_CONSUMER_CLIENT_OFFSET,
                    ext_fields=dict(header),
                    body=body_for_c if consumer.language == "CPP" else body,
                )
                target.oneway(command)


# -- shared by the operator handlers -----------------------------------------------------------


def group_cores(context: RemotingContext, broker_name: str = "") -> list[BrokerGroupCore]:
    """The group a request is for (``broker_name``: its ``bname`` or its port's group), else every
    broker group of the cluster this door serves, the home group first."""
    if broker_name:
        return [context.group_core(broker_name)]
    groups = context.core.broker_groups
    cores = {groups.home.name: groups.home}
    for name in context.core.placement.cluster_broker_groups():
        cores.setdefault(name, groups.attach(name))
    for core in groups.cores():
        cores.setdefault(core.name, core)
    return list(cores.values())


def topic_cores(context: RemotingContext, topic: str, broker_name: str = "") -> list[BrokerGroupCore]:
    """The group a request is for, else the broker groups of ``topic``'s route (the home group for
    a topic no route names, a system topic included)."""
    if broker_name:
        return [context.group_core(broker_name)]
    groups = context.core.broker_groups
    try:
        route = groups.route(topic, create=False)
    except FAILURES:
        return [groups.home]
    return [groups.attach(queue_data.broker_name) for queue_data in route.queue_datas] or [groups.home]


def subscribed_topics(context: RemotingContext, group: str) -> set[str]:
    """The topics the group's live consumers subscribe, on either door."""
    topics = {topic for c in context.clients.consumers(group) for topic in c.subscriptions}
    for session in context.core.telemetry.registry.sessions():
        if session.is_consumer and session.group == group:
            topics |= {topic for topic, _ in session.subscriptions}
    return topics


def store_time_at(store: StoreClient, topic: str, queue_id: int, offset: int) -> int:
    """The store time of the message at a queue offset; 0 when there is none."""
    if offset < 0:
        return 0
    got = store.get_messages(topic, queue_id, offset, 1, 0, [])
    return got.messages[0].store_timestamp_ms if got.messages else 0


def raw_record(store: StoreClient, message: StoredMessage) -> bytes:
    """The record as the commit log holds it (read back by its queue offset), else re-encoded
    from its fields (a record no queue reaches any more)."""
    try:
        got = store.get_raw_messages(message.topic, message.queue_id, message.queue_offset, 1)
    except FAILURES:
        got = None
    for raw in got.messages if got is not None else ():
        if len(raw) >= PHY_OFFSET_POS + 8 and _LONG.unpack_from(raw, PHY_OFFSET_POS)[0] == message.phy_offset:
            return bytes(raw)
    return encode_record(
        MessageRecord(
            topic=message.topic,
            queue_id=message.queue_id,
            body=message.body,
            properties=dict(message.properties),
            flag=message.flag,
            sys_flag=message.sys_flag,
            born_timestamp_ms=message.born_timestamp_ms,
            born_host=record_host(message.born_host),
            store_timestamp_ms=message.store_timestamp_ms,
            store_host=record_host(message.store_host),
            reconsume_times=message.reconsume_times,
            prepared_transaction_offset=message.prepared_transaction_offset,
            queue_offset=message.queue_offset,
            phy_offset=message.phy_offset,
        )
    )
