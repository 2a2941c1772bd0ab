"""The slave side of CommitLog replication (RocketMQ 5: ``AutoSwitchHAClient``). No gRPC here:
``rpc/replicate_client.py`` carries these calls over the master's ``Store.Replicate`` stream.

One session: ``handshake`` (replica id, where the CommitLog ends, the epochs), then
``on_master_handshake`` with the master's epochs: the slave truncates its CommitLog (and its
ConsumeQueues, IndexFile, epochs) to the consistent point when its tail diverged, and returns
where the master must start; then ``on_chunk`` for each chunk: a chunk of a newer epoch first
records that epoch (file first, so an epoch the file lacks was never appended under), then
``ReplicaLog.append`` writes the bytes. After each append the slave reports ``progress``.

The master also sends its ``config/`` tables on the stream: ``on_config`` installs each
(ha/config_sync.py).

Confirmed offset: what the slave keeps if its process dies, by its own ``flush_mode``: with
ASYNC flush, everything appended (it is in the page cache, as a master's ASYNC flush put is);
with SYNC flush, the slave flushes after each chunk and confirms the flushed offset.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from services.domain.epoch_cache import EpochEntry
from services.store.config import FlushMode, StoreConfig
from services.store.errors import ReplicationError
from services.store.ha.config_sync import ConfigTables
from services.store.ha.epoch_file import EpochFile
from services.store.ha.replica_log import ReplicaLog
from services.store.log.commitlog import CommitLog

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Progress:
    max_phy_offset: int  # where the CommitLog ends: the next chunk must start there
    confirmed_offset: int  # what survives a crash of this process


class HAClient:
    """A slave's replication state machine (one instance per store, reused across sessions)."""

    def __init__(
        self,
        config: StoreConfig,
        commitlog: CommitLog,
        replica_log: ReplicaLog,
        epoch_file: EpochFile,
        config_tables: ConfigTables | None = None,
    ) -> None:
        self._config = config
        self._config_tables = config_tables
        self._commitlog = commitlog
        self._replica_log = replica_log
        self._epoch_file = epoch_file
        self.truncations = 0  # how many handshakes cut a diverged tail

    @property
    def replica_id(self) -> int:
        return self._config.replica_id

    def handshake(self) -> tuple[int, list[EpochEntry]]:
        """(max phy_offset, epochs with end offsets) to send to the master."""
        max_offset = self._commitlog.max_offset
        return max_offset, self._epoch_file.entries(max_offset)

    def on_master_handshake(self, master_epochs: list[EpochEntry], master_min_offset: int) -> int:
        """Cut what the master never had; returns where the master must start sending.
        Raises ReplicationError when this replica cannot follow the master."""
        commitlog = self._commitlog
        max_offset = commitlog.max_offset
        if max_offset == commitlog.min_offset:  # nothing written: nothing can diverge
            if max_offset < master_min_offset:
                # The master's retention deleted its first segments: begin where it begins.
                self._replica_log.start_at(master_min_offset)
                return master_min_offset
            return max_offset
        point = self._epoch_file.find_consistent_point(master_epochs, max_offset)
        if point < 0:
            raise ReplicationError(
                f"no epoch in common with the master (mine: {self._epoch_file.entries(max_offset)}, "
                f"the master's: {master_epochs}): refusing to follow it"
            )
        if point < max_offset:
            log.warning(
                "slave %d: tail [%d, %d) diverged from the master: truncating", self.replica_id, point, max_offset
            )
            self._replica_log.truncate(point)
            self.truncations += 1
        self._epoch_file.truncate_suffix_by_offset(point)
        return point

    def on_chunk(self, phy_offset: int, data: bytes, epoch: int, epoch_start_offset: int) -> Progress:
        """Append one chunk of the master's records. Raises ReplicaOffsetError /
        ReplicaDataError (nothing written) or ReplicationError for an epoch older than ours."""
        if data:
            last_epoch = self._epoch_file.last_epoch
            if epoch > last_epoch:
                self._epoch_file.append(epoch, epoch_start_offset)
            elif epoch < last_epoch:
                raise ReplicationError(f"the master sends epoch {epoch} bytes, this replica is at epoch {last_epoch}")
            self._replica_log.append(phy_offset, data)
            if self._config.flush_mode is FlushMode.SYNC:
                self._commitlog.flush(0)
        return self.progress()

    def on_config(self, name: str, content: bytes, version: int) -> None:
        """Install the master's content of config file ``name`` (one that fails is logged and
        skipped: the CommitLog keeps flowing)."""
        if self._config_tables is not None:
            self._config_tables.install(name, content, version)

    def progress(self) -> Progress:
        commitlog = self._commitlog
        max_offset = commitlog.max_offset
        confirmed = commitlog.flushed_where if self._config.flush_mode is FlushMode.SYNC else max_offset
        return Progress(max_offset, min(confirmed, max_offset))
