"""QueryRoute: the queues of a topic and where to send to them.

One broker (``broker_name``, id 0: the master, which is all the Py client keeps) whose
endpoints are this broker's advertised address. Queue ids are the store's: queue ``i`` is
readable if ``i < read_queue_nums`` and the topic is readable, writable likewise, so queue 0
exists with both permissions for an ordinary topic (Node uses only queue 0: docs/v2-clients.md,
pitfall 6; the server picks the real write queue anyway). ``accept_message_types`` follows the
topic's ``message.type``, as the proxy's: MIXED accepts NORMAL, FIFO, DELAY and TRANSACTION (a
client refuses to send a type the route does not accept).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.broker import validation
from services.broker.config import address_scheme
from services.broker.topics import TopicRegistry
from services.domain.delivery import MessageType
from services.store.client.model import TopicInfo

ACCEPT_MESSAGE_TYPES: dict[str, tuple[MessageType, ...]] = {
    "NORMAL": (MessageType.NORMAL,),
    "FIFO": (MessageType.FIFO,),
    "DELAY": (MessageType.DELAY,),
    "TRANSACTION": (MessageType.TRANSACTION,),
    "MIXED": (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION),
}
MASTER_BROKER_ID = 0


@dataclass(frozen=True, slots=True)
class RouteQueue:
    queue_id: int
    permission: str  # v2 Permission name: NONE, READ, WRITE, READ_WRITE


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


def queue_permission(queue_id: int, topic: TopicInfo) -> str:
    readable = topic.readable and queue_id < topic.read_queue_nums
    writable = topic.writable and queue_id < topic.write_queue_nums
    return {(True, True): "READ_WRITE", (True, False): "READ", (False, True): "WRITE"}.get((readable, writable), "NONE")


class RouteService:
    def __init__(self, topics: TopicRegistry, broker_name: str, endpoint: tuple[str, int]) -> None:
        self._topics = topics
        self._broker_name = broker_name
        self._endpoint = endpoint

    def query_route(self, topic_name: str) -> Route:
        """ILLEGAL_TOPIC, TOPIC_NOT_FOUND (auto-create off) or the route."""
        validation.validate_topic(topic_name)
        topic = self._topics.get(topic_name)
        host, port = self._endpoint
        return Route(
            topic=topic.name,
            broker_name=self._broker_name,
            broker_id=MASTER_BROKER_ID,
            endpoint_scheme=address_scheme(host),
            endpoint_host=host,
            endpoint_port=port,
            queues=tuple(
                RouteQueue(i, queue_permission(i, topic))
                for i in range(max(topic.read_queue_nums, topic.write_queue_nums))
            ),
            accept_message_types=ACCEPT_MESSAGE_TYPES[topic.message_type],
        )
