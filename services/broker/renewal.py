"""Receipt-handle renewal for push consumers, and the release of a departed client's messages
(the RocketMQ 5 proxy's DefaultReceiptHandleManager + ReceiptHandleGroup). No gRPC here.

Why. A push consumer receives with ``auto_renew`` and no invisible duration: the broker pops with
``auto_renew_invisible_ms`` (60 s) and promises to keep the message invisible for as long as the
listener runs. So every message such a receive hands out is *tracked* here until it is settled,
and ``ReceiptRenewer.run_once`` extends its invisible time shortly before it runs out.

What is tracked. A ``TrackedHandle`` per delivery, keyed by (group, the handle the client holds):
the client that received it, the handle the store currently knows (the store's
ChangeInvisibleDuration kills the old handle and returns a new one, so after one renewal the two
differ), when it expires by the broker's clock, when it was received and how often renewed.
Tracked: messages a receive with ``auto_renew`` or from a client whose Settings said
PUSH_CONSUMER returned; at most ``renew_handles_max`` (beyond, a message is not renewed: it comes
back after its invisible time, as without renewal).

Renewal (``run_once``, every ``renew_scan_interval_ms`` on the ``receipt-renewer`` thread):

* a handle expiring within ``renew_ahead_ms`` gets ChangeInvisibleDuration(current handle, slice),
  the slice growing with the renewals: ``renew_slices_ms`` (1 m, 3 m, 5 m, 10 m, 30 m, 1 h, the
  last one repeated: RenewStrategyPolicy); the new handle replaces the current one;
* received ``renew_max_ms`` (3 h) ago: renewal stops and the message is nacked with the group's
  retry delay for its delivery attempt (the proxy's STOP_RENEW), then forgotten;
* the store answers INVALID_RECEIPT_HANDLE (expired, the queue's pop state reset): forgotten; the
  store cannot be reached: tried again next scan, forgotten after ``renew_retry_max`` failures.

Settling. AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue carry the handle
the client holds (the original one); ``ConsumerService`` swaps in the current one through
``ReceiptHandleTable.hold`` / ``release`` and stops tracking once the store gave a definite answer
(OK or INVALID_RECEIPT_HANDLE; a DLQ put that failed or an unreachable store keep the message
tracked, since the client retries with the same handle).

A client gone. Its messages are released: ChangeInvisibleDuration(current, ``invisible_ms_when_clear``,
1 s), then forgotten, so another consumer gets them within seconds instead of after up to an hour.
Gone means: it sent NotifyClientTermination (``client_terminated``: the renewer wakes at once), or
it has had no live Telemetry stream for ``client_gone_grace_ms`` (a reconnecting stream within
that time keeps its messages), or its session has been silent (no heartbeat, no settings) for
``client_silent_max_ms`` (the proxy's channel expiry).

Concurrency. ``ReceiptHandleTable._lock`` guards the dicts only. Each entry has a ``lock`` held
across the store call that uses its current handle: client requests wait for it (up to
``HOLD_TIMEOUT_S``, the proxy's lockTimeoutMsInHandleGroup), the renewer never waits (a busy entry
is skipped until the next scan). Order: entry lock -> table lock; entry locks of one request are
taken in handle order.

All of this is memory of the broker that served the receive, as in the proxy: after that broker
restarts nothing renews the message (it reappears after its invisible time: one more delivery)
and the original handle no longer maps (the store answers INVALID_RECEIPT_HANDLE); see the README.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from services.broker.config import BrokerConfig
from services.broker.errors import FAILURES
from services.broker.model import ClientType
from services.runtime.clock import Clock
from services.store.client.model import AckResult

log = logging.getLogger(__name__)

HOLD_TIMEOUT_S = 3.0  # a client request waits this long for a renewal of the same handle (lockTimeoutMsInHandleGroup)


class RenewStore(Protocol):
    def change_invisible_duration(
        self, group: str, topic: str, handle: str, invisible_ms: int
    ) -> tuple[AckResult, str]: ...


class LiveSession(Protocol):
    last_seen_ms: int
    client_type: ClientType


class LiveClients(Protocol):
    """Who is connected: ``telemetry.ClientRegistry``."""

    def get(self, client_id: str) -> LiveSession | None: ...


@dataclass(eq=False, slots=True)
class TrackedHandle:
    """One delivery to a push consumer, not settled yet."""

    client_id: str
    group: str
    topic: str
    message_id: str
    original_handle: str  # what the client holds; the key
    handle: str  # what the store knows now
    expire_ms: int  # by the broker's clock, measured from before the store call (conservative)
    received_ms: int
    delivery_attempt: int
    renew_count: int = 0
    failures: int = 0  # store calls in a row that did not reach the store
    removed: bool = False  # forgotten; whoever holds ``lock`` must not use it any more
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True, slots=True)
class RenewalStats:
    tracked: int  # handles tracked now
    renewals: int  # invisible times extended
    released: int  # messages of departed clients made visible again (invisible_ms_when_clear)
    renew_max_stops: int  # renewals stopped after renew_max_ms (message nacked)
    dropped: int  # renewals abandoned: the store refused the handle, or could not be reached renew_retry_max times
    untracked_full: int  # deliveries not tracked because the table was full


class ReceiptHandleTable:
    """(group, original handle) -> TrackedHandle, and client id -> its handles."""

    def __init__(self, handles_max: int) -> None:
        self._handles_max = handles_max
        self._lock = threading.Lock()
        self._by_handle: dict[tuple[str, str], TrackedHandle] = {}
        self._by_client: dict[str, dict[tuple[str, str], TrackedHandle]] = {}
        self.untracked_full = 0

    def add(self, entry: TrackedHandle) -> bool:
        key = (entry.group, entry.original_handle)
        with self._lock:
            if len(self._by_handle) >= self._handles_max:
                self.untracked_full += 1
                return False
            self._by_handle[key] = entry
            self._by_client.setdefault(entry.client_id, {})[key] = entry
        return True

    def remove(self, entry: TrackedHandle) -> None:
        """Forget ``entry`` (call with its lock held, or for an entry nobody else can see)."""
        key = (entry.group, entry.original_handle)
        entry.removed = True
        with self._lock:
            if self._by_handle.get(key) is entry:
                del self._by_handle[key]
            mine = self._by_client.get(entry.client_id)
            if mine is not None and mine.get(key) is entry:
                del mine[key]
                if not mine:
                    del self._by_client[entry.client_id]

    def get(self, group: str, handle: str) -> TrackedHandle | None:
        with self._lock:
            return self._by_handle.get((group, handle))

    def clients(self) -> list[str]:
        with self._lock:
            return list(self._by_client)

    def of_client(self, client_id: str) -> list[TrackedHandle]:
        with self._lock:
            return list(self._by_client.get(client_id, {}).values())

    def entries(self) -> list[TrackedHandle]:
        with self._lock:
            return list(self._by_handle.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_handle)

    # -- client requests (ConsumerService) ----------------------------------------------------
    def hold(self, group: str, handles: Iterable[str]) -> list[TrackedHandle | None]:
        """For each handle, its tracked entry with the entry's lock taken, or None (not tracked,
        or busy beyond ``HOLD_TIMEOUT_S``: the request then goes to the store with the handle it
        carries). Pair with ``release``."""
        handles = list(handles)
        held: list[TrackedHandle | None] = [None] * len(handles)
        for i in sorted(range(len(handles)), key=lambda i: handles[i]):  # one lock order for all
            entry = self.get(group, handles[i])
            if entry is None or any(other is entry for other in held):
                continue
            if not entry.lock.acquire(timeout=HOLD_TIMEOUT_S):
                log.warning(
                    "receipt handle of %s busy for %.0f s; using the client's", entry.message_id, HOLD_TIMEOUT_S
                )
                continue
            if entry.removed:
                entry.lock.release()
                continue
            held[i] = entry
        return held

    def release(self, held: list[TrackedHandle | None], settled: list[bool]) -> None:
        """Unlock what ``hold`` took; forget the entries whose message ``settled`` says is done with."""
        for entry, done in zip(held, settled):
            if entry is None:
                continue
            if done:
                self.remove(entry)
            entry.lock.release()


def current_handles(held: list[TrackedHandle | None], handles: list[str]) -> list[str]:
    """The handles to give the store: the current one of each held entry, else the client's."""
    return [entry.handle if entry is not None else handle for entry, handle in zip(held, handles)]


def settled(result: AckResult) -> bool:
    """Is a tracked message done with after the store answered ``result``? A DLQ put that failed
    is not: the client retries it, and the message must stay invisible meanwhile."""
    return result is not AckResult.DLQ_PUT_FAILED


class ReceiptRenewer:
    """The background loop: renew due handles, release departed clients' handles."""

    def __init__(
        self,
        store: RenewStore,
        table: ReceiptHandleTable,
        clients: LiveClients,
        config: BrokerConfig,
        clock: Clock,
    ) -> None:
        self._store = store
        self.table = table
        self._clients = clients
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()  # guards _terminated, _absent_since_ms and the counters
        self._terminated: set[str] = set()
        self._absent_since_ms: dict[str, int] = {}
        self._renewals = 0
        self._released = 0
        self._max_stops = 0
        self._dropped = 0
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the consumer and telemetry cores call ----------------------------------------
    def is_push_consumer(self, client_id: str) -> bool:
        session = self._clients.get(client_id) if client_id else None
        return session is not None and session.client_type in (ClientType.PUSH_CONSUMER, ClientType.LITE_PUSH_CONSUMER)

    def track(
        self,
        client_id: str,
        group: str,
        topic: str,
        message_id: str,
        handle: str,
        invisible_ms: int,
        popped_at_ms: int,
        delivery_attempt: int,
    ) -> bool:
        """Renew this delivery from now on; False if the table is full."""
        return self.table.add(
            TrackedHandle(
                client_id=client_id,
                group=group,
                topic=topic,
                message_id=message_id,
                original_handle=handle,
                handle=handle,
                expire_ms=popped_at_ms + invisible_ms,
                received_ms=popped_at_ms,
                delivery_attempt=delivery_attempt,
            )
        )

    def untrack(self, group: str, handles: Iterable[str]) -> None:
        """Stop renewing deliveries that never reached the client (its receive call ended first):
        they come back after their invisible time."""
        held = self.table.hold(group, handles)
        self.table.release(held, [True] * len(held))

    def client_terminated(self, client_id: str) -> None:
        """NotifyClientTermination: release the client's messages on the next run, which starts now."""
        if not client_id:
            return
        with self._lock:
            self._terminated.add(client_id)
        self._wake.set()

    # -- the loop ---------------------------------------------------------------------------
    def run_once(self, now_ms: int | None = None) -> int:
        """One scan: release the messages of departed clients, renew those due; the number of
        store calls made."""
        now = self._clock.now_ms() if now_ms is None else now_ms
        work = 0
        for client_id in self.table.clients():
            if self._gone(client_id, now):
                work += self._release_client(client_id)
        self._forget_absences(now)
        ahead_ms = self._config.renew_ahead_ms
        for entry in self.table.entries():
            if entry.expire_ms - now > ahead_ms or not entry.lock.acquire(blocking=False):
                continue  # not due, or a client request holds it (it settles or renews it)
            try:
                if not entry.removed:
                    work += 1
                    self._renew_locked(entry, self._clock.now_ms() if now_ms is None else now_ms)
            finally:
                entry.lock.release()
        return work

    def _gone(self, client_id: str, now_ms: int) -> bool:
        with self._lock:
            if client_id in self._terminated:
                return True
        session = self._clients.get(client_id)
        with self._lock:
            if session is not None:
                self._absent_since_ms.pop(client_id, None)
                return now_ms - session.last_seen_ms >= self._config.client_silent_max_ms
            since = self._absent_since_ms.setdefault(client_id, now_ms)
            return now_ms - since >= self._config.client_gone_grace_ms

    def _forget_absences(self, now_ms: int) -> None:
        """Drop bookkeeping of clients without tracked handles (bounded by the table's clients)."""
        tracked = set(self.table.clients())
        with self._lock:
            for client_id in [c for c in self._absent_since_ms if c not in tracked]:
                del self._absent_since_ms[client_id]
            self._terminated &= tracked

    def _release_client(self, client_id: str) -> int:
        calls = 0
        clear_ms = self._config.invisible_ms_when_clear
        for entry in self.table.of_client(client_id):
            if not entry.lock.acquire(blocking=False):
                continue  # a request of the client is settling it; looked at again next run
            try:
                if entry.removed:
                    continue
                calls += 1
                try:
                    self._store.change_invisible_duration(entry.group, entry.topic, entry.handle, clear_ms)
                except FAILURES as exc:
                    if self._failed_locked(entry):
                        log.warning("could not release %s of %s: %s", entry.message_id, client_id, exc)
                    continue
                self.table.remove(entry)  # released or already gone from the store: done either way
                with self._lock:
                    self._released += 1
            finally:
                entry.lock.release()
        if calls:
            log.info("client %s gone: released %d in-flight message(s)", client_id, calls)
        return calls

    def _renew_locked(self, entry: TrackedHandle, now_ms: int) -> None:
        config = self._config
        if now_ms - entry.received_ms >= config.renew_max_ms:
            self._stop_renewing_locked(entry)
            return
        slices = config.renew_slices_ms
        slice_ms = slices[min(entry.renew_count, len(slices) - 1)]
        try:
            result, new_handle = self._store.change_invisible_duration(entry.group, entry.topic, entry.handle, slice_ms)
        except FAILURES as exc:
            if self._failed_locked(entry):
                log.warning("renewal of %s abandoned: %s", entry.message_id, exc)
            return
        if result is not AckResult.OK or not new_handle:
            log.info("renewal of %s refused (%s): no longer renewed", entry.message_id, result.value)
            self._drop_locked(entry)
            return
        entry.handle = new_handle
        entry.expire_ms = now_ms + slice_ms
        entry.renew_count += 1
        entry.failures = 0
        with self._lock:
            self._renewals += 1

    def _stop_renewing_locked(self, entry: TrackedHandle) -> None:
        """renew_max_ms is over: nack with the group's retry delay for this attempt, forget it."""
        delays = self._config.consumer_retry_delays_ms
        delay_ms = delays[min(max(entry.delivery_attempt, 1), len(delays)) - 1]
        try:
            self._store.change_invisible_duration(entry.group, entry.topic, entry.handle, delay_ms)
        except FAILURES as exc:  # it comes back after its current invisible time instead
            log.warning("nack of %s after the renewal time failed: %s", entry.message_id, exc)
        log.info("%s consumed for over %d ms: no longer renewed", entry.message_id, self._config.renew_max_ms)
        self.table.remove(entry)
        with self._lock:
            self._max_stops += 1

    def _failed_locked(self, entry: TrackedHandle) -> bool:
        """Count a store call that failed; True (and forgotten) once renew_retry_max is reached."""
        entry.failures += 1
        if entry.failures < self._config.renew_retry_max:
            return False
        self._drop_locked(entry)
        return True

    def _drop_locked(self, entry: TrackedHandle) -> None:
        self.table.remove(entry)
        with self._lock:
            self._dropped += 1

    def stats(self) -> RenewalStats:
        with self._lock:
            return RenewalStats(
                tracked=len(self.table),
                renewals=self._renewals,
                released=self._released,
                renew_max_stops=self._max_stops,
                dropped=self._dropped,
                untracked_full=self.table.untracked_full,
            )

    # -- thread -----------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="receipt-renewer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread. Tracked messages are left as they are (the proxy clears them on
        shutdown; here they reappear after their invisible time, as after a crash)."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def _loop(self) -> None:
        interval_s = self._config.renew_scan_interval_ms / 1000
        while not self._stopped.is_set():
            self._wake.clear()  # before the scan: a termination arriving during it wakes the next one
            try:
                self.run_once()
            except Exception:  # a bug: keep renewing the rest next time
                log.exception("receipt renewal scan failed")
            self._wake.wait(interval_s)


__all__ = [
    "HOLD_TIMEOUT_S",
    "ReceiptHandleTable",
    "ReceiptRenewer",
    "RenewalStats",
    "TrackedHandle",
    "current_handles",
    "settled",
]
