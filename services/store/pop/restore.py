"""The pop state to and from the journal (``pop/journal.py``): ``image_of`` turns a queue's state
into a snapshot's ``QueueImage``, ``delivery_of`` an in-flight entry into a journal ``Delivery``,
and ``rebuild`` replays journal records (from the last snapshot on) into the states a new master,
or a restarted store, carries on from. No locking here: PopService calls them under its lock.

How a replay decides each queue's committed offset: the snapshot's, raised by each finished op's
(the committed offset the old master wrote right after), and at the end raised to the
replicated table's (``query_offset``) unless an offset reset in the replayed window said
otherwise; then over the finished offsets that follow. A queue first met in an op (not in the
snapshot) starts from the table; if the table has none either, from the lowest offset the ops
name. Entries stay exactly as the old master had them, receipt handle included, so a consumer's
ack or change of invisible time after the failover finds its delivery.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from services.domain.format import pop_journal_format as fmt
from services.store.pop.journal import JournalRecord
from services.store.pop.receipt_handle import ReceiptHandle
from services.store.pop.revive import InFlight, QueueKey
from services.store.pop.state import QueueState


def delivery_of(entry: InFlight) -> fmt.Delivery:
    group, source, queue_id = entry.key
    return fmt.Delivery(
        group,
        source,
        queue_id,
        entry.topic,
        entry.fifo,
        entry.queue_offset,
        entry.delivery_attempt,
        entry.sequence,
        entry.pop_time_ms,
        entry.invisible_ms,
        entry.incarnation,
        entry.suspended,
    )


def entry_of(d: fmt.Delivery) -> InFlight:
    key = (d.group, d.source, d.queue_id)
    handle = ReceiptHandle(
        d.source, d.queue_id, d.queue_offset, d.pop_time_ms, d.invisible_ms, d.incarnation, d.sequence
    ).encode()
    return InFlight(
        key,
        d.queue_offset,
        d.topic,
        d.fifo,
        d.delivery_attempt,
        handle,
        d.sequence,
        d.pop_time_ms,
        d.invisible_ms,
        d.pop_time_ms + d.invisible_ms,
        suspended=d.suspended,
        incarnation=d.incarnation,
    )


def image_of(key: QueueKey, state: QueueState) -> fmt.QueueImage:
    """The queue as a snapshot taken now records it: an entry whose ack record is on its way
    (written before the snapshot, which follows it in the journal) counts as finished, unless
    that write failed (the ack then puts it back in flight)."""
    group, source, queue_id = key
    finishing = {o for o, e in state.in_flight.items() if e.finishing is not None and not e.finishing.failed}
    return fmt.QueueImage(
        group,
        source,
        queue_id,
        state.committed,
        tuple(sorted(state.done | {o for o in finishing if o >= state.committed})),
        tuple(delivery_of(e) for o, e in state.in_flight.items() if o not in finishing),
        tuple(delivery_of(e) for e in state.redeliver.values()),
    )


def rebuild(
    records: Iterable[JournalRecord], query_offset: Callable[[str, str, int], int]
) -> tuple[dict[QueueKey, QueueState], int, list[tuple[str, str]]]:
    """The queues' states the records leave, the highest handle sequence they name, and the
    (group, receipt handle) of each delivery they finished (a consumer's ack repeated on the new
    master is answered OK: ``PopQueues.finished_handles``)."""
    states: dict[QueueKey, QueueState] = {}
    finished: list[tuple[str, str]] = []
    reset: set[QueueKey] = set()
    sequence = 0

    def state_for(key: QueueKey) -> QueueState:
        state = states.get(key)
        if state is None:
            committed = query_offset(*key)
            state = states[key] = QueueState(committed=committed, seen=committed)
        return state

    for record in records:
        if isinstance(record, fmt.SnapshotPart):
            if record.part == 0:
                states.clear()
                reset.clear()
            sequence = max(sequence, record.sequence)
            for image in record.queues:
                key = (image.group, image.source, image.queue_id)
                states[key] = QueueState(
                    committed=image.committed,
                    seen=image.committed,
                    done=set(image.finished),
                    in_flight={d.queue_offset: entry_of(d) for d in image.in_flight},
                    redeliver={d.queue_offset: entry_of(d) for d in image.redeliver},
                )
            continue
        for op in record.ops:
            if isinstance(op, fmt.Reset):
                key = (op.group, op.source, op.queue_id)
                states[key] = QueueState(committed=op.offset, seen=op.offset)
                reset.add(key)
                continue
            for item in op:
                state = state_for((item.group, item.source, item.queue_id))
                offset = item.queue_offset
                state.redeliver.pop(offset, None)
                if isinstance(item, fmt.Delivery):
                    state.done.discard(offset)
                    state.in_flight[offset] = entry_of(item)
                    sequence = max(sequence, item.sequence)
                else:
                    entry = state.in_flight.pop(offset, None)
                    if entry is not None and item.acked:  # (a revive's handle stays invalid)
                        finished.append((item.group, entry.handle))
                    state.done.add(offset)
                    state.committed = max(state.committed, item.committed)
    for key, state in list(states.items()):
        if key not in reset:
            state.committed = max(state.committed, query_offset(*key))
        if state.committed < 0:
            named = [*state.in_flight, *state.redeliver, *state.done]
            if not named:
                del states[key]
                continue
            state.committed = min(named)
        state.done = {o for o in state.done if o >= state.committed}
        while state.committed in state.done:
            state.done.remove(state.committed)
            state.committed += 1
        state.seen = state.committed
    return states, sequence, finished
