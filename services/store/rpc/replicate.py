"""The master's half of ``Store.Replicate`` (the gRPC shell of ``ha.ha_service.HAService``).

The stream's worker thread sends; a second thread reads the slave's acks, so a slave that acks
slowly never stalls the transfer and the SYNC waiters see each ack as soon as it lands. When
the CommitLog has nothing new, the sender waits for an append, and sends a heartbeat chunk
(no data) once ha_send_heartbeat_interval_ms passed without a send, which the slave acks. Between
chunks it sends the ``config/`` files that changed (all of them first), checked at most every
ha_config_sync_interval_ms (``ConfigPublisher``, ha/config_sync.py). A watchdog cancels the
stream when the slave has not acked for ha_housekeeping_interval_ms (a stopped slave no longer
reads, and the sender would wait on flow control for ever).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import grpc
from pyrmq.store.v1 import store_pb2 as pb

from services.store.errors import NotMasterError
from services.store.ha.ha_service import HAService, SlaveProgress
from services.store.rpc.replicate_client import epochs_to_pb

log = logging.getLogger(__name__)


def serve_replica(
    ha: HAService | None,
    requests: Iterator[pb.ReplicateRequest],
    context: grpc.ServicerContext,
    heartbeat_interval_s: float,
    housekeeping_interval_s: float,
    stopping: threading.Event,
) -> Iterator[pb.ReplicateResponse]:
    """One slave's stream; ends when the slave goes, or when ``stopping`` is set (then
    ``HAService.wake`` makes it notice at once)."""
    if ha is None:
        raise NotMasterError("this store is not a master: replicate from the master")
    first = next(requests, None)
    if first is None:
        return
    if not first.HasField("handshake"):
        raise ValueError("Replicate: the first message must be a handshake")
    session, min_offset, max_offset, epochs = ha.handshake(first.handshake.replica_id)
    log.info(
        "slave %d connected (its CommitLog ends at %d, ours at %d)",
        session.replica_id,
        first.handshake.max_phy_offset,
        max_offset,
    )
    try:
        yield pb.ReplicateResponse(
            handshake=pb.MasterHandshake(
                replica_id=0, min_phy_offset=min_offset, max_phy_offset=max_offset, epochs=epochs_to_pb(epochs)
            )
        )
        second = next(requests, None)
        if second is None:
            return
        if not second.HasField("ack"):
            raise ValueError("Replicate: after the handshake the slave acks where its CommitLog ends")
        ha.on_ack(session, second.ack.max_phy_offset, second.ack.confirmed_offset)
        closed = threading.Event()
        reader = threading.Thread(
            target=_read_acks, args=(ha, session, requests, closed), name=f"ha-acks-{session.replica_id}", daemon=True
        )
        reader.start()
        watchdog = threading.Thread(
            target=_watch,
            args=(ha, session, context, closed, housekeeping_interval_s),
            name=f"ha-watchdog-{session.replica_id}",
            daemon=True,
        )
        watchdog.start()
        position = second.ack.max_phy_offset
        publisher, clock = ha.config_tables.publisher(), ha.clock
        heartbeat_at_s = clock.monotonic_s() + heartbeat_interval_s
        while not closed.is_set() and not stopping.is_set() and not ha.closed and context.is_active():
            for snapshot in publisher.due():
                yield pb.ReplicateResponse(
                    config=pb.ConfigSnapshot(name=snapshot.name, content=snapshot.content, version=snapshot.version)
                )
            chunk = ha.next_chunk(position)
            now_s = clock.monotonic_s()
            if chunk is not None:
                master_max = ha.max_phy_offset
                ha.sent(session, chunk.end_offset, master_max)
                yield pb.ReplicateResponse(
                    chunk=pb.CommitLogChunk(
                        phy_offset=chunk.phy_offset,
                        data=chunk.data,
                        epoch=chunk.epoch,
                        epoch_start_offset=chunk.epoch_start_offset,
                        master_max_phy_offset=master_max,
                    )
                )
                position = chunk.end_offset
                heartbeat_at_s = now_s + heartbeat_interval_s
            elif now_s < heartbeat_at_s:  # woken by an append, an ack, the config check or an ending stream
                ha.wait_for_data(position, min(heartbeat_at_s - now_s, publisher.wait_s()))
            else:
                master_max = ha.max_phy_offset
                ha.sent(session, position, master_max)
                yield pb.ReplicateResponse(
                    chunk=pb.CommitLogChunk(phy_offset=position, master_max_phy_offset=master_max)
                )
                heartbeat_at_s = now_s + heartbeat_interval_s
    finally:
        ha.disconnect(session)
        log.info("slave %d disconnected", session.replica_id)


def _watch(
    ha: HAService,
    session: SlaveProgress,
    context: grpc.ServicerContext,
    closed: threading.Event,
    housekeeping_interval_s: float,
) -> None:
    while not closed.wait(housekeeping_interval_s / 4):
        silent_ms = ha.silent_ms(session)
        if silent_ms > housekeeping_interval_s * 1000:
            log.warning("slave %d silent for %d ms: dropping its stream", session.replica_id, silent_ms)
            context.cancel()
            return


def _read_acks(
    ha: HAService, session: SlaveProgress, requests: Iterator[pb.ReplicateRequest], closed: threading.Event
) -> None:
    try:
        for request in requests:
            if request.HasField("ack"):
                ha.on_ack(session, request.ack.max_phy_offset, request.ack.confirmed_offset)
    except grpc.RpcError:
        pass  # the stream was cancelled: the sender sees ``closed``
    finally:
        closed.set()
        ha.wake()
