"""QueryRoute: the queues of a topic over its broker groups, and where to send to them.

One ``Broker`` per broker group of the topic (services/broker/broker_groups.py: the route from etcd,
or the home group's topic config alone), id 0 (the master, which is all the Py client keeps),
whose endpoints are this broker's advertised address. Queue ids are the store's, from 0 in each
group: queue ``i`` is readable if ``i < read_queue_nums`` and the group's permission has READ,
writable likewise, so queue 0 exists with both permissions for an ordinary topic (Node uses only
queue 0: docs/v2-clients.md, pitfall 6; the server picks the real write queue anyway). A group
that is down keeps its queues, with permission NONE. ``accept_message_types`` follows the
topic's ``message.type``, as the proxy's: MIXED accepts NORMAL, FIFO, DELAY and TRANSACTION (a
client refuses to send a type the route does not accept).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.broker.errors import Code, RequestError
from services.domain.delivery import MessageType
from services.domain.routes import QueueData, TopicRoute
from services.domain.topic_types import ACCEPT_MESSAGE_TYPES

MASTER_BROKER_ID = 0


@dataclass(frozen=True, slots=True)
class RouteQueue:
    queue_id: int
    permission: str  # v2 Permission name: NONE, READ, WRITE, READ_WRITE
    broker_name: str = ""  # the broker group holding the queue; "": the route's broker_name


@dataclass(frozen=True, slots=True)
class Route:
    topic: str
    broker_name: str
    broker_id: int
    endpoint_scheme: str  # v2 AddressScheme name: IPv4, IPv6, DOMAIN_NAME
    endpoint_host: str
    endpoint_port: int
    queues: tuple[RouteQueue, ...]
    accept_message_types: tuple[MessageType, ...]


def queue_permission(queue_id: int, queue_data: QueueData, up: bool = True) -> str:
    if not up:
        return "NONE"
    readable = queue_data.readable and queue_id < queue_data.read_queue_nums
    writable = queue_data.writable and queue_id < queue_data.write_queue_nums
    return {(True, True): "READ_WRITE", (True, False): "READ", (False, True): "WRITE"}.get((readable, writable), "NONE")


def accepted_types(route: TopicRoute) -> tuple[MessageType, ...]:
    types = ACCEPT_MESSAGE_TYPES.get(route.message_type)
    if types is None:
        raise RequestError(f"topic {route.topic} has unknown message type {route.message_type}", Code.BAD_REQUEST)
    return types
