"""Creating the topics a test uses, as an operator does before any client sends (the broker's
``auto_create_topic_enable`` is off by default, like RocketMQ 5's proxy):

* ``create_topics(store, *names)``: through a store client (``StoreDouble``, ``GrpcStoreClient``,
  ``LocalStoreClient``), for the broker's core tests and anything that has the store;
* ``create_topics_at(endpoint, *names)``: through the broker's ``Admin.CreateTopic`` at
  ``host:port`` (``pyrmq topic create``), for brokers in this process or started as processes.

Topics are MIXED with 8 queues unless told otherwise: any message type may be sent to them, as to
a topic the broker auto-creates (``auto_create_topic_message_type``, ``auto_create_topic_queue_nums``).
"""

from __future__ import annotations

from typing import Protocol

import grpc
from pyrmq.admin.v1 import admin_pb2 as admin_pb
from pyrmq.admin.v1 import admin_pb2_grpc as admin_grpc

from services.broker.topics import PERM_READ_WRITE
from services.store.client.model import TopicInfo

MIXED = "MIXED"
QUEUE_NUMS = 8


class TopicStore(Protocol):
    def create_topic(self, topic: TopicInfo) -> TopicInfo: ...


def create_topics(store: TopicStore, *names: str, message_type: str = MIXED, queue_nums: int = QUEUE_NUMS) -> None:
    """Create (or update) each topic in the store."""
    for name in names:
        store.create_topic(TopicInfo(name, queue_nums, queue_nums, PERM_READ_WRITE, message_type))


def create_topics_at(
    endpoint: str, *names: str, message_type: str = MIXED, queue_nums: int = QUEUE_NUMS, timeout_s: float = 10.0
) -> None:
    """Create (or update) each topic through the broker's admin service at ``endpoint``."""
    with grpc.insecure_channel(endpoint) as channel:
        stub = admin_grpc.AdminStub(channel)
        for name in names:
            stub.CreateTopic(
                admin_pb.CreateTopicRequest(
                    name=name, message_type=admin_pb.MessageType.Value(message_type), queue_nums=queue_nums
                ),
                timeout=timeout_s,
            )
