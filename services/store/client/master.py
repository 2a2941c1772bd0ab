"""``MasterTransport``: a ``Transport`` to whichever replica of a broker group is master now, as
the group's keys in etcd say (RocketMQ 5's proxy and clients follow the route the same way).

It watches the group through a ``RoleView`` (services/coordination/role_view.py: one read, then a watch)
and keeps one ``GrpcTransport`` to the current master's address. When the view names another
master the old transport is closed at once: calls in flight to a dead or deposed master fail
now (gRPC CANCELLED) instead of sitting out their deadline, and are retried on the new one.

A call is retried on the master, within ``failover_timeout_s`` of its start, when it failed in
a way a failover explains: the store could not be reached (connection refused, reset, channel
closed), it is stopping, or it answered that it is ``NOT_MASTER`` (a slave, a replica whose
group is electing, a master whose lease is in doubt; nothing was written). A store that
answered for its own reasons (disk full, a bad request, a put refused for too few replicas in
sync) is not asked again: the caller gets its answer. So a put retried here was either refused
whole or may have landed on a master that then died: at least once, never an OK for a write
that was not stored (the OK always comes from the master that stored it). Only while an election
can replace the master, though: in a group of one replica (no other registered), a failed call
is answered at once, since only the store's restart would bring a master back (the broker sends
elsewhere; clients retry), as a RocketMQ proxy answers for a broker that is down. A put may also
say how long its sender can wait (``timeout_s``: the broker's send deadline), so a send meant for
a group that is failing over can still go to another group in time.

Streams (WatchArrivals) are opened on the current master; when it changes they end and their
owners reopen them, which reaches the new one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pyrmq.store.v1 import store_pb2 as pb

from services.coordination.group_keys import DEFAULT_PREFIX, GroupKeys
from services.coordination.group_state import GroupState
from services.coordination.role_view import RoleView
from services.domain.statuses import NOT_MASTER
from services.runtime.clock import Clock, SystemClock
from services.runtime.etcd.rpc.client import EtcdClient
from services.runtime.rpc.tls import TlsFiles
from services.store.client.errors import StoreError, StoreUnavailableError
from services.store.client.transport import GrpcTransport, Stream

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_FAILOVER_TIMEOUT_S = 10.0
VIEW_RETRY_INTERVAL_S = 0.2
RETRY_PAUSE_S = 0.05  # after a failed call, before asking the same master again


def failover_worthy(exc: StoreError) -> bool:
    """Did ``exc`` come from a master that is gone, going or not the master (retry on the new
    one), rather than from a store answering for its own reasons?"""
    if not isinstance(exc, StoreUnavailableError):
        return False
    message = exc.message
    return NOT_MASTER in message or "not running" in message or "store refused" not in message


def master_address(state: GroupState) -> str | None:
    """The address of the group's live master, if it has one."""
    master = state.master
    return master.masterAddress if master is not None and state.master_alive() else None


class MasterTransport:
    """A Transport that follows the master of broker group ``group`` through etcd."""

    def __init__(
        self,
        etcd_endpoints: Sequence[str],
        group: str,
        rpc_timeout_s: float = 5.0,
        tls: TlsFiles | None = None,
        put_stream: bool = False,
        clock: Clock | None = None,
        failover_timeout_s: float = DEFAULT_FAILOVER_TIMEOUT_S,
        etcd_prefix: str = DEFAULT_PREFIX,
    ) -> None:
        self.group = group
        self._rpc_timeout_s = rpc_timeout_s
        self._tls = tls
        self._put_stream = put_stream
        self._clock = clock or SystemClock()
        self.failover_timeout_s = failover_timeout_s
        self._etcd = EtcdClient(list(etcd_endpoints), timeout_s=rpc_timeout_s, attempt_timeout_s=1.0)
        self.view = RoleView(self._etcd, GroupKeys(group, etcd_prefix))
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._transport: GrpcTransport | None = None
        self._closed = False
        self._stopping = threading.Event()
        self.failovers = 0  # calls that were retried on another master (or the same, after a pause)
        self._retrying = 0  # calls now waiting to be retried on a new master
        self.view.add_listener(self._on_view)
        self._starter = threading.Thread(target=self._start_view, name=f"master-view-{group}", daemon=True)
        self._starter.start()

    # -- the view -------------------------------------------------------------------------------
    def _start_view(self) -> None:
        """Reads and watches the group; until etcd answers, keeps trying (calls wait meanwhile)."""
        self.view.follow(self._stopping, VIEW_RETRY_INTERVAL_S)

    def _on_view(self, old: GroupState, new: GroupState) -> None:
        address = master_address(new)
        retired: GrpcTransport | None = None
        with self._changed:
            current = self._transport
            if current is not None and current.address != address:
                retired, self._transport = current, None
                log.info("group %s: master %s -> %s", self.group, current.address, address or "(none)")
            self._changed.notify_all()
        if retired is not None:
            retired.close()  # calls in flight to it fail now and are retried on the new master

    def _master(self, deadline_s: float) -> GrpcTransport:
        """The transport to the current master, waiting until there is one or ``deadline_s``."""
        with self._changed:
            while True:
                if self._closed:
                    raise StoreUnavailableError("store client closed")
                if self._transport is not None:
                    return self._transport
                address = master_address(self.view.state)
                if address is not None:
                    self._transport = GrpcTransport(
                        address, self._rpc_timeout_s, self._tls, self._put_stream, self._clock
                    )
                    return self._transport
                left = deadline_s - self._clock.monotonic_s()
                if left <= 0:
                    raise StoreUnavailableError(f"broker group {self.group} has no master (etcd: {self._where()})")
                self._changed.wait(min(left, VIEW_RETRY_INTERVAL_S))

    def _where(self) -> str:
        state = self.view.state
        return f"revision {state.revision}, {len(state.replicas)} replica(s) registered"

    @property
    def failing_over(self) -> bool:
        """A call is waiting for the group's (new) master: callers that shed load by queueing
        time (the broker's put coalescer) hold on instead of refusing what waits behind it."""
        return self._retrying > 0 or (self._transport is None and master_address(self.view.state) is None)

    def _retry(self, what: Callable[[GrpcTransport], T], deadline_s: float | None = None) -> T:
        """Retry on the (new) master until ``deadline_s``, but only while another replica could
        be elected: in a group of one, a master that failed is answered at once (nothing but
        its restart would replace it; the broker sends elsewhere, clients retry), as a RocketMQ
        proxy answers for a broker that is down."""
        deadline = self._clock.monotonic_s() + self.failover_timeout_s if deadline_s is None else deadline_s
        retrying = False
        try:
            while True:
                transport = self._master(deadline)
                try:
                    return what(transport)
                except StoreError as exc:
                    if not failover_worthy(exc) or self._clock.monotonic_s() >= deadline:
                        raise
                    if not self._could_fail_over(transport, exc):
                        raise
                    log.info("group %s: %s failed (%s); retrying on the master", self.group, transport.address, exc)
                    if not retrying:
                        retrying = True
                        with self._lock:
                            self._retrying += 1
                    self.failovers += 1
                    self._wait_change(transport, deadline)
        finally:
            if retrying:
                with self._lock:
                    self._retrying -= 1

    def _could_fail_over(self, failed: GrpcTransport, exc: StoreError) -> bool:
        """Can waiting bring a master other than the one that failed? Yes if a live store
        answered NOT_MASTER (its group is electing), the view names another master, or a
        replica other than the failed one is registered (an election can pick it)."""
        if NOT_MASTER in exc.message:
            return True
        state = self.view.state
        if master_address(state) not in (None, failed.address):
            return True
        return any(member.info.brokerAddr != failed.address for member in state.replicas.values())

    def _wait_change(self, failed: GrpcTransport, deadline_s: float) -> None:
        """After a failed call: a short pause, cut short when the view names another master."""
        with self._changed:
            self._changed.wait(max(0.0, min(RETRY_PAUSE_S, deadline_s - self._clock.monotonic_s())))
            if self._transport is failed and master_address(self.view.state) != failed.address:
                self._transport = None

    # -- Transport ------------------------------------------------------------------------------
    @property
    def address(self) -> str:
        transport = self._transport
        if transport is not None:
            return transport.address
        return master_address(self.view.state) or f"etcd:{self.group}"

    def call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        return self._retry(lambda transport: transport.call(method, request, timeout_s))

    def put(self, request: pb.PutMessagesRequest, timeout_s: float | None = None) -> pb.PutMessagesResponse:
        """``timeout_s`` (a sender's deadline: the broker's sends, which can go to another
        group): wait for a new master no longer than that; None: ``failover_timeout_s``."""
        timeout_s = self.failover_timeout_s if timeout_s is None else min(self.failover_timeout_s, timeout_s)
        return self._retry(lambda transport: transport.put(request), self._clock.monotonic_s() + timeout_s)

    def stream(self, method: str, request: Any) -> Stream:
        return self._master(self._clock.monotonic_s() + self.failover_timeout_s).stream(method, request)

    def wait_ready(self, timeout_s: float, give_up: Callable[[], bool], clock: Clock) -> bool:
        deadline = clock.monotonic_s() + timeout_s
        while True:
            try:
                transport = self._master(min(deadline, clock.monotonic_s() + VIEW_RETRY_INTERVAL_S))
            except StoreUnavailableError:
                if give_up() or clock.monotonic_s() >= deadline:
                    return False
                continue
            left = deadline - clock.monotonic_s()
            try:
                if transport.wait_ready(max(left, 0.0), give_up, clock):
                    return True
            except StoreUnavailableError:  # it answered NOT_SERVING: a stopping master
                pass
            if give_up() or clock.monotonic_s() >= deadline:
                return False

    def close(self) -> None:
        self._stopping.set()
        with self._changed:
            self._closed = True
            transport, self._transport = self._transport, None
            self._changed.notify_all()
        if transport is not None:
            transport.close()
        self.view.stop()
        self._etcd.close()
