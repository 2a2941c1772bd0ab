"""The master side of CommitLog replication (RocketMQ 5: ``AutoSwitchHAService``,
``AutoSwitchHAConnection``, ``GroupTransferService``). No gRPC here: ``rpc/replicate.py`` drives
one stream per slave through these calls.

Per slave: ``handshake`` answers with the master's epochs, ``next_chunk`` reads the next whole
records from where the slave's CommitLog ends, ``on_ack`` records what the slave holds and
confirmed. A chunk never crosses a segment end or an epoch boundary, so the slave can record a
new epoch before it appends the first byte written under it.

What is sent: everything *written* (up to the CommitLog's max phy_offset), not only what the
master has flushed, as RocketMQ does. Replication then runs while the master flushes instead
of after it, which is what makes a SYNC_MASTER put cost max(flush, round trip) and not their
sum. Bytes the master loses in a power cut after the slave got them are not a danger: the
master comes back under a new epoch that starts where its recovered log ends, and the slave's
longer tail of the old epoch is cut at the consistent point on its next handshake.

The ``config/`` tables go on the same streams (``config_tables``: ha/config_sync.py).

SYNC_MASTER puts wait in ``wait_for_replicas`` (group commit, as GroupTransferService): every
waiter sleeps on one condition; each ack wakes them all, and one ack that covers a thousand
puts releases all thousand. A put needs ``in_sync_replicas - 1`` slaves to have confirmed its
end offset.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from services.domain.epoch_cache import EpochEntry
from services.runtime.clock import Clock
from services.store.config import StoreConfig
from services.store.errors import ReplicaOffsetError
from services.store.ha.config_sync import ConfigTables
from services.store.ha.epoch_file import EpochFile
from services.store.log.commitlog import CommitLog

_TOTAL_SIZE_BYTES = 4  # a record (and a blank record) starts with its TOTALSIZE, big-endian int32


@dataclass(frozen=True)
class Chunk:
    """Whole records from ``phy_offset``, all written under ``epoch`` (begun at ``epoch_start_offset``)."""

    phy_offset: int
    data: bytes
    epoch: int
    epoch_start_offset: int

    @property
    def end_offset(self) -> int:
        return self.phy_offset + len(self.data)


@dataclass
class SlaveProgress:
    """What one connected slave last reported (RocketMQ's slaveAckOffset, per connection)."""

    replica_id: int
    max_phy_offset: int = 0  # where its CommitLog ends
    confirmed_offset: int = 0  # what it keeps across a crash of its process
    last_ack_ms: int = 0
    caught_up_target: int = 0  # the master's max offset when a send last brought the slave to it


class SessionListener(Protocol):
    """Hears the slaves' sessions (the controller mode's SyncStateSet feed). Called on the
    streams' threads: must not block."""

    def acked(self, replica_id: int, max_phy_offset: int, caught_up: bool) -> None: ...
    def disconnected(self, replica_id: int) -> None: ...


class HAService:
    """Replication state of a master: its slaves' progress, the chunks it sends, SYNC waits."""

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        epoch_file: EpochFile,
        clock: Clock,
        listener: SessionListener | None = None,
        required_slaves: Callable[[], frozenset[int]] | None = None,
        sync_state_slaves: Callable[[], frozenset[int]] | None = None,
        on_commit: Callable[[], None] | None = None,
        config_tables: ConfigTables | None = None,
    ) -> None:
        self._config = config
        self.config_tables = config_tables or ConfigTables([], config.ha_config_sync_interval_ms, clock)
        self._commitlog = commitlog
        self._epoch_file = epoch_file
        self._clock = clock
        self._cond = threading.Condition()  # slaves' acks and new appends both notify it
        self._slaves: dict[int, SlaveProgress] = {}
        self._append_count = 0
        self._listener = listener
        self._required_slaves = required_slaves  # all-ack: the slaves a SYNC put waits for
        self._sync_state_slaves = sync_state_slaves  # controller mode: what commit_offset waits for
        self._on_commit = on_commit  # a slave's ack may have moved commit_offset (reput re-reads it)
        self._commit_offset = commitlog.max_offset  # all this replica held when it became master
        self.closed = False  # no longer the master: streams end

    def close(self) -> None:
        """This replica stopped being master: every stream ends, SYNC waiters give up."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    # -- slaves -------------------------------------------------------------------------------
    def handshake(self, replica_id: int) -> tuple[SlaveProgress, int, int, list[EpochEntry]]:
        """Register a slave's session (it replaces an older session of the same replica);
        returns it and the master's min phy_offset, max phy_offset and epochs (with ends)."""
        max_offset = self._commitlog.max_offset
        session = SlaveProgress(replica_id, last_ack_ms=self._clock.now_ms(), caught_up_target=max_offset)
        with self._cond:
            self._slaves[replica_id] = session
            self._cond.notify_all()
        return session, self._commitlog.min_offset, max_offset, self._epoch_file.entries(max_offset)

    def on_ack(self, session: SlaveProgress, max_phy_offset: int, confirmed_offset: int) -> None:
        with self._cond:
            session.max_phy_offset = max_phy_offset
            session.confirmed_offset = confirmed_offset
            session.last_ack_ms = self._clock.now_ms()
            self._cond.notify_all()
        if self._on_commit is not None:
            self._on_commit()
        if self._listener is not None:
            # Caught up (RocketMQ's lastCatchUpTime): it holds all the master had when a send
            # last reached the master's end.
            self._listener.acked(session.replica_id, max_phy_offset, max_phy_offset >= session.caught_up_target)

    def sent(self, session: SlaveProgress, end_offset: int, master_max_offset: int) -> None:
        """A chunk (or heartbeat) ending at ``end_offset`` went out while the master ended at
        ``master_max_offset``: when it reached the end, acking it means caught up."""
        if end_offset >= master_max_offset:
            session.caught_up_target = end_offset

    def silent_ms(self, session: SlaveProgress) -> int:
        """How long since the slave's last ack (or its handshake)."""
        with self._cond:
            return self._clock.now_ms() - session.last_ack_ms

    def disconnect(self, session: SlaveProgress) -> None:
        """End a session (a newer session of the same replica stays)."""
        with self._cond:
            current = self._slaves.get(session.replica_id) is session
            if current:
                del self._slaves[session.replica_id]
            self._cond.notify_all()
        if current and self._listener is not None:
            self._listener.disconnected(session.replica_id)

    def slaves(self) -> list[SlaveProgress]:
        with self._cond:
            return [SlaveProgress(**vars(p)) for p in self._slaves.values()]

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def max_phy_offset(self) -> int:
        return self._commitlog.max_offset

    # -- transfer -----------------------------------------------------------------------------
    def next_chunk(self, from_offset: int) -> Chunk | None:
        """The whole records from ``from_offset`` (a record boundary: where the slave's log
        ends), at most ha_transfer_batch_size_bytes unless the first record alone is larger,
        within one segment and one epoch; None when there is nothing new. Raises
        ReplicaOffsetError when ``from_offset`` is beyond the master's log or below what
        retention kept."""
        commitlog = self._commitlog
        max_offset = commitlog.max_offset
        if from_offset == max_offset:
            return None
        if not commitlog.min_offset <= from_offset < max_offset:
            raise ReplicaOffsetError(
                f"a slave asks for phy_offset {from_offset}; this master holds [{commitlog.min_offset}, {max_offset})",
                from_offset,
                max_offset,
            )
        entry = self._epoch_of(from_offset, max_offset)
        file_size = self._config.commitlog_file_size_bytes
        segment_end = from_offset - from_offset % file_size + file_size
        limit = min(max_offset, entry.end_offset, segment_end)
        head = commitlog.read_bytes(from_offset, _TOTAL_SIZE_BYTES)
        if head is None:  # retention deleted the segment meanwhile
            raise ReplicaOffsetError(f"phy_offset {from_offset} is no longer in the CommitLog", from_offset, max_offset)
        first_size = int.from_bytes(head, "big", signed=True)
        size = max(min(limit - from_offset, self._config.ha_transfer_batch_size_bytes), first_size)
        data = commitlog.read_bytes(from_offset, min(size, limit - from_offset))
        if data is None:
            raise ReplicaOffsetError(f"phy_offset {from_offset} is no longer in the CommitLog", from_offset, max_offset)
        whole = _whole_records_length(data)
        return Chunk(from_offset, bytes(data[:whole]), entry.epoch, entry.start_offset) if whole else None

    def _epoch_of(self, offset: int, max_offset: int) -> EpochEntry:
        for entry in reversed(self._epoch_file.entries(max_offset)):
            if entry.start_offset <= offset < entry.end_offset:
                return entry
        raise ReplicaOffsetError(f"no epoch of this master covers phy_offset {offset}", offset, max_offset)

    def notify_append(self) -> None:
        """Called after each append: wakes the streams waiting for new bytes."""
        with self._cond:
            self._append_count += 1
            self._cond.notify_all()

    def wake(self) -> None:
        """Wake every waiting stream (one of them is ending, or the server is stopping) and
        every SYNC waiter, and let reput re-read ``commit_offset`` (the SyncStateSet changed)."""
        with self._cond:
            self._cond.notify_all()
        if self._on_commit is not None:
            self._on_commit()

    # -- what reads may see ---------------------------------------------------------------------
    def commit_offset(self) -> int | None:
        """RocketMQ's confirmOffset (readUnCommitted false): the CommitLog offset every slave of
        the SyncStateSet has confirmed, capped by the master's end; reput dispatches no further,
        so nothing a consumer reads can be taken back by a failover to any member of the set.
        It never goes back; while a member has no session it stays (the set drops the member).
        None without a SyncStateSet (static roles): no limit."""
        members = self._sync_state_slaves
        if members is None:
            return None
        slaves = members()
        with self._cond:
            offset = self._commitlog.max_offset
            for replica_id in slaves:
                session = self._slaves.get(replica_id)
                if session is None:
                    return self._commit_offset
                offset = min(offset, session.confirmed_offset)
            if offset > self._commit_offset:
                self._commit_offset = offset
            return self._commit_offset

    def wait_for_data(self, from_offset: int, timeout_s: float) -> bool:
        """Wait until the CommitLog ends beyond ``from_offset``; False on timeout or ``wake``."""
        with self._cond:
            if self._commitlog.max_offset <= from_offset:
                self._cond.wait(timeout_s)
            return self._commitlog.max_offset > from_offset

    # -- SYNC_MASTER --------------------------------------------------------------------------
    @property
    def acks_needed(self) -> int:
        return self._config.in_sync_replicas - 1

    def confirmed_offset(self) -> int:
        """The offset up to which acks_needed slaves have confirmed (-1: too few connected);
        the master's own max phy_offset when no slave is needed."""
        needed = self.acks_needed
        if needed <= 0:
            return self._commitlog.max_offset
        with self._cond:
            return self._confirmed_locked(needed)

    def _confirmed_locked(self, needed: int) -> int:
        offsets = sorted((p.confirmed_offset for p in self._slaves.values()), reverse=True)
        return offsets[needed - 1] if len(offsets) >= needed else -1

    def wait_for_replicas(self, end_offset: int, timeout_s: float) -> bool:
        """Wait until acks_needed slaves (all-ack: every slave of the SyncStateSet) confirmed
        ``end_offset``; False on timeout or when this master is closed."""
        required = self._required_slaves
        if required is not None:
            with self._cond:
                return (
                    self._cond.wait_for(
                        lambda: self.closed or self._all_confirmed_locked(required(), end_offset), timeout_s
                    )
                    and not self.closed
                )
        needed = self.acks_needed
        if needed <= 0:
            return True
        with self._cond:
            return self._cond.wait_for(lambda: self._confirmed_locked(needed) >= end_offset, timeout_s)

    def _all_confirmed_locked(self, slaves: frozenset[int], end_offset: int) -> bool:
        for replica_id in slaves:
            session = self._slaves.get(replica_id)
            if session is None or session.confirmed_offset < end_offset:
                return False
        return True


def _whole_records_length(data: bytes) -> int:
    """How many leading bytes of ``data`` are whole records (by their TOTALSIZE fields; a blank
    record's TOTALSIZE runs to its segment's end). The slave validates them as recovery does."""
    pos = 0
    end = len(data)
    while pos + _TOTAL_SIZE_BYTES <= end:
        size = int.from_bytes(data[pos : pos + _TOTAL_SIZE_BYTES], "big", signed=True)
        if size <= 0 or pos + size > end:
            break
        pos += size
    return pos
