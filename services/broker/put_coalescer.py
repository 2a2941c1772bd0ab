"""What the broker needs from the store, and send coalescing (no gRPC here).

``BrokerStore`` names the store calls the broker's core makes; the store's one client
(``services/store/client/``: ``GrpcStoreClient``, its puts over ``put_stream.py``) serves them,
and in the core tests the same client serves them from a real store in process
(``tests/support/store_double.py``).

Send coalescing (``PutCoalescer``)
----------------------------------
The official clients send one message per SendMessage, and one store RPC costs about as much
CPU as the SendMessage itself (~0.5 ms of server CPU per unary call measured on a 2-core machine,
while a batch of 32 costs barely more than a batch of 1). So SendMessage handlers do not call the
store one by one: each ``submit``s its message to a queue and waits on its own ``PendingPut``;
one dispatcher at a time takes *whatever is queued* (up to ``batch_messages_max`` /
``batch_bytes_max``), sends it as one PutMessages, and completes every waiter with its own
``PutResult``. This is group commit at the RPC level, leader/follower style:

* no added wait and no thread hand-off for a lone send: a waiter that finds no PutMessages in
  flight becomes the dispatcher itself (``lead``) and sends what is queued on its own thread
  until its own message is done. Sends arriving while a PutMessages is in flight wait and form
  the next batch, so the batch size grows by itself with concurrency (N concurrent sends -> ~1
  store RPC). When a leader is done and sends are still queued, the dispatcher thread takes
  over (it also sweeps the queue every second, should a sender never wait);
* order: the queue is FIFO and a batch is appended in queue order, so two sends of one
  producer keep their order (a FIFO producer waits for each send anyway);
* one bad message must not sink its batch: the store refuses a whole batch when one message
  fails validation. The broker validates everything the store checks before submitting, and
  if a batch is still refused as a whole with a validation status, each message is re-put
  alone so that only the culprit fails ("isolation");
* bounded: at most ``queue_messages_max`` messages / ``queue_bytes_max`` body bytes wait;
  beyond that ``submit`` raises TOO_MANY_REQUESTS (RocketMQ's SYSTEM_BUSY), which clients
  treat as flow control; and a send that waited longer than ``queue_wait_max_ms`` (RocketMQ's
  waitTimeMillsInSendQueue, 200 ms) is refused the same way when the dispatcher reaches it,
  before it is sent: under overload, excess sends fail fast and definitely instead of timing
  out with an unknown outcome. Not while the store client waits for a replica set's new master
  (``store_failing_over``): sends queue behind the one being retried and go to the new master
  (the queue's bounds still hold, and the client's own retry is bounded);
* a batch holds messages with the same ``allow_system_topic`` flag only (the broker's own
  timer/half-message writes may go to system topics, client messages never).

Cost per message: one lock round trip to enqueue, one to complete; under concurrency, a thread
hand-off to the waiters (tens of µs; bench/broker_bench.py measures it against direct puts).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from services.broker.errors import FAILURES, BrokerError, Code, FlowControlError, StoreCallError, as_broker_error
from services.store.client.model import (
    GroupInfo,
    MessageToPut,
    PutOutcome,
    StoredMessage,
    TopicInfo,
    refused_as_a_whole,
)

if TYPE_CHECKING:
    from services.store.client.model import GetOutcome

log = logging.getLogger(__name__)

DISPATCH_IDLE_WAIT_S = 1.0


class BrokerStore(Protocol):
    """The store calls the broker makes. Failures to reach the store raise StoreCallError."""

    def put_messages(
        self, messages: list[MessageToPut], allow_system_topics: bool, timeout_s: float | None = None
    ) -> list[PutOutcome]:
        """One PutMessages: one outcome per message, in order; ``timeout_s`` bounds waiting for
        a (new) master of the group (None: the store client's own failover timeout)."""

    def look_message(self, phy_offset: int) -> StoredMessage | None:
        """The record starting at a CommitLog offset, or None."""

    def query_messages_by_key(self, topic: str, key: str, max_num: int) -> list[StoredMessage]:
        """Records of ``topic`` indexed under ``key`` (a KEYS word or a UNIQ_KEY)."""

    def get_raw_messages(
        self, topic: str, queue_id: int, queue_offset: int, max_count: int, max_bytes: int, tags_codes: list[int]
    ) -> GetOutcome:
        """GetRawMessages (PullRecords, ``raw_pull.py``): whole CommitLog records as bytes."""

    def get_topic(self, name: str) -> TopicInfo | None: ...
    def create_topic(self, topic: TopicInfo) -> TopicInfo: ...
    def get_group(self, name: str) -> GroupInfo | None: ...
    def close(self) -> None: ...

    @property
    def failing_over(self) -> bool: ...
    @property
    def failovers(self) -> int: ...


# (messages, allow_system_topics, timeout_s): timeout_s is what is left of the sender's
# deadline when its own thread puts the batch (None: the dispatcher thread, no sender's).
StorePut = Callable[[list[MessageToPut], bool, float | None], list[PutOutcome]]


class PendingPut:
    """One submitted message: completed exactly once by the dispatcher, awaited by its sender.

    The "done" signal is a lock acquired at creation and released on completion, the
    cheapest one-shot event CPython has.
    """

    __slots__ = ("message", "size_bytes", "enqueued_s", "lead", "_done", "_outcome", "_error")

    def __init__(
        self,
        message: MessageToPut,
        enqueued_s: float = 0.0,
        lead: Callable[[PendingPut, float], None] | None = None,
    ) -> None:
        self.message = message
        self.size_bytes = len(message.body)
        self.enqueued_s = enqueued_s
        self.lead = lead  # called by ``wait(timeout_s)`` first: the coalescer may let this thread send the batch
        self._done = threading.Lock()
        self._done.acquire()
        self._outcome: PutOutcome | None = None
        self._error: BrokerError | None = None

    @property
    def done(self) -> bool:
        return self._outcome is not None or self._error is not None

    def complete(self, outcome: PutOutcome) -> None:
        self._outcome = outcome
        self._done.release()

    def fail(self, error: BrokerError) -> None:
        self._error = error
        self._done.release()

    def wait(self, timeout_s: float) -> PutOutcome:
        """The store's outcome; StoreCallError(PROXY_TIMEOUT) if it takes longer than timeout_s.

        After a timeout the put may still happen: the client sees PROXY_TIMEOUT and retries
        with the same message id (as the official clients do), so a duplicate is possible.
        """
        if self.lead is not None:
            self.lead(self, timeout_s)
        if not self._done.acquire(timeout=max(0.0, timeout_s)):
            raise StoreCallError("timed out waiting for the store to append the message", Code.PROXY_TIMEOUT)
        if self._error is not None:
            raise self._error
        assert self._outcome is not None
        return self._outcome


@dataclass(frozen=True, slots=True)
class CoalescerStats:
    put_calls: int  # PutMessages RPCs made (isolation re-puts included)
    messages: int  # messages completed
    batches: int  # batches taken from the queue
    isolated_batches: int  # batches refused as a whole and re-put one by one
    batch_messages_max: int  # the largest batch so far
    queued_messages: int  # waiting now
    shed: int = 0  # refused TOO_MANY_REQUESTS after waiting longer than queue_wait_max_ms


class PutSink(Protocol):
    def submit(self, message: MessageToPut) -> PendingPut: ...
    def submit_many(self, messages: list[MessageToPut]) -> list[PendingPut | BrokerError]:
        """``submit`` each, in order; a message that cannot be submitted gets its BrokerError."""

    def stats(self) -> CoalescerStats: ...
    def close(self) -> None: ...


class DirectPutSink:
    """No coalescing: every message is its own PutMessages, on the caller's thread."""

    def __init__(self, store_put: StorePut) -> None:
        self._store_put = store_put
        self.put_calls = 0

    def submit(self, message: MessageToPut) -> PendingPut:
        pending = PendingPut(message)
        self.put_calls += 1  # racy increment; a statistic only
        try:
            [outcome] = self._store_put([message], message.allow_system_topic, None)
        except FAILURES as exc:
            pending.fail(as_broker_error(exc))
        else:
            pending.complete(outcome)
        return pending

    def submit_many(self, messages: list[MessageToPut]) -> list[PendingPut | BrokerError]:
        return [self.submit(message) for message in messages]

    def stats(self) -> CoalescerStats:
        calls = self.put_calls
        return CoalescerStats(
            put_calls=calls,
            messages=calls,
            batches=calls,
            isolated_batches=0,
            batch_messages_max=1 if calls else 0,
            queued_messages=0,
        )

    def close(self) -> None:
        pass


class PutCoalescer:
    """The dispatcher described in the module docstring. ``start()`` runs it on a thread;
    tests may call ``run_once()`` instead."""

    def __init__(
        self,
        store_put: StorePut,
        batch_messages_max: int = 256,
        batch_bytes_max: int = 16 << 20,
        queue_messages_max: int = 16_384,
        queue_bytes_max: int = 256 << 20,
        queue_wait_max_ms: int = 0,
        monotonic_s: Callable[[], float] = lambda: 0.0,
        store_failing_over: Callable[[], bool] = lambda: False,
        store_failovers: Callable[[], int] = lambda: 0,
    ) -> None:
        assert batch_messages_max > 0 and batch_bytes_max > 0
        assert queue_messages_max >= batch_messages_max, "a full queue must hold at least one batch"
        self._store_put = store_put
        self._batch_messages_max = batch_messages_max
        self._batch_bytes_max = batch_bytes_max
        self._queue_messages_max = queue_messages_max
        self._queue_bytes_max = queue_bytes_max
        self._queue_wait_max_s = queue_wait_max_ms / 1000  # 0: off
        self._monotonic_s = monotonic_s
        self._store_failing_over = store_failing_over
        self._store_failovers = store_failovers
        self._failovers_seen = 0
        self._held_s = float("-inf")  # the last time the store client was seen failing over
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[PendingPut] = deque()
        self._queued_bytes = 0
        self._idle = False  # the dispatcher thread is waiting for work: notify it
        self._dispatching = False  # a batch is being sent (by a leader or the dispatcher thread)
        self._closed = False
        self._thread: threading.Thread | None = None
        # Written by whoever is dispatching (one at a time).
        self._put_calls = 0
        self._messages = 0
        self._batches = 0
        self._isolated_batches = 0
        self._batch_messages_peak = 0
        self._shed = 0

    # -- producers' side ---------------------------------------------------------------------
    def submit(self, message: MessageToPut) -> PendingPut:
        """Queue one message (:meth:`submit_many` of one); raises what it would put in its place."""
        [pending] = self.submit_many([message])
        if isinstance(pending, BrokerError):
            raise pending
        return pending  # its sender's ``wait`` leads, or waits for the batch in flight

    def submit_many(self, messages: list[MessageToPut]) -> list[PendingPut | BrokerError]:
        """``submit`` for each message of one request, taking the lock once. A message that
        does not fit the queue gets TOO_MANY_REQUESTS in its place (and so do the ones after
        it, whose order must not pass it); the rest are queued together, in order."""
        now_s = self._monotonic_s()
        lead = self.lead
        pendings = [PendingPut(message, now_s, lead) for message in messages]
        out: list[PendingPut | BrokerError] = []
        with self._cond:
            if self._closed:
                error = StoreCallError("the broker is shutting down")
                return [error] * len(pendings)
            queue = self._queue
            for pending in pendings:
                if len(queue) >= self._queue_messages_max or (
                    queue and self._queued_bytes + pending.size_bytes > self._queue_bytes_max
                ):
                    full = FlowControlError(
                        f"too many sends waiting for the store ({len(queue)} messages, {self._queued_bytes} bytes)",
                        Code.TOO_MANY_REQUESTS,
                    )
                    return out + [full] * (len(pendings) - len(out))
                queue.append(pending)
                self._queued_bytes += pending.size_bytes
                out.append(pending)
        return out

    def lead(self, pending: PendingPut, timeout_s: float) -> None:
        """Called by a waiter: while nobody else is sending, send what is queued on this thread,
        batch after batch, until ``pending`` is done (or nothing is left for it to send). The
        store calls made here end by the waiter's deadline (``timeout_s`` from now): a group
        whose master just died must not hold the sender past it."""
        deadline_s = self._monotonic_s() + timeout_s
        while not pending.done:
            with self._cond:
                if self._dispatching or self._closed:
                    return  # the batch in flight completes us, or the next one does
                stale = self._shed_stale_locked()
                batch = self._take_batch_locked() if self._queue else []
                self._dispatching = bool(batch)
            self._fail_stale(stale)
            if not batch:
                return
            try:
                self._put_batch(batch, deadline_s)
            finally:
                self._release()

    def _release(self) -> None:
        """End a dispatch; hand what is still queued to the dispatcher thread."""
        with self._cond:
            self._dispatching = False
            if self._queue and self._idle:
                self._idle = False
                self._cond.notify()

    # -- the dispatcher --------------------------------------------------------------------
    def start(self) -> None:
        assert self._thread is None
        self._thread = threading.Thread(target=self._run, name="put-dispatcher", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> None:
        """Refuse new sends, let the dispatcher drain what is queued, then stop it."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._cond:  # whatever the dispatcher could not send in time
            left, self._queue = list(self._queue), deque()
            self._queued_bytes = 0
        for pending in left:
            pending.fail(StoreCallError("the broker is shutting down"))

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed and not self._queue:
                    return
            try:
                self.run_once(DISPATCH_IDLE_WAIT_S)
            except Exception:  # never let the dispatcher die; waiters were failed
                log.exception("put dispatcher iteration failed")

    def run_once(self, wait_s: float = 0.0) -> int:
        """Send one batch of what is queued (waiting up to wait_s for some, or for a leader to
        finish); messages sent."""
        with self._cond:
            if (not self._queue or self._dispatching) and not self._closed:
                self._idle = True
                self._cond.wait(wait_s)
                self._idle = False
            if self._dispatching:
                return 0
            stale = self._shed_stale_locked()
            batch = self._take_batch_locked() if self._queue else []
            self._dispatching = bool(batch)
        self._fail_stale(stale)
        if batch:
            try:
                self._put_batch(batch)  # no sender's deadline here: the store client's own
            finally:
                self._release()
        return len(batch)

    def _fail_stale(self, stale: list[PendingPut]) -> None:
        for pending in stale:
            pending.fail(
                FlowControlError(
                    f"waited over {self._queue_wait_max_s * 1000:.0f} ms for the store; not sent (TIMEOUT_CLEAN_QUEUE)",
                    Code.TOO_MANY_REQUESTS,
                )
            )

    def _shed_stale_locked(self) -> list[PendingPut]:
        """Sends queued longer than ``queue_wait_max_ms`` (RocketMQ's waitTimeMillsInSendQueue):
        refused before they reach the store, so their TOO_MANY_REQUESTS is a definite failure."""
        if not self._queue_wait_max_s:
            return []
        now = self._monotonic_s()
        failovers = self._store_failovers()
        if self._store_failing_over() or failovers != self._failovers_seen:
            # A failover holds the queue (the store client retries within its own bound): what
            # waited through it is not stale, its wait counts from the failover's end.
            self._failovers_seen = failovers
            self._held_s = now
            return []
        stale: list[PendingPut] = []
        cutoff = now - self._queue_wait_max_s
        while self._queue and max(self._queue[0].enqueued_s, self._held_s) < cutoff:
            pending = self._queue.popleft()
            self._queued_bytes -= pending.size_bytes
            stale.append(pending)
        self._shed += len(stale)
        return stale

    def _take_batch_locked(self) -> list[PendingPut]:
        queue = self._queue
        first = queue.popleft()
        batch = [first]
        size = first.size_bytes
        flag = first.message.allow_system_topic
        while queue and len(batch) < self._batch_messages_max:
            head = queue[0]
            if head.message.allow_system_topic is not flag or size + head.size_bytes > self._batch_bytes_max:
                break
            batch.append(queue.popleft())
            size += head.size_bytes
        self._queued_bytes -= size
        return batch

    def _put_batch(self, batch: list[PendingPut], deadline_s: float | None = None) -> None:
        self._batches += 1
        self._batch_messages_peak = max(self._batch_messages_peak, len(batch))
        outcomes = self._call_store(batch, deadline_s)
        if outcomes is None:
            return
        if len(batch) > 1 and refused_as_a_whole(outcomes):
            # One message sank the batch: re-put each alone, in order, so only it fails.
            self._isolated_batches += 1
            log.warning(
                "store refused a batch of %d as a whole (%s: %s); re-putting one by one",
                len(batch),
                outcomes[0].status.name,
                outcomes[0].error,
            )
            for pending in batch:
                single = self._call_store([pending], deadline_s)
                if single is not None:
                    pending.complete(single[0])
                    self._messages += 1
            return
        for pending, outcome in zip(batch, outcomes):
            pending.complete(outcome)
        self._messages += len(batch)

    def _call_store(self, batch: list[PendingPut], deadline_s: float | None = None) -> list[PutOutcome] | None:
        """The outcomes, or None after failing every waiter of the batch."""
        self._put_calls += 1
        timeout_s = None if deadline_s is None else max(0.0, deadline_s - self._monotonic_s())
        try:
            outcomes = self._store_put([p.message for p in batch], batch[0].message.allow_system_topic, timeout_s)
            if len(outcomes) != len(batch):
                raise StoreCallError(f"the store answered {len(outcomes)} results for {len(batch)} messages")
        except FAILURES as exc:
            error = as_broker_error(exc)
        except Exception as exc:  # a bug in the client; fail the waiters, keep going
            log.exception("PutMessages failed unexpectedly")
            error = StoreCallError(f"store call failed: {type(exc).__name__}: {exc}")
        else:
            return outcomes
        for pending in batch:
            pending.fail(error)
        return None

    def stats(self) -> CoalescerStats:
        return CoalescerStats(
            put_calls=self._put_calls,
            messages=self._messages,
            batches=self._batches,
            isolated_batches=self._isolated_batches,
            batch_messages_max=self._batch_messages_peak,
            queued_messages=len(self._queue),
            shed=self._shed,
        )
