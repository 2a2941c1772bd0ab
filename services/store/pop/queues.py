"""The pop engine's per-queue state (``PopService``'s base: pop/service.py has the API, the reads
and the revive hooks): each (group, source topic, queue)'s ``QueueState`` and its in-flight
entries, the committed offset they move, the receipt handles they issue, and the journal
(pop/journal.py) their changes go to, with the restore from it. Everything here runs under
``_lock`` (the ``_locked`` methods) or takes it."""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable

from services.domain.format.pop_journal_format import Finished, Reset
from services.domain.lite import LITE_TOPIC_PREFIX, split_lmq_name
from services.store.errors import StoreNotRunningError
from services.store.metadata.config_files import always_writable
from services.store.metadata.consumer_offsets import ConsumerOffsetManager
from services.store.metadata.topic_config import TopicConfigManager
from services.store.pop.journal import Item, JournalTicket, PopJournal, read_journal
from services.store.pop.receipt_handle import ReceiptHandle
from services.store.pop.restore import delivery_of, image_of, rebuild
from services.store.pop.revive import GetMessages, InFlight, QueueKey, ReviveSchedule
from services.store.pop.state import QueueState

log = logging.getLogger(__name__)

FINISHED_HANDLES_MAX = 65_536  # acked handles remembered for a repeated ack (about 6 MB)


class PopQueues:
    def __init__(
        self,
        *,
        get_messages: GetMessages,
        init_offset: Callable[[str, int], int],
        max_offset_in_queue: Callable[[str, int], int],
        topics: TopicConfigManager,
        consumer_offsets: ConsumerOffsetManager,
        is_running: Callable[[], bool],
        check_writable: Callable[[], None] = always_writable,
        journal: PopJournal | None = None,
    ) -> None:
        self._get_messages = get_messages
        self._init_offset = init_offset
        self._max_offset = max_offset_in_queue
        self._topics = topics
        self._consumer_offsets = consumer_offsets
        self._is_running = is_running
        self.check_writable = check_writable  # the store's: raises NotMasterWriteError unless the writable master
        self._lock = threading.Lock()
        self._queues: dict[QueueKey, QueueState] = {}
        self._schedule = ReviveSchedule(self._live_entries_locked)  # under _lock
        self._sequence = 0
        self._incarnation = secrets.token_hex(4)
        # The journal (pop/journal.py): what changed under _lock, appended before it is released.
        self._journal = journal
        self._journaled: list[Item] = []
        # (group, handle) of deliveries acked lately: an ack repeated (a broker retrying it on a
        # new master after the first reached the old one) is answered OK, as RocketMQ does.
        self._finished_handles: OrderedDict[tuple[str, str], None] = OrderedDict()
        if journal is not None:
            journal.bind(self.journal_snapshot)

    # -- per-queue state ------------------------------------------------------------------------
    def _state_locked(self, key: QueueKey) -> QueueState:
        group, source, queue_id = key
        seen = self._consumer_offsets.query_offset(group, source, queue_id)
        state = self._queues.get(key)
        if state is None:
            start, seen = self._start_locked(key, seen)
            state = self._queues[key] = QueueState(committed=start, seen=seen)
        elif seen != state.seen:
            log.info("%s: committed offset changed from %d to %d outside pop; pop state reset", key, state.seen, seen)
            start, seen = self._start_locked(key, seen)
            self._reset_locked(key, state, start, commit=False)
            state.seen = seen
        return state

    def _start_locked(self, key: QueueKey, seen: int) -> tuple[int, int]:
        """(where the queue's pop state starts, the committed offset now) for committed ``seen``;
        a group new to the queue (-1) starts at ``init_offset``, committed if the topic exists."""
        if seen >= 0:
            return seen, seen
        group, source, queue_id = key
        offset = self._init_offset(source, queue_id)
        if self._topics.get(source) is None:
            return offset, seen
        self._consumer_offsets.commit_offset(group, source, queue_id, offset)
        log.info("%s: group new to the queue starts at offset %d", key, offset)
        return offset, offset

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Set the group's committed offset from outside pop (CommitConsumerOffset, an admin
        reset): under the pop lock, so no ack in progress writes its own over it."""
        self.check_writable()
        key = (group, topic, queue_id)
        with self._lock:
            self._consumer_offsets.commit_offset(group, topic, queue_id, offset)
            if (state := self._queues.get(key)) is not None:
                self._reset_locked(key, state, offset, commit=False)  # its in-flight handles die
                state.seen = offset
            elif self._journal is not None and topic.startswith(LITE_TOPIC_PREFIX):
                self._journaled.append(Reset(*key, offset))  # lite offsets reach the replicas by the journal
            # (A queue without pop state, a pull consumer's or txcheck's: the table, persisted and
            # replicated as before; no journal write to wait for.)
            ticket = self._journal_locked()
        if ticket is not None:
            ticket.wait()

    def _reset_locked(self, key: QueueKey, state: QueueState, offset: int, commit: bool) -> None:
        if self._journal is not None:
            self._journaled.append(Reset(*key, offset))
        state.committed = offset
        state.cursors.clear()
        state.done.clear()
        state.in_flight.clear()
        state.redeliver.clear()
        if commit:
            self._commit_locked(key, state)

    def _skip_to_locked(self, key: QueueKey, state: QueueState, min_offset: int) -> None:
        """Retention removed everything below ``min_offset``: nothing there can be delivered."""
        if min_offset <= state.committed:
            return
        state.committed = min_offset
        state.done = {o for o in state.done if o >= min_offset}
        for cursor_topic, cursor in state.cursors.items():
            state.cursors[cursor_topic] = max(cursor, min_offset)
        self._advance_locked(key, state)
        self._commit_locked(key, state)

    def _mark_done_locked(self, state: QueueState, offset: int) -> None:
        if offset >= state.committed:
            state.done.add(offset)

    def _advance_locked(self, key: QueueKey, state: QueueState) -> None:
        committed = state.committed
        done = state.done
        while committed in done:
            done.remove(committed)
            committed += 1
        if committed != state.committed:
            state.committed = committed
            self._commit_locked(key, state)

    def _commit_locked(self, key: QueueKey, state: QueueState) -> None:
        group, source, queue_id = key
        self._consumer_offsets.commit_offset(group, source, queue_id, state.committed)
        state.seen = state.committed

    # -- in-flight entries ----------------------------------------------------------------------
    def _issue_locked(self, entry: InFlight, now_ms: int, invisible_ms: int) -> None:
        """A new handle for ``entry`` (delivery or change of invisible time), scheduled for revive."""
        self._sequence += 1
        entry.sequence = self._sequence
        entry.pop_time_ms = now_ms
        entry.invisible_ms = invisible_ms
        entry.revive_at_ms = now_ms + invisible_ms
        entry.handle = ReceiptHandle(
            entry.key[1], entry.key[2], entry.queue_offset, now_ms, invisible_ms, self._incarnation, entry.sequence
        ).encode()
        entry.incarnation = self._incarnation
        self._schedule.push(entry)
        if self._journal is not None:
            self._journaled.append(delivery_of(entry))

    def _live_entries_locked(self) -> list[InFlight]:
        return [e for s in self._queues.values() for e in s.in_flight.values() if not e.claimed]

    def _find_locked(self, group: str, topic: str, receipt_handle: str, now_ms: int) -> InFlight | None:
        """The live, unexpired entry ``receipt_handle`` names for ``group``, or None."""
        handle = ReceiptHandle.decode(receipt_handle)
        if handle is None or handle.expire_ms <= now_ms:
            return None
        state = self._queues.get((group, handle.source_topic, handle.queue_id))
        entry = state.in_flight.get(handle.queue_offset) if state is not None else None
        if entry is None or entry.claimed or entry.handle != receipt_handle:
            return None
        lite = split_lmq_name(handle.source_topic)  # a lite topic's message: its parent names it too
        if topic not in (entry.topic, handle.source_topic) and (lite is None or lite[0] != topic):
            return None
        return entry

    def _finish_locked(self, entry: InFlight, journaled: bool = False) -> QueueKey | None:
        """The entry's offset is done; returns its queue's key if that unlocked a FIFO queue.
        ``journaled``: its record was written already (``_journal_finish_locked``)."""
        state = self._queues.get(entry.key)
        if state is None or state.in_flight.get(entry.queue_offset) is not entry:
            return None  # the queue's pop state was reset meanwhile
        del state.in_flight[entry.queue_offset]
        self._mark_done_locked(state, entry.queue_offset)
        self._advance_locked(entry.key, state)
        if self._journal is not None and not journaled:
            self._journaled.append(Finished(*entry.key, entry.queue_offset, state.committed, False))
        if not entry.fifo or state.in_flight:
            return None
        # Unlocked: worth announcing only with something to deliver (a later arrival announces itself).
        ahead = state.redeliver or min(state.cursors.values(), default=0) < self._max_offset(*entry.key[1:])
        if entry.key[1].startswith(LITE_TOPIC_PREFIX):
            self._forget_idle_locked(entry.key)
        return entry.key if ahead else None

    def _forget_idle_locked(self, key: QueueKey) -> None:
        """Drop a lite topic's state once nothing is pending and its offset is stored (it comes
        back from the offset): a group on a million lite topics keeps state only where in flight."""
        state = self._queues.get(key)
        if state is None or state.in_flight or state.redeliver or state.done or state.seen != state.committed:
            return
        if all(cursor <= state.committed for cursor in state.cursors.values()):
            del self._queues[key]

    def _expire_fifo_locked(self, state: QueueState, now_ms: int, deliveries_max: int) -> None:
        """Move expired FIFO entries with deliveries left to ``redeliver`` (the revive service
        would do the same a little later); exhausted ones wait for it to go to the DLQ."""
        if not state.in_flight:
            return
        for offset, entry in list(state.in_flight.items()):
            due = entry.revive_at_ms <= now_ms and entry.delivery_attempt < deliveries_max
            if due and entry.fifo and not entry.claimed:
                del state.in_flight[offset]
                state.redeliver[offset] = entry

    def forget(self) -> None:
        """This replica's role changed: drop every queue's pop state (a new master then
        ``restore``s it from the journal). Without a journal, in-flight handles die and pops start
        again from the committed offsets (a new master's: the replicated ones)."""
        with self._lock:
            self._queues.clear()
            if self._journal is not None:
                self._journal.idle()

    # -- the journal (pop/journal.py, pop/restore.py) ------------------------------------------
    def restore(self) -> None:
        """This replica is about to write as master (elected, or a master started): take the
        pop state the journal holds, from its last snapshot on, so the deliveries in flight keep
        their handles and nothing acknowledged is delivered again."""
        if self._journal is None:
            return
        records, snapshot_offset = read_journal(self._get_messages, self._max_offset)
        with self._lock:
            states, sequence, finished = rebuild(records, self._consumer_offsets.query_offset)
            for group_handle in finished:
                self._remember_finished_locked(*group_handle)
            for (group, source, queue_id), state in states.items():
                if self._consumer_offsets.query_offset(group, source, queue_id) != state.committed:
                    self._consumer_offsets.commit_offset(group, source, queue_id, state.committed)
            self._queues = states
            self._sequence = max(self._sequence, sequence)
            self._schedule = ReviveSchedule(self._live_entries_locked)
            for entry in self._live_entries_locked():
                self._schedule.push(entry)
            self._journaled.clear()
            self._journal.new_term(snapshot_offset)
        in_flight = sum(len(s.in_flight) + len(s.redeliver) for s in states.values())
        log.info(
            "pop state restored from the journal: %d records from offset %d, %d queues, %d in flight",
            len(records),
            snapshot_offset,
            len(states),
            in_flight,
        )

    def journal_snapshot(self) -> None:
        """Append the whole pop state to the journal (its writer asks, now and then)."""
        if self._journal is None:
            return
        with self._lock:
            images = [image_of(key, state) for key, state in self._queues.items()]
            self._journal.append_snapshot(self._sequence, images)

    def _journal_finish_locked(self, claimed: list[InFlight]) -> JournalTicket | None:
        """Journal the finish of claimed entries before it is applied (an ack: its entries are
        finished only once the record is written, and stay in flight if it cannot be). Each
        record names the committed offset the queue will have if every one of them finishes,
        counting no other claimed entry: a replay never moves the offset past one not done."""
        if self._journal is None or not claimed:
            return None
        self._journal_locked()  # what this section changed before, first
        offsets: dict[QueueKey, set[int]] = {}
        for entry in claimed:
            offsets.setdefault(entry.key, set()).add(entry.queue_offset)
        after: dict[QueueKey, int] = {}
        for key, finishing in offsets.items():
            state = self._queues[key]
            committed = state.committed
            while committed in state.done or committed in finishing:
                committed += 1
            after[key] = committed
        ticket = self._journal.append([Finished(*e.key, e.queue_offset, after[e.key], True) for e in claimed])
        for entry in claimed:
            entry.finishing = ticket  # a snapshot taken meanwhile counts it finished (it comes after)
        return ticket

    def _remember_finished_locked(self, group: str, handle: str) -> None:
        handles = self._finished_handles
        handles[(group, handle)] = None
        if len(handles) > FINISHED_HANDLES_MAX:
            handles.popitem(last=False)

    def _was_acked_locked(self, group: str, handle: str) -> bool:
        return (group, handle) in self._finished_handles

    def _unclaim_locked(self, claimed: list[InFlight]) -> None:
        for entry in claimed:
            entry.claimed = False
            entry.finishing = None
            state = self._queues.get(entry.key)
            if state is not None and state.in_flight.get(entry.queue_offset) is entry:
                self._schedule.push(entry)  # its revive time may have passed while claimed

    def _journal_locked(self) -> JournalTicket | None:
        """Hand what this locked section changed to the journal, in order."""
        if self._journal is None or not self._journaled:
            return None
        ticket = self._journal.append(self._journaled)
        self._journaled = []
        return ticket

    def _check_running(self) -> None:
        if not self._is_running():
            raise StoreNotRunningError("the store is not running")
        self.check_writable()
