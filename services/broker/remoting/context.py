"""What every remoting handler reads: the broker core, this door's advertised address, the
classic clients, and the helpers that turn core objects into RocketMQ's shapes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.broker.assembly import BrokerCore
from services.broker.broker_group_core import BrokerGroupCore
from services.broker.classic_clients import ClassicClients
from services.broker.classic_producer import ClassicProducer
from services.broker.config import BrokerConfig
from services.broker.errors import RequestError
from services.broker.remoting.server import Channel
from services.broker.transaction import HalfRef
from services.runtime.clock import Clock
from services.store.client.model import PutOutcome


def dumps(value: object) -> bytes:
    """A JSON body as RocketMQ's clients read it: compact (the Go client splits route text on
    "," and ":" and breaks on spaces), keys as given."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass
class RemotingContext:
    core: BrokerCore
    config: BrokerConfig
    clock: Clock
    address: str  # "host:port" this door advertises: routes name it as every broker's address
    clients: ClassicClients
    producers: dict[str, ClassicProducer]  # per broker group, made on first use

    group_addresses: dict[str, str] = field(default_factory=dict)  # a group's own port, if it has one

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

    def producer(self, broker_name: str = "") -> ClassicProducer:
        core = self.group_core(broker_name)
        producer = self.producers.get(core.name)
        if producer is None:
            halves = core.halves

            def on_half(transaction_id: str, topic: str, outcome: PutOutcome) -> None:
                halves.remember(transaction_id, HalfRef(topic, outcome.phy_offset, outcome.queue_offset))

            producer = ClassicProducer(core.config, core.topics, core.sink, self.clock, on_half)
            self.producers[core.name] = producer
        return producer

    def check_broker_name(self, broker_name: str) -> None:
        if broker_name and self.core.broker_groups.known(broker_name) is None:
            raise RequestError(f"broker {broker_name!r} is not served here")
