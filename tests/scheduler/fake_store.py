"""An in-memory ``SchedulerStore`` on a ManualClock: queues, records, delay offsets.

Behaves like the store's gRPC API where the scheduler depends on it: GetMessages statuses,
store timestamps from the clock, records addressed by CommitLog offset. ``down`` makes every
call raise StoreUnavailableError; ``outcome`` may override the status of a put;
``after_put`` runs after each put (a test can "crash" there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from services.domain.statuses import GetStatus, PutStatus
from services.runtime.clock import ManualClock
from services.store.client.errors import StoreUnavailableError
from services.store.client.model import GetOutcome, PutOutcome, StoredMessage, StoreMessage

RECORD_OVERHEAD_BYTES = 100


@dataclass
class FakeStore:
    clock: ManualClock
    queues: dict[tuple[str, int], list[int]] = field(default_factory=dict)
    records: dict[int, StoredMessage] = field(default_factory=dict)
    delay_offsets: dict[int, int] = field(default_factory=dict)
    next_phy_offset: int = 0
    down: bool = False
    outcome: Callable[[StoreMessage], PutStatus] | None = None
    after_put: Callable[[list[StoreMessage]], None] | None = None
    put_calls: int = 0

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailableError("fake store is down")

    # -- writes ---------------------------------------------------------------------------------
    def put_messages(self, messages: list[StoreMessage], allow_system_topics: bool = False) -> list[PutOutcome]:
        self._check()
        self.put_calls += 1
        outcomes = []
        for message in messages:
            status = self.outcome(message) if self.outcome else PutStatus.PUT_OK
            if status is not PutStatus.PUT_OK:
                outcomes.append(PutOutcome(status, error=f"fake {status.name}"))
                continue
            record = self.append(message)
            outcomes.append(
                PutOutcome(PutStatus.PUT_OK, queue_offset=record.queue_offset, phy_offset=record.phy_offset)
            )
        if self.after_put is not None:
            self.after_put(messages)
        return outcomes

    def append(self, message: StoreMessage) -> StoredMessage:
        queue = self.queues.setdefault((message.topic, message.queue_id), [])
        size = (
            RECORD_OVERHEAD_BYTES + len(message.body) + sum(len(k) + len(v) + 2 for k, v in message.properties.items())
        )
        record = StoredMessage(
            topic=message.topic,
            queue_id=message.queue_id,
            body=message.body,
            properties=dict(message.properties),
            queue_offset=len(queue),
            phy_offset=self.next_phy_offset,
            store_size_bytes=size,
            store_timestamp_ms=self.clock.now_ms(),
            sys_flag=message.sys_flag,
            flag=message.flag,
            born_timestamp_ms=message.born_timestamp_ms,
            born_host=message.born_host,
            reconsume_times=message.reconsume_times,
        )
        self.next_phy_offset += size
        self.records[record.phy_offset] = record
        queue.append(record.phy_offset)
        return record

    # -- reads ----------------------------------------------------------------------------------
    def get_messages(self, topic: str, queue_id: int, queue_offset: int, max_count: int) -> GetOutcome:
        self._check()
        queue = self.queues.get((topic, queue_id), [])
        max_offset = len(queue)
        if max_offset == 0:
            return GetOutcome(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, 0, 0)
        if queue_offset == max_offset:
            return GetOutcome(GetStatus.OFFSET_OVERFLOW_ONE, [], queue_offset, 0, max_offset)
        if queue_offset > max_offset:
            return GetOutcome(GetStatus.OFFSET_OVERFLOW_BADLY, [], max_offset, 0, max_offset)
        end = min(max_offset, queue_offset + max_count)
        records = [self.records[phy] for phy in queue[queue_offset:end]]
        return GetOutcome(GetStatus.FOUND, records, end, 0, max_offset)

    def look_messages(self, refs: list[tuple[int, int]]) -> dict[int, StoredMessage]:
        self._check()
        return {
            offset: self.records[offset]
            for offset, size in refs
            if offset in self.records and self.records[offset].store_size_bytes == size
        }

    def queue_offsets(self, topic: str, queue_id: int) -> tuple[int, int]:
        self._check()
        return 0, len(self.queues.get((topic, queue_id), []))

    def get_delay_offset(self, level: int) -> int:
        self._check()
        return self.delay_offsets.get(level, 0)

    def update_delay_offset(self, level: int, offset: int) -> None:
        self._check()
        self.delay_offsets[level] = offset

    # -- test helpers -----------------------------------------------------------------------
    def messages(self, topic: str, queue_id: int | None = None) -> list[StoredMessage]:
        return [
            self.records[phy]
            for (t, q), queue in sorted(self.queues.items())
            if t == topic and (queue_id is None or q == queue_id)
            for phy in queue
        ]
