"""The slave's gRPC shell (a client of its master's store API, hence here): carries
``services.store.ha.ha_client.HAClient`` over the master's ``Store.Replicate`` stream,
and reconnects with a doubling backoff (100 ms up to ha_reconnect_interval_max_ms) whenever the
stream breaks: the master restarted, the network cut, or a chunk did not fit (then the next
handshake finds the right offset again).

The master sends a heartbeat chunk (no data) every ha_send_heartbeat_interval_ms when idle,
and its ``config/`` files when they changed (installed by ``on_config``, not acked); the slave
acks every chunk, heartbeats included, so the master always knows how fresh each
slave's offsets are. A stream silent for ha_housekeeping_interval_ms (a master stopped with
SIGSTOP, a link that drops packets) is cancelled by a watchdog, and the slave reconnects.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator
from typing import Protocol

import grpc
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from services.domain.epoch_cache import EpochEntry
from services.runtime.clock import Clock
from services.runtime.rpc.tls import TlsFiles, open_channel

log = logging.getLogger(__name__)

RECONNECT_INTERVAL_MIN_S = 0.1
MESSAGE_SIZE_MAX_BYTES = 64 << 20  # a chunk is ha_transfer_batch_size_bytes, or one record larger


class Progress(Protocol):
    @property
    def max_phy_offset(self) -> int: ...
    @property
    def confirmed_offset(self) -> int: ...


class ReplicaCore(Protocol):
    """What the connection drives (``HAClient``)."""

    @property
    def replica_id(self) -> int: ...
    def handshake(self) -> tuple[int, list[EpochEntry]]: ...
    def on_master_handshake(self, master_epochs: list[EpochEntry], master_min_offset: int) -> int: ...
    def on_chunk(self, phy_offset: int, data: bytes, epoch: int, epoch_start_offset: int) -> Progress: ...
    def on_config(self, name: str, content: bytes, version: int) -> None: ...
    def progress(self) -> Progress: ...


def epochs_to_pb(entries: list[EpochEntry]) -> list[pb.EpochEntry]:
    return [pb.EpochEntry(epoch=e.epoch, start_offset=e.start_offset, end_offset=e.end_offset) for e in entries]


def epochs_from_pb(entries: list[pb.EpochEntry]) -> list[EpochEntry]:
    return [EpochEntry(e.epoch, e.start_offset, e.end_offset) for e in entries]


def _ack(progress: Progress) -> pb.ReplicateRequest:
    return pb.ReplicateRequest(
        ack=pb.ReplicaAck(max_phy_offset=progress.max_phy_offset, confirmed_offset=progress.confirmed_offset)
    )


class ReplicationConnection:
    """The slave's replication loop (a store service: start, stop, halt)."""

    name = "ha-client"

    def __init__(
        self,
        client: ReplicaCore,
        master_address: str,
        reconnect_interval_max_ms: int,
        housekeeping_interval_ms: int,
        clock: Clock,
        tls: TlsFiles | None = None,
    ) -> None:
        self._client = client
        self._tls = tls  # TLS to the master (its CA; this replica's certificate for mutual TLS)
        self._master_address = master_address
        self._reconnect_interval_max_s = reconnect_interval_max_ms / 1000
        self._housekeeping_interval_s = housekeeping_interval_ms / 1000
        self._clock = clock
        self._last_received_s = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._call: grpc.Future | None = None
        self._thread: threading.Thread | None = None
        self.connected = threading.Event()  # set while a session is past its handshake
        self.sessions = 0  # sessions that got past the handshake

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.halt()

    def halt(self) -> None:
        self._stop.set()
        with self._lock:
            if self._call is not None:
                self._call.cancel()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        pause_s = RECONNECT_INTERVAL_MIN_S
        while not self._stop.is_set():
            sessions = self.sessions
            try:
                self.run_once()
            except grpc.RpcError as exc:
                if not self._stop.is_set():
                    log.info("replication stream to %s ended: %s", self._master_address, exc.code())
            except Exception:  # logged; the next session starts from a new handshake
                log.exception("replication from %s failed", self._master_address)
            if self.sessions > sessions:
                pause_s = RECONNECT_INTERVAL_MIN_S
            self._stop.wait(pause_s)
            pause_s = min(pause_s * 2, self._reconnect_interval_max_s)

    def _watch(self, call: grpc.Future, session_over: threading.Event) -> None:
        """Cancel ``call`` once nothing came from the master for the housekeeping interval."""
        interval_s = self._housekeeping_interval_s
        while not session_over.wait(interval_s / 4):
            silent_s = self._clock.monotonic_s() - self._last_received_s
            if silent_s > interval_s:
                log.warning("nothing from master %s for %.1f s: reconnecting", self._master_address, silent_s)
                call.cancel()
                return

    def run_once(self) -> None:
        """One session: handshake, truncation, then chunks until the stream ends."""
        client = self._client
        requests: queue.SimpleQueue[pb.ReplicateRequest | None] = queue.SimpleQueue()

        def request_stream() -> Iterator[pb.ReplicateRequest]:
            while (request := requests.get()) is not None:
                yield request

        max_offset, epochs = client.handshake()
        requests.put(
            pb.ReplicateRequest(
                handshake=pb.ReplicaHandshake(
                    replica_id=client.replica_id, max_phy_offset=max_offset, epochs=epochs_to_pb(epochs)
                )
            )
        )
        options = [("grpc.max_receive_message_length", MESSAGE_SIZE_MAX_BYTES)]
        with open_channel(self._master_address, self._tls, options) as channel:
            call = pb_grpc.StoreStub(channel).Replicate(request_stream())
            with self._lock:
                if self._stop.is_set():
                    return
                self._call = call
            self._last_received_s = self._clock.monotonic_s()
            session_over = threading.Event()
            watchdog = threading.Thread(target=self._watch, args=(call, session_over), name="ha-watchdog", daemon=True)
            watchdog.start()
            try:
                for response in call:
                    self._last_received_s = self._clock.monotonic_s()
                    if response.HasField("handshake"):
                        master = response.handshake
                        client.on_master_handshake(epochs_from_pb(master.epochs), master.min_phy_offset)
                        self.sessions += 1
                        self.connected.set()
                        requests.put(_ack(client.progress()))
                        continue
                    if response.HasField("config"):  # a config/ file of the master's: not acked
                        client.on_config(response.config.name, response.config.content, response.config.version)
                        continue
                    chunk = response.chunk
                    progress = client.on_chunk(chunk.phy_offset, chunk.data, chunk.epoch, chunk.epoch_start_offset)
                    requests.put(_ack(progress))
            finally:
                session_over.set()
                self.connected.clear()
                requests.put(None)
                with self._lock:
                    self._call = None
                call.cancel()
