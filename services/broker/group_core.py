"""One broker group as the broker serves it: the core objects that talk to that group's store.

A broker serves every broker group of the cluster (issue 17). Each group gets its own
``GroupCore``: its store client (following the group's master), topic cache, send queue
(``PutCoalescer``), producer, transaction service, consumer and offset services, arrival hub
with its ``WatchArrivals`` thread, and receipt renewer. The objects inside are the single-group
broker's, built with ``broker_name`` = the group's name (so recall handles and pull checks name
the group); ``groups.py`` and ``group_router.py`` choose the core a request goes to. What all
groups share: the client registry (Telemetry sessions), the clock and the metrics.

``build_group_core`` starts nothing; ``start`` / ``stop`` run the group's threads (the send
queue's dispatcher runs from construction, as before).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from services.broker.config import BrokerConfig
from services.broker.consumer import ArrivalHub, ConsumerLimits, ConsumerService
from services.broker.lite_subscriptions import LiteSubscriptions
from services.broker.metrics import BrokerMetrics
from services.broker.producer import Producer
from services.broker.pull import OffsetService
from services.broker.put_coalescer import BrokerStore, DirectPutSink, PutCoalescer, PutSink
from services.broker.renewal import ReceiptHandleTable, ReceiptRenewer
from services.broker.telemetry import ClientRegistry
from services.broker.topics import TopicRegistry
from services.broker.transaction import HalfMessageTable, HalfRef, TransactionService
from services.runtime.clock import Clock, SystemClock
from services.store.client.client import StoreClient
from services.store.client.model import PutOutcome


@dataclass
class GroupCore:
    name: str  # the broker group (brokerName)
    store: StoreClient
    config: BrokerConfig  # the broker's, with broker_name = name
    topics: TopicRegistry
    sink: PutSink
    producer: Producer
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


def build_sink(config: BrokerConfig, store: BrokerStore, clock: Clock | None = None) -> PutSink:
    if not config.put_coalescing_enable:
        return DirectPutSink(store.put_messages)
    coalescer = PutCoalescer(
        store.put_messages,
        batch_messages_max=config.put_batch_messages_max,
        batch_bytes_max=config.put_batch_bytes_max,
        queue_messages_max=config.put_queue_messages_max,
        queue_bytes_max=config.put_queue_bytes_max,
        queue_wait_max_ms=config.put_queue_wait_max_ms,
        monotonic_s=(clock or SystemClock()).monotonic_s,
        store_failing_over=lambda: store.failing_over,
        store_failovers=lambda: store.failovers,
    )
    coalescer.start()
    return coalescer


def consumer_limits(config: BrokerConfig) -> ConsumerLimits:
    return ConsumerLimits(
        invisible_ms_min=config.invisible_duration_ms_min,
        invisible_ms_max=config.invisible_duration_ms_max,
        polling_ms_min=config.long_polling_timeout_ms_min,
        polling_ms_max=config.long_polling_timeout_ms_max,
        batch_max=config.consumer_receive_batch_size,
        auto_renew_invisible_ms=config.auto_renew_invisible_ms,
    )


def build_group_core(
    config: BrokerConfig,
    name: str,
    store: StoreClient,
    endpoint: tuple[str, int],
    registry: ClientRegistry,
    clock: Clock,
    metrics: BrokerMetrics | None = None,
    lite: LiteSubscriptions | None = None,
) -> GroupCore:
    config = replace(config, broker_name=name) if config.broker_name != name else config
    topics = TopicRegistry(config, store, clock)
    sink = build_sink(config, store, clock)
    renewer = (
        ReceiptRenewer(store, ReceiptHandleTable(config.renew_handles_max), registry, config, clock)
        if config.auto_renew_enable
        else None
    )
    halves = HalfMessageTable()
    hub = ArrivalHub()
    watch_start, watch_stop = arrival_watch(store, hub, name, lite)

    def on_half_stored(transaction_id: str, topic: str, outcome: PutOutcome) -> None:
        halves.remember(transaction_id, HalfRef(topic, outcome.phy_offset, outcome.queue_offset))

    return GroupCore(
        name=name,
        store=store,
        config=config,
        topics=topics,
        sink=sink,
        producer=Producer(config, topics, sink, clock, on_half_stored),
        transactions=TransactionService(
            store, sink, halves, clock, observer=metrics.transactions if metrics is not None else None
        ),
        halves=halves,
        consumer=ConsumerService(store, topics, hub, clock, name, endpoint, consumer_limits(config), renewer),
        offsets=OffsetService(store, topics, hub, clock, name),
        hub=hub,
        renewer=renewer,
        watch_start=watch_start,
        watch_stop=watch_stop,
    )


def arrival_watch(
    store: StoreClient, hub: ArrivalHub, name: str = "", lite: LiteSubscriptions | None = None
) -> tuple[Callable[[], None], Callable[[], None]]:
    """(start, stop) of the thread that follows the store's WatchArrivals stream into ``hub``
    (one stream per group; parked ReceiveMessage calls wait on their group's hub) and into the
    lite subscriptions (lite topics' arrivals wake their lite consumers)."""
    stopped = threading.Event()
    on_arrivals, on_restart = hub.notify, hub.notify_all
    if lite is not None:

        def on_arrivals(topics: list[str]) -> None:
            hub.notify(topics)
            lite.on_arrivals(name, topics)

        def on_restart() -> None:
            hub.notify_all()
            lite.on_restart(name)

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
