"""The second construction step of a FileStore (services/store/store.py): the parts that need
recovery's results (where dispatch restarts, where the CommitLog ends), built once the files are
open and recovered, each given what it needs, in dependency order:

    reput (the dispatchers, where dispatch restarts, how far it may go: ReplicaRole)
      -> replica log (reput, the checkpoint) -> replication (the role, the replica log, the tables)
      -> flush, ConsumeQueue flush, retention (reput's dispatch lock), periodic tasks

The first step, the parts that open no file, is ``FileStore.__init__``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.runtime.clock import Clock
from services.store.arrivals import ArrivalBus
from services.store.config import FlushMode, StoreConfig
from services.store.ha.config_sync import ConfigTables, ReplicatedTable
from services.store.ha.epoch_file import EpochFile
from services.store.ha.replica_log import ReplicaLog
from services.store.ha.replication import Replication
from services.store.ha.role import ReplicaRole
from services.store.index.service import IndexService
from services.store.lite.consumer_offsets import LiteConsumerOffsets
from services.store.lite.index import LiteIndex
from services.store.lite.lifecycle import LiteLifecycle
from services.store.log.checkpoint import CheckpointFile
from services.store.log.commitlog import CommitLog
from services.store.log.consume_queue import ConsumeQueueStore
from services.store.log.flush import ConsumeQueueFlushService, FlushService, GroupCommitService, PeriodicTask
from services.store.log.recovery import RecoveryResult
from services.store.log.reput import Dispatcher, ReputService
from services.store.log.retention import CleanService
from services.store.metadata.transaction_metrics import TransactionMetrics
from services.store.model import DispatchRequest
from services.store.pop.journal import LiteOffsetFollower, PopJournal
from services.store.pop.service import PopService


class Service(Protocol):
    """A background loop started with the store and stopped (or halted) with it."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def halt(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Running:
    reput: ReputService
    replication: Replication
    group_commit: GroupCommitService | None  # SYNC flush only
    cq_flush: ConsumeQueueFlushService
    clean: CleanService
    services: list[Service]  # started in this order, stopped in the reverse one


class _IndexDispatcher:
    def __init__(self, index_service: IndexService) -> None:
        self._index_service = index_service

    def dispatch(self, requests: list[DispatchRequest]) -> None:
        self._index_service.build_index_batch(requests)


def build_running(
    config: StoreConfig,
    clock: Clock,
    checkpoint: CheckpointFile,
    recovered: RecoveryResult,
    *,
    commitlog: CommitLog,
    cq_store: ConsumeQueueStore,
    index_service: IndexService | None,
    transactions: TransactionMetrics,
    lite: LiteIndex,
    arrivals: ArrivalBus,
    role: ReplicaRole,
    pop: PopService,
    pop_journal: PopJournal | None,
    lite_offsets: LiteConsumerOffsets,
    tables: Sequence[ReplicatedTable],
    lite_lifecycle: LiteLifecycle,
    queue_max_offset: Callable[[str, int], int],
    dispatched_state: Callable[[], tuple[int, int]],
    flush_derived: Callable[[], None],
    logics_timestamp: Callable[[], int],
    disk_usage: Callable[[], float],
    persist_offsets: Callable[[], None],
) -> Running:
    """The store's second-step parts; nothing is started (``FileStore.start`` does that)."""
    dispatchers: list[Dispatcher] = [cq_store, transactions, lite]
    if pop_journal is not None:  # a replica keeps its lite offsets in step with the master's journal
        dispatchers.append(LiteOffsetFollower(lite_offsets, commitlog.read_record, lambda: role.is_master))
    if index_service is not None:
        dispatchers.append(_IndexDispatcher(index_service))
    reput = ReputService(
        commitlog, dispatchers, arrivals, queue_max_offset, recovered.reput_from_offset, limit=role.dispatch_limit
    )
    replica_log = ReplicaLog(config, commitlog, cq_store, index_service, reput, checkpoint, transactions, lite)
    clean = CleanService(config, clock, commitlog, cq_store, index_service, reput.dispatch_lock, disk_usage=disk_usage)
    replication = Replication(
        config,
        clock,
        commitlog,
        role,
        EpochFile(config.store_root),
        replica_log,
        ConfigTables(tables, config.ha_config_sync_interval_ms, clock),
        on_role_change=pop.forget,
        on_become_master=pop.restore,
        on_commit=reput.notify_append,
        disk_full=clean.refresh_disk_full,
    )
    cq_flush = ConsumeQueueFlushService(
        config.flush_consume_queue_interval_ms, dispatched_state, flush_derived, checkpoint, logics_timestamp
    )
    group_commit = None
    flusher: Service
    if config.flush_mode is FlushMode.SYNC:
        flusher = group_commit = GroupCommitService(commitlog, checkpoint, config.sync_flush_timeout_ms)
    else:
        flusher = FlushService(
            commitlog,
            checkpoint,
            clock,
            config.flush_interval_ms,
            config.flush_least_pages,
            config.flush_thorough_interval_ms,
        )
    # Stopped in reverse order: replication first, then the pop revive loop, consumer offsets
    # persisted after it; the warm-ahead thread last.
    services: list[Service] = [] if commitlog.warm_ahead is None else [commitlog.warm_ahead]
    services += [
        reput,
        flusher,
        cq_flush,
        clean,
        PeriodicTask("lite-expiry", config.lite_expiry_interval_ms, lite_lifecycle.run_once),
        PeriodicTask("persist-offsets", config.flush_consumer_offset_interval_ms, persist_offsets),
        PeriodicTask("persist-transaction-metrics", config.transaction_metric_flush_interval_ms, transactions.persist),
        *([pop_journal] if pop_journal is not None else []),
        pop.revive,
        replication,
    ]
    return Running(reput, replication, group_commit, cq_flush, clean, services)
