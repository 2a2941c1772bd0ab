"""etcd's two streams as threads: a watch on a key or a prefix that hands events to a callback,
and a lease keepalive loop. Both fail over to the next endpoint the way the client's calls do,
and both stop cleanly: ``stop()`` ends the stream and joins the thread.

A watch that reconnects resumes from the revision after the last one it delivered, so the
callback sees every event once and in revision order, across failovers; if etcd has compacted
that revision away the watch ends and ``on_error`` is told (the caller re-reads and watches
again). The keepalive loop renews the lease a third of its TTL after each keepalive; the lease
counts as held only until one TTL after the last keepalive that etcd answered was *sent*
(model.LeaseSchedule), and when it is no longer held ``on_lost`` is called once and the loop
ends.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator

import grpc
from etcd.api.etcdserverpb import rpc_pb2 as pb
from etcd.api.etcdserverpb import rpc_pb2_grpc as pb_grpc

from services.runtime.clock import Clock
from services.runtime.etcd.model import (
    EtcdError,
    EtcdUnavailable,
    Event,
    LeaseNotFound,
    LeaseSchedule,
    prefix_range_end,
)
from services.runtime.etcd.rpc.client import REQUIRE_LEADER, EtcdClient, event

log = logging.getLogger(__name__)

RECONNECT_PAUSE_S = 0.05
# A watch stream asks etcd for a progress notification this often, and is given up (and made
# again on the next endpoint) when nothing at all came back for PROGRESS_SILENCE_S: a member cut
# off from this client sends no event and no error, so without this a watch would wait on it for
# ever (found by the netns faults: no election while one etcd member was cut from the group).
PROGRESS_INTERVAL_S = 0.5
PROGRESS_SILENCE_S = 1.5
JOIN_TIMEOUT_S = 5.0


class Watcher:
    """Events under ``key`` (or the prefix ``key``) delivered to ``callback`` on a thread, one
    list per etcd WatchResponse, in revision order. ``start()`` returns once etcd has created
    the watch, so every change after it is seen; a watch that ends for good (its start revision
    compacted) is reported afterwards, to ``on_error`` and in ``error``."""

    def __init__(
        self,
        client: EtcdClient,
        key: bytes,
        callback: Callable[[list[Event]], None],
        prefix: bool = False,
        start_revision: int = 0,
        prev_kv: bool = False,
        on_error: Callable[[Exception], None] | None = None,
    ) -> None:
        self.client = client
        self.key = key
        self.range_end = prefix_range_end(key) if prefix else b""
        self.callback = callback
        self.prev_kv = prev_kv
        self.on_error = on_error
        # The revision the next (re)created watch starts from; 0: "now" (first creation only).
        self.next_revision = start_revision
        self.error: Exception | None = None
        self._stopped = threading.Event()
        self._created = threading.Event()
        self._lock = threading.Lock()
        self._stream: grpc.Future | None = None
        self._requests: queue.Queue[pb.WatchRequest | None] = queue.Queue()
        self._heard_s = 0.0  # when the current stream last answered (client clock, monotonic)
        self._thread = threading.Thread(target=self._run, name=f"etcd-watch-{key!r}", daemon=True)
        self._watchdog = threading.Thread(target=self._watch_progress, name=f"etcd-watchdog-{key!r}", daemon=True)

    def start(self) -> Watcher:
        self._thread.start()
        self._watchdog.start()
        if not self._created.wait(self.client.timeout_s):
            self.stop()
            raise EtcdUnavailable(f"etcd watch of {self.key!r}: not created within {self.client.timeout_s} s")
        if self.error is not None:
            raise self.error
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._requests.put(None)
        with self._lock:
            if self._stream is not None:
                self._stream.cancel()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(JOIN_TIMEOUT_S)
        if self._watchdog.is_alive() and self._watchdog is not threading.current_thread():
            self._watchdog.join(JOIN_TIMEOUT_S)

    def __enter__(self) -> Watcher:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _request_stream(self, create: pb.WatchRequest) -> Iterator[pb.WatchRequest]:
        yield create
        while (request := self._requests.get()) is not None:
            yield request

    def _run(self) -> None:
        index = self.client.rotation.current
        while not self._stopped.is_set():
            try:
                self._watch_on(index)
            except grpc.RpcError as exc:
                if self._stopped.is_set():
                    return
                log.info("etcd watch of %r on %s ended: %s", self.key, self.client.endpoints[index], exc.code())
            except EtcdError as exc:
                self._fail(exc)
                return
            index = (index + 1) % len(self.client.endpoints)
            self._stopped.wait(RECONNECT_PAUSE_S)

    def _watch_on(self, index: int) -> None:
        create = pb.WatchRequest(
            create_request=pb.WatchCreateRequest(
                key=self.key, range_end=self.range_end, start_revision=self.next_revision, prev_kv=self.prev_kv
            )
        )
        # A fresh request queue per stream: the old one's generator may still hold a None.
        self._requests = queue.Queue()
        stream = pb_grpc.WatchStub(self.client.channel(index)).Watch(
            self._request_stream(create), metadata=REQUIRE_LEADER
        )
        with self._lock:
            self._stream = stream
            self._heard_s = self.client.clock.monotonic_s()
        if self._stopped.is_set():
            stream.cancel()
            return
        for response in stream:
            self._heard_s = self.client.clock.monotonic_s()
            if response.canceled:
                reason = response.cancel_reason or "canceled by etcd"
                if response.compact_revision:
                    reason = f"revision {self.next_revision} compacted (oldest kept: {response.compact_revision})"
                raise EtcdError(f"etcd watch of {self.key!r}: {reason}")
            if response.created and not self.next_revision:
                self.next_revision = response.header.revision + 1
            if response.created:
                self._created.set()
            if response.events:
                events = [event(e) for e in response.events]
                self.next_revision = events[-1].kv.mod_revision + 1
                self._deliver(events)
            elif not response.created and response.header.revision >= self.next_revision:
                self.next_revision = response.header.revision + 1  # a progress notification

    def check_progress(self) -> bool:
        """Ask the current stream for a progress notification; cancel it (the watch is made
        again on the next endpoint) if it has been silent PROGRESS_SILENCE_S. False if it was."""
        with self._lock:
            stream = self._stream
            if stream is None or not self._created.is_set():
                return True
            if self.client.clock.monotonic_s() - self._heard_s > PROGRESS_SILENCE_S:
                log.info(
                    "etcd watch of %r: no answer for %.1f s; moving to another member", self.key, PROGRESS_SILENCE_S
                )
                stream.cancel()
                return False
            self._requests.put(pb.WatchRequest(progress_request=pb.WatchProgressRequest()))
            return True

    def _watch_progress(self) -> None:
        while not self._stopped.wait(PROGRESS_INTERVAL_S):
            self.check_progress()

    def _deliver(self, events: list[Event]) -> None:
        try:
            self.callback(events)
        except Exception:
            log.exception("etcd watch of %r: the callback failed", self.key)

    def _fail(self, exc: Exception) -> None:
        self.error = exc
        self._created.set()
        log.warning("%s", exc)
        if self.on_error is not None:
            self.on_error(exc)


class LeaseKeeper:
    """Keeps lease ``lease_id`` (granted ``ttl_s``) alive: ``run_once()`` sends one keepalive,
    ``start()`` runs them on a thread. ``held()`` says whether the lease is certainly still held
    now, which is what a holder checks before acting on it (a master before acking a write)."""

    def __init__(
        self,
        client: EtcdClient,
        lease_id: int,
        ttl_s: int,
        clock: Clock | None = None,
        on_lost: Callable[[], None] | None = None,
        granted_at_s: float | None = None,
    ) -> None:
        self.client = client
        self.clock = clock or client.clock
        now = self.clock.monotonic_s() if granted_at_s is None else granted_at_s
        self.schedule = LeaseSchedule(lease_id, ttl_s, now)
        self.on_lost = on_lost
        self._stopped = threading.Event()
        self._lost_reported = False
        self._thread = threading.Thread(target=self._run, name=f"etcd-lease-{lease_id:x}", daemon=True)

    @classmethod
    def grant(cls, client: EtcdClient, ttl_s: int, on_lost: Callable[[], None] | None = None) -> LeaseKeeper:
        """A new lease of (at least) ``ttl_s`` seconds and its keeper, not started."""
        sent = client.clock.monotonic_s()
        lease_id, granted = client.lease_grant(ttl_s)
        return cls(client, lease_id, granted, on_lost=on_lost, granted_at_s=sent)

    @property
    def lease_id(self) -> int:
        return self.schedule.lease_id

    def held(self) -> bool:
        return self.schedule.held(self.clock.monotonic_s())

    def run_once(self) -> bool:
        """One keepalive: True when etcd renewed the lease, False when no member renewed it in
        time (the lease may still be held; ``held()`` says until when). Reports a lost lease."""
        sent = self.clock.monotonic_s()
        budget = max(self.schedule.expires_at_s - sent, 0.1)
        try:
            ttl = self.client.lease_keepalive_once(self.lease_id, timeout_s=budget)
        except LeaseNotFound:
            ttl = 0
        except EtcdError as exc:
            # Unavailable, or an error that renewed nothing (a member whose forwarding to a dead
            # leader timed out answers UNKNOWN): either way, not renewed; try again.
            log.info("etcd lease %x: keepalive not answered: %s", self.lease_id, exc)
            self._check_held()
            return False
        self.schedule.renewed(sent, ttl)
        self._check_held()
        return ttl > 0

    def _check_held(self) -> None:
        if not self.held() and not self._lost_reported:
            self._lost_reported = True
            self.schedule.lost = True
            log.warning("etcd lease %x lost", self.lease_id)
            if self.on_lost is not None:
                self.on_lost()

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self, revoke: bool = False) -> None:
        """Ends the loop; ``revoke`` also ends the lease in etcd (its keys are deleted now
        rather than at expiry)."""
        self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(JOIN_TIMEOUT_S)
        if revoke:
            try:
                self.client.lease_revoke(self.lease_id)
            except LeaseNotFound:
                pass
            self.schedule.lost = True

    def _run(self) -> None:
        while not self._lost_reported:
            wait = self.schedule.due_at_s() - self.clock.monotonic_s()
            if self._stopped.wait(max(wait, 0.0)):
                return
            if not self.run_once() and not self._lost_reported:
                # Unanswered: try again soon, not a third of a TTL later.
                if self._stopped.wait(min(self.schedule.ttl_s / 10.0, 0.2)):
                    return
