"""One broker group as the broker serves it: the core objects that talk to that group's store.

A broker serves every broker group of the cluster (issue 17). Each group gets its own
``BrokerGroupCore``: its store client (following the group's master), topic cache, send queue
(``PutCoalescer``), producer, transaction service, consumer and offset services, arrival hub
with its ``WatchArrivals`` thread, and receipt renewer. The objects inside are the single-group
broker's, built with ``broker_name`` = the group's name (so recall handles and pull checks name
the group); ``broker_groups.py`` and ``broker_group_router.py`` choose the core a request goes to. What all
groups share: the client registry (Telemetry sessions), the clock and the metrics.

``assembly.build_broker_group_core`` builds one and starts nothing; ``start`` / ``stop_threads`` run the
group's threads (the send queue's dispatcher runs from construction).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from services.broker.classic_producer import ClassicProducer
from services.broker.config import BrokerConfig
from services.broker.consumer import ArrivalHub, ConsumerService
from services.broker.lite_subscriptions import LiteSubscriptions
from services.broker.producer import Producer
from services.broker.pull import OffsetService
from services.broker.put_coalescer import PutSink
from services.broker.renewal import ReceiptRenewer
from services.broker.topics import TopicRegistry
from services.broker.transaction import HalfMessageTable, TransactionService
from services.store.client.client import StoreClient


@dataclass
class BrokerGroupCore:
    name: str  # the broker group (brokerName)
    store: StoreClient
    config: BrokerConfig  # the broker's, with broker_name = name
    topics: TopicRegistry
    sink: PutSink
    producer: Producer
    classic_producer: ClassicProducer  # the remoting door's sends (client-chosen queue and properties)
    transactions: TransactionService
    halves: HalfMessageTable
    consumer: ConsumerService
    offsets: OffsetService
    hub: ArrivalHub
    renewer: ReceiptRenewer | None  # None: auto_renew_enable is off
    watch_start: Callable[[], None] = lambda: None
    watch_stop: Callable[[], None] = lambda: None
    started: bool = False

    @property
    def up(self) -> bool:
        """The group has a master to write to, as far as its client knows (a group failing over
        or with no master is down: sends go to other groups' queues meanwhile)."""
        return not self.store.failing_over

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        self.watch_start()
        if self.renewer is not None:
            self.renewer.start()

    def close_services(self) -> None:
        """Release parked receives and pulls (they answer MESSAGE_NOT_FOUND)."""
        self.consumer.close()
        self.offsets.close()

    def stop_threads(self) -> None:
        """Stop the arrival watch and the renewer (the send queue drains later: ``sink.close``)."""
        self.watch_stop()
        if self.renewer is not None:
            self.renewer.stop()


def arrival_watch(
    store: StoreClient, hub: ArrivalHub, name: str = "", lite: LiteSubscriptions | None = None
) -> tuple[Callable[[], None], Callable[[], None]]:
    """(start, stop) of the thread that follows the store's WatchArrivals stream into ``hub``
    (one stream per group; parked ReceiveMessage calls wait on their group's hub) and into the
    lite subscriptions (lite topics' arrivals wake their lite consumers)."""
    stopped = threading.Event()
    on_arrivals: Callable[[list[str]], None] = hub.notify
    on_restart: Callable[[], None] = hub.notify_all
    if lite is not None:
        subscriptions = lite

        def lite_arrivals(topics: list[str]) -> None:
            hub.notify(topics)
            subscriptions.on_arrivals(name, topics)

        def lite_restart() -> None:
            hub.notify_all()
            subscriptions.on_restart(name)

        on_arrivals, on_restart = lite_arrivals, lite_restart

    thread = threading.Thread(
        target=store.watch_arrivals,
        args=((), on_arrivals, on_restart, stopped),
        name=f"arrival-watch-{name}" if name else "arrival-watch",
        daemon=True,
    )

    def stop() -> None:
        stopped.set()
        store.stop_watching()
        hub.notify_all()
        if thread.is_alive():
            thread.join(2.0)

    return thread.start, stop
