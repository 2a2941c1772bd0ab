"""What every remoting handler reads: the broker core, this door's advertised address, the
classic clients, and the helpers that turn core objects into RocketMQ's shapes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.broker.assembly import BrokerCore
from services.broker.broker_group_core import BrokerGroupCore
from services.broker.classic_clients import ClassicClients
from services.broker.config import BrokerConfig
from services.broker.errors import RequestError
from services.broker.remoting.server import Channel
from services.domain.names import retry_topic
from services.domain.remoting.message_id import encode_offset_msg_id
from services.domain.remoting.records import ipv4_host
from services.runtime.clock import Clock

log = logging.getLogger(__name__)


@dataclass
class RemotingContext:
    core: BrokerCore
    config: BrokerConfig
    clock: Clock
    address: str  # "host:port" this door advertises: routes name it as every broker's address
    clients: ClassicClients
    group_addresses: dict[str, str] = field(default_factory=dict)  # a group's own port, if it has one
    _known_groups: set[str] = field(default_factory=set)
    _groups_lock: threading.Lock = field(default_factory=threading.Lock)

    def ensure_group(self, group: str) -> None:
        """The subscription group and its retry topic ``%RETRY%<group>`` (1 queue), created the
        first time this broker meets the group (a heartbeat, or a route query for the retry
        topic: clients ask for its route before their first heartbeat and poll routes only every
        30 s), as RocketMQ's broker does with ``autoCreateSubscriptionGroup``. One at a time (the
        lock is held across the store calls: two heartbeats of a new group create it once)."""
        with self._groups_lock:
            if group in self._known_groups:
                return
            core = self.core
            if core.store.get_group(group) is None:
                core.admin.create_group(group)
                log.info("created subscription group %s for a remoting consumer", group)
            topic = retry_topic(group)
            if core.broker_groups.home.topics.find(topic) is None:
                core.admin.create_topic(topic, message_type="NORMAL", queue_nums=1)
            self._known_groups.add(group)

    def group_core(self, broker_name: str = "") -> BrokerGroupCore:
        """The broker group of that name ("": the home group)."""
        return self.core.broker_groups.core(broker_name)

    @staticmethod
    def broker_name(channel: Channel, fields: Mapping[str, str]) -> str:
        """The broker group a request is for: the ``bname`` it names (5.x clients), else the
        group whose port it came in on ("" on the main port: the home group)."""
        return fields.get("bname") or channel.broker_name

    def group_address(self, broker_name: str) -> str:
        """Where routes send a group's requests: its own port, else the main one."""
        return self.group_addresses.get(broker_name, self.address)

    def store_host(self, broker_name: str) -> tuple[bytes, int] | None:
        """The STOREHOST records of the group are handed out with (records.py): its address."""
        return ipv4_host(self.group_address(broker_name or self.core.broker_groups.home.name))

    def offset_msg_id(self, broker_name: str, phy_offset: int) -> str:
        """The offsetMsgId of a record of the group: its address + the commit-log offset."""
        host, _, port = self.group_address(broker_name or self.core.broker_groups.home.name).rpartition(":")
        return encode_offset_msg_id(host, int(port), phy_offset)

    def check_broker_name(self, broker_name: str) -> None:
        if broker_name and self.core.broker_groups.known(broker_name) is None:
            raise RequestError(f"broker {broker_name!r} is not served here")
