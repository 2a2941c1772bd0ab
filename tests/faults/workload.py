"""A v2 workload through the broker (services/v2client/client.py), recording into a History.

* Producers: ``producers`` threads send NORMAL messages (or DELAY ones with ``delay_s``), and
  ``fifo_producers`` threads send FIFO messages, each over its own ``groups_per_fifo_producer``
  message groups (one writer per group, one send at a time: the group's send order is the
  writer's counter order). One message per SendMessage; every outcome is classified
  (checker.classify_code / classify_rpc_error).
* Consumers: ``consumers`` threads per (topic, group) receive, record each delivery, and ack
  (``skip_ack_ratio`` of deliveries are deliberately never acked, so they must be redelivered
  after their invisible time).

Every random choice comes from ``random.Random(f"{seed}/<thread>")``: a run is repeated by its
seed (timing aside). ``Workload.drain()`` keeps consuming until every acked and every delivered
message is consumer-acked. ``Workload.stop()`` closes the consumers' channels, so a consumer
parked in a long poll (5 s) stops at once rather than at the end of it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import grpc
from apache.rocketmq.v2 import definition_pb2 as d

from services.v2client.client import BrokerCallError, V2Client, build_message, now_ms
from tests.faults.checker import FAIL, OK, Delivery, History, classify_code, classify_rpc_error, make_body
from tests.support.waits import wait_until

log = logging.getLogger(__name__)


@dataclass
class WorkloadConfig:
    topic: str = "FaultsNormal"
    group: str = "FaultsGroup"
    fifo_topic: str = "FaultsFifo"
    fifo_group: str = "FaultsFifoGroup"
    producers: int = 3
    fifo_producers: int = 0
    groups_per_fifo_producer: int = 2
    consumers: int = 2  # per topic
    send_timeout_s: float = 5.0  # the client's gRPC deadline of one SendMessage
    send_pause_s: tuple[float, float] = (0.0, 0.02)
    delay_s: tuple[float, float] | None = None  # DELAY messages, delivered this far ahead
    invisible_s: float = 10.0
    receive_wait_s: float = 5.0  # long polling (the broker's minimum is 5 s)
    skip_ack_ratio: float = 0.0
    body_size: tuple[int, int] = (64, 512)


@dataclass
class Workload:
    endpoint: str
    history: History
    config: WorkloadConfig = field(default_factory=WorkloadConfig)
    _stop_sending: threading.Event = field(default_factory=threading.Event)
    _stop_consuming: threading.Event = field(default_factory=threading.Event)
    _producers: list[threading.Thread] = field(default_factory=list)
    _consumers: list[threading.Thread] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # unexpected exceptions in threads
    skipped_acks: set[str] = field(default_factory=set)  # message ids deliberately left unacked
    _consumer_clients: dict[str, V2Client] = field(default_factory=dict)  # closed by stop()
    _consumer_clients_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def seed(self) -> int:
        return self.history.seed

    def start(self) -> Workload:
        c = self.config
        for i in range(c.producers):
            self._producers.append(self._thread(self._produce, f"p{i}", c.topic, None))
        for i in range(c.fifo_producers):
            groups = [f"p{i}f-g{g}" for g in range(c.groups_per_fifo_producer)]
            self._producers.append(self._thread(self._produce, f"p{i}f", c.fifo_topic, groups))
        for i in range(c.consumers):
            if c.producers:
                self._consumers.append(self._thread(self._consume, f"c{i}", c.topic, c.group))
            if c.fifo_producers:
                self._consumers.append(self._thread(self._consume, f"c{i}f", c.fifo_topic, c.fifo_group))
        return self

    def _thread(self, target, name: str, *args) -> threading.Thread:
        def run() -> None:
            try:
                target(name, *args)
            except Exception as exc:  # reported by the test
                log.exception("%s died", name)
                self.errors.append(f"{name}: {exc!r}")

        thread = threading.Thread(target=run, name=f"workload-{name}", daemon=True)
        thread.start()
        return thread

    # -- producers
    def _produce(self, writer: str, topic: str, groups: list[str] | None) -> None:
        c = self.config
        rng = random.Random(f"{self.seed}/{writer}")
        counter = 0
        with V2Client(self.endpoint, timeout_s=c.send_timeout_s, client_id=f"faults@{writer}") as client:
            while not self._stop_sending.is_set():
                key = f"{writer}-{counter}"
                body = make_body(key, self.seed, *c.body_size)
                group = rng.choice(groups) if groups else None
                deliver_at = now_ms() + round(rng.uniform(*c.delay_s) * 1000) if c.delay_s else None
                send = self.history.invoke(writer, counter, topic, body, group, deliver_at)
                counter += 1
                message = build_message(topic, body, keys=[key], message_group=group, delivery_timestamp_ms=deliver_at)
                try:
                    [entry] = client.send([message])
                    self.history.complete(send, OK, message_id=entry.message_id)
                except BrokerCallError as exc:
                    self.history.complete(
                        send,
                        classify_code(exc.code),
                        d.Code.Name(exc.code) if exc.code in d.Code.values() else str(exc.code),
                    )
                except grpc.RpcError as exc:
                    self.history.complete(send, classify_rpc_error(exc), f"rpc {exc.code().name}")  # type: ignore[union-attr]
                    time.sleep(0.05)  # the broker is down: do not spin
                if send.outcome != OK:
                    time.sleep(0.2)  # the store or broker is down: do not hog the CPUs it restarts on
                time.sleep(rng.uniform(*c.send_pause_s))  # the workload's send rate

    # -- consumers
    def _consume(self, name: str, topic: str, group: str) -> None:
        c = self.config
        rng = random.Random(f"{self.seed}/{name}")
        client: V2Client | None = None
        try:
            while not self._stop_consuming.is_set():
                if client is None:
                    client = self._consumer_client(name)
                    if client is None:
                        break  # stopped
                try:
                    messages = client.receive(
                        group, topic, invisible_s=c.invisible_s, wait_s=c.receive_wait_s, batch_size=16
                    )
                except ValueError:  # "Cannot invoke RPC on closed channel": stop() closed it
                    if not self._stop_consuming.is_set():
                        raise
                    break
                except (BrokerCallError, grpc.RpcError):  # CANCELLED too, when stop() closed it
                    client.close()
                    client = None
                    time.sleep(0.1)  # the broker is down: do not spin
                    continue
                to_ack = []
                for m in messages:
                    sp = m.system_properties
                    self.history.deliver(
                        Delivery(
                            sp.message_id,
                            m.topic.name,
                            sp.queue_id,
                            sp.queue_offset if sp.HasField("queue_offset") else -1,
                            m.body,
                            sp.message_group if sp.HasField("message_group") else None,
                            sp.delivery_attempt if sp.HasField("delivery_attempt") else 1,
                        )
                    )
                    if c.skip_ack_ratio and sp.delivery_attempt <= 1 and rng.random() < c.skip_ack_ratio:
                        self.skipped_acks.add(sp.message_id)
                    else:
                        to_ack.append(m)
                # One request per message, all at once (as the official clients ack: asynchronously,
                # each on its own): a failed ack leaves only that one unacked, and the acks of a
                # batch share the store's journal writes instead of waiting for each other's.
                if not self._ack_all(client, group, topic, to_ack):
                    break
        finally:
            if client is not None:
                client.close()

    def _ack_all(self, client: V2Client, group: str, topic: str, messages: list[d.Message]) -> bool:
        """Ack each message in a request of its own, concurrently; False once stop() closed the client."""
        if not messages:
            return True
        with ThreadPoolExecutor(max_workers=len(messages)) as pool:
            outcomes = list(pool.map(lambda m: self._ack_one(client, group, topic, m), messages))
        return all(outcomes)

    def _ack_one(self, client: V2Client, group: str, topic: str, m: d.Message) -> bool:
        message_id = m.system_properties.message_id
        try:
            client.ack(group, topic, [m])
            self.history.consumer_acked([message_id])
        except BrokerCallError as exc:
            # A 4xx, or a 5xx the broker gives only for refusals, is definitely not acked
            # (redelivered after its invisible time); INTERNAL_SERVER_ERROR and PROXY_TIMEOUT (a
            # store call that broke, e.g. its master was killed after the ack's journal record
            # reached the replicas) may have taken effect, as for sends (checker.classify_code).
            if classify_code(exc.code) != FAIL:
                self.history.consumer_ack_unknown([message_id])
        except grpc.RpcError:  # maybe acked
            self.history.consumer_ack_unknown([message_id])
        except ValueError:  # closed by stop(): not acked
            if not self._stop_consuming.is_set():
                raise
            return False
        return True

    def _consumer_client(self, name: str) -> V2Client | None:
        """A new client for consumer ``name``, known to ``stop()``; None once stopping."""
        with self._consumer_clients_lock:
            if self._stop_consuming.is_set():
                return None
            client = V2Client(self.endpoint, timeout_s=5.0, client_id=f"faults@{name}")
            self._consumer_clients[name] = client
            return client

    # -- control
    def stop_sending(self, timeout_s: float | None = None) -> None:
        self._stop_sending.set()
        for t in self._producers:
            t.join(timeout_s if timeout_s is not None else self.config.send_timeout_s + 10)
        assert not any(t.is_alive() for t in self._producers), "a producer is stuck"

    def drain(self, timeout_s: float) -> bool:
        """Consume until every acked send is delivered and every delivered message acked."""

        def drained() -> bool:
            report = self.history.check()  # a whole check: at most every 0.2 s
            return not report.lost and not report.unconsumed

        try:
            wait_until(drained, timeout_s, "drained", pause_max_s=0.2)
        except AssertionError:
            return False
        return True

    def stop(self) -> None:
        self._stop_sending.set()
        with self._consumer_clients_lock:
            self._stop_consuming.set()
            clients = list(self._consumer_clients.values())
        for client in clients:  # cancels a parked long poll (the consumer then ends)
            client.close()
        for t in self._producers + self._consumers:
            t.join(self.config.receive_wait_s + 15)

    def repro(self, test: str) -> str:
        return f"repro: PYRMQ_FAULTS_SEED={self.seed} .venv/bin/python -m pytest -q '{test}'"


def seed_from_env() -> int:
    """PYRMQ_FAULTS_SEED if set (a repro), else a fresh random seed."""
    import os

    value = os.environ.get("PYRMQ_FAULTS_SEED")
    return int(value) if value else int.from_bytes(os.urandom(4), "big")
