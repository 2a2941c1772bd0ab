"""A real store for tests, with the controls a test needs to make it misbehave.

``StoreDouble`` is a ``StoreClient`` over a started ``FileStore`` (``small_config``, the test's
clock, so store timestamps follow manual time) through the store's own servicer, as
``LocalStoreClient``; its transport (``ControlledTransport``, a ``LocalTransport``) adds:

* ``down``: every call raises ``StoreUnavailableError`` (the store cannot be reached);
* ``outcome``: a function pb.Message -> PutStatus; a put with a message it answers other than
  PUT_OK is refused as the store refuses a batch: all or nothing, one status and error for the
  whole batch and no offsets (a status whose gRPC code is UNAVAILABLE fails the call, as the
  servicer does; FLUSH_DISK_TIMEOUT is appended, then reported);
* ``after_put``: called with the request's messages after a put was appended; it may raise
  (a reply lost after the store appended);
* ``puts``: what every PutMessages call that reached the store carried (``down`` and
  ``fail_after`` stop a call before; ``outcome`` refuses it after), in order:
  ``(messages, allow_system_topics)``, the messages as ``MessageToPut``s read back from the
  request (each ``allow_system_topic`` is the call's flag, the only one the store gets);
  ``sent`` is every message of them in order and ``put_calls`` their count.
* ``requests``: every unary call, stream and put that reached the store (as ``puts``: ``down``
  and ``fail_after`` stop a call before, ``outcome`` refuses a put after), in order, as
  ``(method, request)`` with the request as the client sent it; ``requests_of(method)`` is the
  requests of one method (how many pops a receive made, which handles an ack carried, which
  reads a pull asked for).
* ``fail_after``: n lets the next n calls through (every unary call, stream and put counts) and
  fails every later one with ``StoreUnavailableError``, before it reaches the store, until set
  back to None (the client's process crashing at that call); None: no limit.

After every appended put the store's reput runs at once, so reads see the messages (no waiting
for the dispatch thread). The pop revive loop is halted: nothing is redelivered in the
background (a test that wants redelivery runs ``file_store.pop.revive.run_once()``).

Test helpers, which bypass the controls and are not in ``puts`` (a producer still reaches a
store the scheduler cannot): ``append(message)`` (a put with system topics allowed; the stored
record), ``messages(topic, queue_id=None)`` (every stored message of a topic, queue by queue in
queue order) and ``delay_offsets`` (level -> offset, for the levels ever set). Topics are
auto-created on their first put (8 queues), as RocketMQ's autoCreateTopicEnable; a test that
needs a topic or a group of its own makes it with the client's admin calls (``create_topic``,
``update_topic``, ``update_group``). Retention and the disk-use limits are off, so a clock moved
days ahead deletes nothing; keyword arguments to ``StoreDouble`` override the config (e.g.
``file_reserved_time_hours`` to turn retention on, run by ``file_store.clean.run_once()``).

It is the ``store`` fixture of the scheduler tests and of the broker core tests
(tests/scheduler/conftest.py, tests/broker/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from pyrmq.store.v1 import store_pb2 as pb

from services.domain.statuses import PutStatus
from services.runtime.clock import Clock
from services.store.client.client import StoreClient
from services.store.client.errors import StoreError, StoreUnavailableError, error_for_status
from services.store.client.model import MessageToPut, StoredMessage
from services.store.client.transport import LocalTransport, Stream
from services.store.config import StoreConfig
from services.store.rpc.servicer import StoreServicer
from services.store.rpc.status import PUT_STATUS_TO_GRPC
from services.store.store import FileStore
from tests.support.filestore import small_config

GET_BATCH_MAX = 1024
Outcome = Callable[[Any], PutStatus]  # pb.Message (topic, queue_id, body, properties ...) -> status
AfterPut = Callable[[list[Any]], None]  # the appended pb.Messages
SentPut = tuple[list[MessageToPut], bool]  # one PutMessages as it reached the store: (messages, allow_system_topics)
_APPENDED = (pb.PUT_OK, pb.FLUSH_DISK_TIMEOUT)


def double_config(root: Path, **overrides: Any) -> StoreConfig:
    """``small_config`` with topics auto-created and no retention or disk-use limits."""
    values: dict[str, Any] = dict(
        auto_create_topic_enable=True,
        file_reserved_time_hours=1_000_000.0,
        disk_max_used_space_ratio=1.0,
        disk_space_clean_forcibly_ratio=1.0,
        disk_space_warning_level_ratio=1.0,
    )
    values.update(overrides)
    return small_config(root, **values)


def sent_message(message: Any, allow_system_topics: bool) -> MessageToPut:
    """A request's pb.Message as the ``MessageToPut`` the client built it from (the call's flag
    as its ``allow_system_topic``)."""
    return MessageToPut(
        topic=message.topic,
        queue_id=message.queue_id,
        body=message.body,
        properties=dict(message.properties),
        sys_flag=message.sys_flag,
        born_timestamp_ms=message.born_timestamp_ms,
        born_host=message.born_host,
        reconsume_times=message.reconsume_times,
        prepared_transaction_offset=message.prepared_transaction_offset,
        flag=message.flag,
        allow_system_topic=allow_system_topics,
    )


class ControlledTransport(LocalTransport):
    """``LocalTransport`` over the store's servicer, with ``down``, ``outcome``, ``after_put``,
    ``fail_after`` and the records of ``puts`` and ``requests``."""

    def __init__(self, servicer: StoreServicer, file_store: FileStore) -> None:
        super().__init__(servicer)
        self._file_store = file_store
        self.down = False
        self.outcome: Outcome | None = None
        self.after_put: AfterPut | None = None
        self.puts: list[SentPut] = []
        self.requests: list[tuple[str, Any]] = []  # (method, request) of every call that reached the store
        self.fail_after: int | None = None  # calls still let through; None: no limit

    @property
    def put_calls(self) -> int:
        return len(self.puts)

    def _check_up(self, method: str) -> None:
        if self.down:
            raise StoreUnavailableError(
                f"store failed {method}: UNAVAILABLE the test took the store down", "UNAVAILABLE"
            )

    def _reach(self, method: str) -> None:
        """A call, stream or put on its way to the store: ``down`` and ``fail_after`` apply."""
        self._check_up(method)
        if self.fail_after is not None:
            if self.fail_after <= 0:
                raise StoreUnavailableError(
                    f"store failed {method}: UNAVAILABLE the test cut the client off", "UNAVAILABLE"
                )
            self.fail_after -= 1

    def call(self, method: str, request: Any, timeout_s: float | None = None) -> Any:
        self._reach(method)
        self.requests.append((method, request))
        return super().call(method, request, timeout_s)

    def stream(self, method: str, request: Any) -> Stream:
        self._reach(method)
        self.requests.append((method, request))
        return super().stream(method, request)

    def wait_ready(self, timeout_s: float, give_up: Callable[[], bool], clock: Clock) -> bool:
        self._check_up("wait_ready")
        return super().wait_ready(timeout_s, give_up, clock)

    def put(self, request: pb.PutMessagesRequest, timeout_s: float | None = None) -> pb.PutMessagesResponse:
        self._reach("PutMessages")
        self.requests.append(("PutMessages", request))
        flag = request.allow_system_topics
        self.puts.append(([sent_message(m, flag) for m in request.messages], flag))
        status, error = self._chosen_outcome(request.messages)
        if status is not PutStatus.PUT_OK and status is not PutStatus.FLUSH_DISK_TIMEOUT:
            return self._refused(request, status, error)
        response: pb.PutMessagesResponse = super().call("PutMessages", request)
        appended = response.batch.status in _APPENDED if request.batch_results else bool(response.results)
        if request.batch_results and appended and status is PutStatus.FLUSH_DISK_TIMEOUT:
            response.batch.status = pb.FLUSH_DISK_TIMEOUT  # appended, not flushed in time
        if appended:
            reput = self._file_store.reput
            assert reput is not None, "the store is started"
            reput.run_once()
            if self.after_put is not None:
                self.after_put(list(request.messages))
        return response

    def _chosen_outcome(self, messages: Sequence[Any]) -> tuple[PutStatus, str]:
        """The status ``outcome`` gives the batch: that of its first message not answered
        PUT_OK (FLUSH_DISK_TIMEOUT only if nothing is refused), with the store's error text."""
        if self.outcome is None:
            return PutStatus.PUT_OK, ""
        result = PutStatus.PUT_OK, ""
        for i, message in enumerate(messages):
            status = self.outcome(message)
            if status is PutStatus.PUT_OK:
                continue
            if status is PutStatus.FLUSH_DISK_TIMEOUT:
                result = status, ""
                continue
            error = f"the test refused {message.topic}-{message.queue_id} ({status.name})"
            return status, error if len(messages) == 1 else f"message {i} of the batch: {error}; nothing written"
        return result

    @staticmethod
    def _refused(request: pb.PutMessagesRequest, status: PutStatus, error: str) -> pb.PutMessagesResponse:
        """What the servicer answers for a batch the store refused as a whole."""
        if request.messages and PUT_STATUS_TO_GRPC[status] is grpc.StatusCode.UNAVAILABLE:
            raise error_for_status(grpc.StatusCode.UNAVAILABLE, f"store refused the batch: {error}", "PutMessages")
        code = pb.PutStatus.Value(status.name)
        if request.batch_results:
            return pb.PutMessagesResponse(batch=pb.PutBatchResult(status=code, error=error))
        refused = pb.PutResult(status=code, phy_offset=-1, queue_offset=-1, error=error)
        return pb.PutMessagesResponse(results=[refused for _ in request.messages])


class StoreDouble(StoreClient):
    """A started FileStore behind a ``StoreClient`` with test controls; ``close`` shuts it down."""

    def __init__(self, root: Path, clock: Clock, **config_overrides: Any) -> None:
        self.clock = clock
        self.file_store = FileStore(double_config(root, **config_overrides), clock)
        self.file_store.start()
        self.file_store.pop.revive.halt()  # no background redelivery
        servicer = StoreServicer(self.file_store)
        self.transport = ControlledTransport(servicer, self.file_store)
        super().__init__(self.transport)
        self._direct = StoreClient(LocalTransport(servicer))  # the helpers' way in: no controls

    def close(self) -> None:
        super().close()
        self.file_store.shutdown()

    # -- controls (on the transport) --------------------------------------------------------
    @property
    def down(self) -> bool:
        return self.transport.down

    @down.setter
    def down(self, value: bool) -> None:
        self.transport.down = value

    @property
    def outcome(self) -> Outcome | None:
        return self.transport.outcome

    @outcome.setter
    def outcome(self, value: Outcome | None) -> None:
        self.transport.outcome = value

    @property
    def after_put(self) -> AfterPut | None:
        return self.transport.after_put

    @after_put.setter
    def after_put(self, value: AfterPut | None) -> None:
        self.transport.after_put = value

    @property
    def put_calls(self) -> int:
        return self.transport.put_calls

    @property
    def puts(self) -> list[SentPut]:
        """``(messages, allow_system_topics)`` of every PutMessages that reached the store."""
        return self.transport.puts

    @property
    def sent(self) -> list[MessageToPut]:
        """Every message of ``puts``, in the order sent (refused ones too)."""
        return [message for messages, _ in self.transport.puts for message in messages]

    @property
    def requests(self) -> list[tuple[str, Any]]:
        """``(method, request)`` of every call, stream and put that reached the store."""
        return self.transport.requests

    def requests_of(self, method: str) -> list[Any]:
        """The requests of ``method`` (e.g. "PopMessages") that reached the store, in order."""
        return [request for name, request in self.transport.requests if name == method]

    @property
    def fail_after(self) -> int | None:
        return self.transport.fail_after

    @fail_after.setter
    def fail_after(self, value: int | None) -> None:
        self.transport.fail_after = value

    # -- helpers (no controls) --------------------------------------------------------------
    def append(self, message: MessageToPut) -> StoredMessage:
        """Put one message (system topics allowed), dispatch it, and return the stored record."""
        [outcome] = self._direct.put_messages([message], allow_system_topics=True)
        if outcome.status is not PutStatus.PUT_OK:
            raise StoreError(
                f"the store refused {message.topic}-{message.queue_id}: {outcome.status.name} {outcome.error}"
            )
        reput = self.file_store.reput
        assert reput is not None, "the store is started"
        reput.run_once()
        record = self._direct.look_message(outcome.phy_offset)
        assert record is not None, f"no record at {outcome.phy_offset}"
        return record

    def messages(self, topic: str, queue_id: int | None = None) -> list[StoredMessage]:
        """Every stored message of ``topic`` (of one queue if ``queue_id``), queue by queue
        (ascending ids), each queue in queue-offset order."""
        queues = sorted(
            q for t, q in list(self.file_store.cq_store.queues) if t == topic and (queue_id is None or q == queue_id)
        )
        records: list[StoredMessage] = []
        for q in queues:
            offset, end = self._direct.queue_offsets(topic, q)
            while offset < end:
                got = self._direct.get_messages(topic, q, offset, GET_BATCH_MAX)
                if not got.messages:
                    break
                records += got.messages
                offset = got.next_begin_offset
        return records

    @property
    def delay_offsets(self) -> dict[int, int]:
        """Level -> the store's delay offset, for the levels whose offset was ever set."""
        return self.file_store.delay_offsets.offset_table()
