"""The name server's codes on the remoting port (RocketMQ 5's proxy model: one port that is name
server and broker at once, and names itself in every route; ../shared/docs/remoting.md §2.6, §4).

| code | answer |
|---|---|
| GET_ROUTEINFO_BY_TOPIC 105 | TopicRouteData: one BrokerData per broker group, each at this door's address (brokerId 0), one QueueData per group (a group that is down: its perm without WRITE, so clients send elsewhere until it is back); TOPIC_NOT_EXIST (17) "No topic route info in name server for the topic: X" |
| GET_BROKER_CLUSTER_INFO 106 | ClusterInfo: every broker group of this broker's cluster at this address |
| GET_ALL_TOPIC_LIST_FROM_NAMESERVER 206, GET_TOPICS_BY_CLUSTER 224, GET_SYSTEM_TOPIC_LIST_FROM_NS 304 | TopicList `{"topicList":[...]}` |
| GET_KV_CONFIG 101 | QUERY_NOT_FOUND (22): no KV config is kept (ORDER_TOPIC_CONFIG included) |
| GET_KVLIST_BY_NAMESPACE 219 | QUERY_NOT_FOUND (22) |

Route JSON as RocketMQ's name server writes it (services/domain/remoting/bodies.py): compact
standard JSON with quoted map keys for clients from 4.9.4 (version >= 401) or asking
``acceptStandardJsonOnly``, fastjson's native ``{0:"addr"}`` for older ones (ali-ons says 121,
the C++ client 63; both read it, as fastjson, jsoncpp with numeric keys and the Go client's
splitting do: remoting.md §2.6). Cluster info has quoted keys for everyone.

A route query for ``%RETRY%<group>`` creates the group and that retry topic if this broker has
not met the group yet: consumers ask for it before their first heartbeat, then poll routes only
every 30 s, so a group's first retries would otherwise wait that long.

``TBW102`` (the producer's default topic) has a route when auto-create is on: a Java producer
asks for it when its topic has none, then sends with ``defaultTopic=TBW102``, and the send
creates the topic. Retry topics ``%RETRY%<group>`` have a route once the group heartbeats here.
"""

from __future__ import annotations

from services.broker.errors import Code
from services.broker.remoting.context import RemotingContext
from services.broker.remoting.dispatch import Dispatcher, RemotingError, required
from services.broker.remoting.server import Channel
from services.domain.names import AUTO_CREATE_TOPIC, RETRY_TOPIC_PREFIX, validate_group_name
from services.domain.remoting.bodies import (
    BrokerData,
    ClusterInfo,
    QueueData,
    TopicRouteData,
    encode_cluster_info,
    encode_topic_route,
    route_json_is_standard,
)
from services.domain.remoting.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from services.domain.remoting.command import RemotingCommand
from services.domain.remoting.fastjson_codec import fastjson_dumpb
from services.domain.routes import QueueData as RouteQueueData
from services.domain.routes import TopicRoute

MASTER_ID = "0"
NOT_FOUND_REMARK = (
    "No topic route info in name server for the topic: {topic}, create it first (pyrmq topic create {topic})"
)
AUTO_CREATE_QUEUES = 8


class NameServer:
    def __init__(self, context: RemotingContext) -> None:
        self._context = context

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.route_info)
        dispatcher.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.cluster_info)
        for code in (
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
            RequestCode.GET_TOPICS_BY_CLUSTER,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        ):
            dispatcher.register(code, self.topic_list)
        dispatcher.register(RequestCode.GET_KV_CONFIG, self.no_kv_config, inline=True)
        dispatcher.register(RequestCode.GET_KVLIST_BY_NAMESPACE, self.no_kv_config, inline=True)

    # -- 105 -----------------------------------------------------------------------------------
    def route_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        topic = required(request.ext_fields, "topic")
        route = self.route(topic)
        standard = route_json_is_standard(request.version, request.ext_fields.get("acceptStandardJsonOnly"))
        return request.response(
            ResponseCode.SUCCESS, body=encode_topic_route(self.route_data(route), standard=standard)
        )

    def route(self, topic: str) -> TopicRoute:
        """The topic's route over broker groups; TOPIC_NOT_EXIST in RocketMQ's words."""
        context = self._context
        broker_groups = context.core.broker_groups
        if topic == AUTO_CREATE_TOPIC:
            home = broker_groups.home
            if not home.topics.auto_create_enabled:
                raise RemotingError(ResponseCode.TOPIC_NOT_EXIST, NOT_FOUND_REMARK.format(topic=topic))
            return TopicRoute(
                topic,
                "NORMAL",
                (RouteQueueData(home.name, AUTO_CREATE_QUEUES, AUTO_CREATE_QUEUES, PERM_READ | PERM_WRITE),),
            )
        if (
            topic.startswith(RETRY_TOPIC_PREFIX)
            and validate_group_name(group := topic[len(RETRY_TOPIC_PREFIX) :]) is None
        ):
            context.ensure_group(group)
        try:
            return broker_groups.route(topic)
        except Exception as exc:
            code = getattr(exc, "code", None)
            if code in (Code.TOPIC_NOT_FOUND, Code.ILLEGAL_TOPIC):
                raise RemotingError(ResponseCode.TOPIC_NOT_EXIST, NOT_FOUND_REMARK.format(topic=topic)) from None
            raise

    def route_data(self, route: TopicRoute) -> TopicRouteData:
        cluster = self._context.config.cluster_name
        broker_groups = self._context.core.broker_groups

        def perm(queue_data: RouteQueueData) -> int:
            """A group that is down is not offered for sends (clients send to writable queues
            only); its queues stay readable, so consumers keep their assignment."""
            up = broker_groups.up(queue_data.broker_name)
            return queue_data.perm if up else queue_data.perm & ~PERM_WRITE

        return TopicRouteData(
            tuple(
                BrokerData(cluster, qd.broker_name, {0: self._context.group_address(qd.broker_name)})
                for qd in route.queue_datas
            ),
            tuple(
                QueueData(qd.broker_name, qd.read_queue_nums, qd.write_queue_nums, perm(qd), qd.topic_sys_flag)
                for qd in route.queue_datas
            ),
        )

    # -- 106 -----------------------------------------------------------------------------------
    def cluster_info(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        cluster = self._context.config.cluster_name
        names = self.broker_names()
        info = ClusterInfo(
            {name: BrokerData(cluster, name, {0: self._context.group_address(name)}) for name in names},
            {cluster: names},
        )
        return request.response(ResponseCode.SUCCESS, body=encode_cluster_info(info))

    def broker_names(self) -> list[str]:
        core = self._context.core
        names = [core.broker_groups.home.name]
        for name in core.placement.cluster_broker_groups():
            if name not in names:
                names.append(name)
        return names

    # -- 206 / 224 / 304 -------------------------------------------------------------------------
    def topic_list(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        system = request.code == RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS
        topics = self._context.core.admin.list_topics(include_system=system)
        names = sorted({t.name for t in topics})
        return request.response(ResponseCode.SUCCESS, body=fastjson_dumpb({"topicList": names}))

    def no_kv_config(self, channel: Channel, request: RemotingCommand) -> RemotingCommand:
        namespace = request.ext_fields.get("namespace", "")
        key = request.ext_fields.get("key", "")
        return request.response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {namespace} Key: {key}")
