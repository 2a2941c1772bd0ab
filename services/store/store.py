"""FileStore: the store core. Builds CommitLog, ConsumeQueues, IndexFile, reput, flush,
recovery, retention, the metadata tables, the pop engine and replication (in two steps: the
class docstring) behind one narrow API (no gRPC here), and delegates to them; it validates puts
itself.

Data flow::

    put_messages --validate--> CommitLog.append_batch (one lock per batch)
                                   |  (SYNC: wait for the group commit covering the batch)
                                   v
                 ReputService (thread, woken on append) -> ConsumeQueueStore, IndexService
                                   |
                                   v
                 ArrivalBus <- PopService / ReviveService (FIFO queues unlocked)
                                   |
                                   v
                 subscribers (long polling: WatchArrivals)

The parts never see the FileStore: each gets the collaborators it uses (reput the CommitLog,
its dispatchers and the bus; the pop engine the store's get_messages / put_messages /
max_offset_in_queue, where a new group starts, the tables, the bus and the clock) in its
constructor. The read-only properties below expose the parts to the servicer, tests and
benchmarks.

The CommitLog is the truth; ConsumeQueues, IndexFiles and the checkpoint are caches that
recovery truncates and reput rebuilds from it.
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable

from services.domain.format.commitlog_format import MessageRecord
from services.domain.format.properties_format import WAIT_STORE_MSG_OK
from services.domain.lite import LITE_TOPIC_PREFIX
from services.domain.statuses import APPENDED_PUT_STATUSES, PutStatus
from services.runtime.clock import Clock, SystemClock
from services.store.arrivals import ArrivalBus, ArrivalListener
from services.store.config import StoreConfig
from services.store.ha.replication import Replication
from services.store.ha.role import ReplicaRole
from services.store.index.service import IndexService
from services.store.lite.consumer_offsets import LiteConsumerOffsets
from services.store.lite.index import LiteIndex
from services.store.lite.lifecycle import LiteLifecycle
from services.store.lite.put_offsets import LiteOffsetTable
from services.store.lite.queue import find_lite_queue
from services.store.log.checkpoint import (
    CheckpointFile,
    StoreLock,
    abort_file_exists,
    create_abort_file,
    delete_abort_file,
)
from services.store.log.commitlog import CommitLog
from services.store.log.consume_queue import ConsumeQueueStore
from services.store.log.flush import GroupCommitService
from services.store.log.recovery import RecoveryResult, consume_queue_units_lost, consume_queues_agree, recover
from services.store.log.reput import ReputService
from services.store.log.retention import CleanService
from services.store.metadata.auth_config import AuthConfigManager
from services.store.metadata.consumer_offsets import ConsumerOffsetManager, DelayOffsetManager
from services.store.metadata.topic_config import SubscriptionGroupManager, TopicConfigManager
from services.store.metadata.transaction_metrics import TransactionMetrics
from services.store.model import PutResult, StoreStats
from services.store.pop.consume_init import ConsumeInitOffsets
from services.store.pop.journal import PopJournal
from services.store.pop.service import PopService
from services.store.put_checks import PutChecks
from services.store.running import Running, Service, build_running
from services.store.store_read import ReadableQueue, StoreReader

log = logging.getLogger(__name__)


class FileStore(StoreReader):
    """Built in two steps, each part given what it needs when it is made: the constructor makes
    the parts that open no file (in dependency order, below); ``start`` takes the store root's
    lock, opens and recovers the files, then makes the parts that need recovery's results
    (``running.build_running``) and starts their threads."""

    def __init__(self, config: StoreConfig, clock: Clock | None = None) -> None:
        self._config = config
        self._clock = clock = clock or SystemClock()
        # First: the tables and the pop engine ask it before every change, reput how far to go.
        self._role = role = ReplicaRole()
        writable = role.check_writable
        config_dir = config.config_dir
        # (the same address-space reservation as the lite index: LMDB files grow as used)
        self._lite_consumer_offsets = LiteConsumerOffsets(config_dir, config.lite_index_map_size_bytes)
        self._topics = TopicConfigManager(config_dir, clock, writable)
        self._groups = SubscriptionGroupManager(config_dir, clock, writable)
        # (consumer offsets are committed through the pop engine, which checks)
        self._consumer_offsets = ConsumerOffsetManager(config_dir, clock, lite=self._lite_consumer_offsets)
        self._delay_offsets = DelayOffsetManager(config_dir, clock, writable)
        self._auth = AuthConfigManager(config_dir, clock, writable)
        self._lite = lite = LiteIndex(config.lite_index_dir, config.lite_index_map_size_bytes)
        super().__init__(
            CommitLog(config, clock, LiteOffsetTable(lite.max_offset, lambda: lite.dispatched)),
            ConsumeQueueStore(config.consume_queue_dir, config.consume_queue_units_per_file),
            IndexService(
                config.index_dir,
                config.index_hash_slot_num,
                config.index_num_max,
                clock,
                on_index_msg_timestamp=self._on_index_file_full,
            )
            if config.message_index_enable
            else None,
        )
        commitlog = self._commitlog
        self._transactions = TransactionMetrics(config_dir, commitlog.read_record, clock)
        self._put_checks = PutChecks(config, commitlog, self._topics, lite.queue_count)
        self._lite_lifecycle = LiteLifecycle(
            lite, self._topics, self._consumer_offsets.remove_topics, clock, commitlog, self._lite_consumer_offsets.lags
        )
        self._arrivals = ArrivalBus()
        # Consumer groups' pop / ack state; its revive loop and journal writer start with the other services.
        self._pop_journal = PopJournal(self._put_journal, self._topics, clock) if config.pop_journal_enable else None
        self._pop = PopService(
            get_messages=self.get_messages,
            init_offset=ConsumeInitOffsets(config, commitlog, self.find_queue).init_offset,
            max_offset_in_queue=self.max_offset_in_queue,
            put_messages=self.put_messages,
            topics=self._topics,
            groups=self._groups,
            consumer_offsets=self._consumer_offsets,
            arrivals=self._arrivals,
            clock=clock,
            is_running=lambda: self._running,
            check_writable=writable,
            journal=self._pop_journal,
        )
        # Made by start(): None before it.
        self._lock: StoreLock | None = None
        self._checkpoint: CheckpointFile | None = None
        self._recovery: RecoveryResult | None = None
        self._run: Running | None = None
        self._running = False
        self._shutdown_lock = threading.Lock()

    # -- parts (read-only) ------------------------------------------------------------------
    @property
    def config(self) -> StoreConfig:
        return self._config

    @property
    def commitlog(self) -> CommitLog:
        return self._commitlog

    @property
    def cq_store(self) -> ConsumeQueueStore:
        return self._cq_store

    @property
    def index_service(self) -> IndexService | None:
        """None when message_index_enable is off."""
        return self._index_service

    @property
    def pop_journal(self) -> PopJournal | None:
        """None when pop_journal_enable is off."""
        return self._pop_journal

    @property
    def topics(self) -> TopicConfigManager:
        return self._topics

    @property
    def groups(self) -> SubscriptionGroupManager:
        return self._groups

    @property
    def consumer_offsets(self) -> ConsumerOffsetManager:
        return self._consumer_offsets

    @property
    def delay_offsets(self) -> DelayOffsetManager:
        return self._delay_offsets

    @property
    def auth(self) -> AuthConfigManager:
        return self._auth

    @property
    def pop(self) -> PopService:
        return self._pop

    def find_queue(self, topic: str, queue_id: int) -> ReadableQueue | None:
        """A ConsumeQueue, or for ``%LMQ%$parent$lite`` queue 0 a view of the lite index."""
        if topic.startswith(LITE_TOPIC_PREFIX):
            return find_lite_queue(self._lite, topic, queue_id)
        return self._cq_store.find(topic, queue_id)

    @property
    def lite_lifecycle(self) -> LiteLifecycle:
        """Expiry of idle lite topics (services/store/lite/lifecycle.py)."""
        return self._lite_lifecycle

    @property
    def lite_consumer_offsets(self) -> LiteConsumerOffsets:
        """The consumer groups' offsets in lite topics (services/store/lite/consumer_offsets.py)."""
        return self._lite_consumer_offsets

    @property
    def lite(self) -> LiteIndex:
        """The lite topics' units (services/store/lite/index.py)."""
        return self._lite

    @property
    def transactions(self) -> TransactionMetrics:
        """Open transactions (half messages) per real topic, counted by dispatch."""
        return self._transactions

    # Made by start(): None before it.
    @property
    def checkpoint(self) -> CheckpointFile | None:
        return self._checkpoint

    @property
    def recovery(self) -> RecoveryResult | None:
        return self._recovery

    @property
    def reput(self) -> ReputService | None:
        return self._run.reput if self._run is not None else None

    @property
    def group_commit(self) -> GroupCommitService | None:
        """The SYNC flush's group commit; None in ASYNC mode."""
        return self._run.group_commit if self._run is not None else None

    @property
    def clean(self) -> CleanService | None:
        return self._run.clean if self._run is not None else None

    @property
    def services(self) -> tuple[Service, ...]:
        """The background loops, in the order they start (they stop in the reverse one)."""
        return tuple(self._run.services) if self._run is not None else ()

    @property
    def replication(self) -> Replication:
        """The replica's role, epochs and replication parts (ha/replication.py). AttributeError
        before start (``getattr(store, "replication", None)`` is None then)."""
        if self._run is None:
            raise AttributeError("replication: the store is not started")
        return self._run.replication

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._config.store_root.mkdir(parents=True, exist_ok=True)
        self._lock = lock = StoreLock(self._config.lock_path)
        try:
            self._start_locked()
        except BaseException:
            self._close_files()
            lock.release()
            raise

    def _close_files(self, flush: bool = True) -> None:
        self._lite.close(flush)
        self._lite_consumer_offsets.close()
        if self._checkpoint is not None:
            self._checkpoint.close()
        if self._index_service is not None:
            self._index_service.close()
        self._cq_store.close()
        self._commitlog.close()

    def _start_locked(self) -> None:
        config = self._config
        abnormal = abort_file_exists(config.abort_path)
        if abnormal:
            log.warning("abort file found: the last stop was not clean; recovering")
        for manager in (self._topics, self._groups, self._consumer_offsets, self._delay_offsets, self._auth):
            manager.load()
        self._lite_consumer_offsets.open()
        self._consumer_offsets.move_lite_offsets()
        self._checkpoint = checkpoint = CheckpointFile(config.checkpoint_path)
        cp = checkpoint.loaded
        self._commitlog.mfq.load()
        self._cq_store.load()
        self._cq_store.recover()
        if self._index_service is not None:
            # RocketMQ drops index files newer than index_msg_timestamp after a crash (that
            # timestamp only moves when a file fills, so: every open file). Our offset checkpoint
            # says how far the index is durable, so with a valid one recovery truncates instead.
            trusted = not abnormal or cp.dispatched_phy_offset >= 0
            self._index_service.load(last_exit_ok=trusted, index_msg_timestamp=cp.index_msg_timestamp)
        self._recovery = recovered = recover(config, self._commitlog, self._cq_store, self._index_service, cp, abnormal)
        self._run = run = build_running(
            config,
            self._clock,
            checkpoint,
            recovered,
            commitlog=self._commitlog,
            cq_store=self._cq_store,
            index_service=self._index_service,
            transactions=self._transactions,
            lite=self._lite,
            arrivals=self._arrivals,
            role=self._role,
            pop=self._pop,
            pop_journal=self._pop_journal,
            lite_offsets=self._lite_consumer_offsets,
            tables=[self._topics, self._groups, self._consumer_offsets, self._delay_offsets, self._auth],
            lite_lifecycle=self._lite_lifecycle,
            queue_max_offset=self.max_offset_in_queue,
            dispatched_state=self._dispatched_state,
            flush_derived=self._flush_derived,
            logics_timestamp=self._logics_timestamp,
            disk_usage=self._disk_usage_ratio,
            persist_offsets=self._persist_offsets,
        )
        reput = run.reput
        # The transaction counts are valid up to their file's offset: replay the rest into them
        # alone, up to where reput restarts (reput then skips what they already counted).
        counted_to = self._transactions.load(self._commitlog.min_offset, recovered.process_offset)
        reput.redispatch(counted_to, [self._transactions], until=recovered.reput_from_offset)
        # Likewise the lite index, from where its last transaction left it.
        self._lite.open(abnormal)
        lite_to = self._lite.load(self._commitlog.min_offset, recovered.process_offset)
        reput.redispatch(lite_to, [self._lite], until=recovered.reput_from_offset)
        lost = consume_queue_units_lost(cp, self._commitlog, self._cq_store)
        reput.run_once()  # catch up before serving: queue offsets come from the ConsumeQueues
        holes = self._cq_store.queues_with_holes() if abnormal else []
        if holes:
            log.warning("ConsumeQueues with holes after an abnormal stop (%s): rebuilding them", ", ".join(holes[:5]))
        if lost or holes or not consume_queues_agree(self._cq_store, self._commitlog):
            self._rebuild_consume_queues()
        self._commitlog.queue_offset_table = self._cq_store.queue_offset_table()
        self._cq_store.correct_min_offsets(self._commitlog.min_offset)
        run.replication.open()
        if self._role.is_master:
            self._pop.restore()  # a static master: the pop state of its last run (controller mode: on election)
        # Recovery flushed the CommitLog to its end: record that before serving (the first
        # checkpoint save is just below), so a power cut before the next save still knows which
        # damage lies in the unflushed window (a torn tail) and which would be real corruption.
        checkpoint.current.flushed_phy_offset = self._commitlog.flushed_where
        create_abort_file(config.abort_path)
        run.cq_flush.run_once()
        for service in run.services:
            service.start()
        self._running = True
        log.info(
            "store started: commitlog [%d, %d), reput from %d, %d queues%s",
            self._commitlog.min_offset,
            self._commitlog.max_offset,
            recovered.reput_from_offset,
            len(self._cq_store.queues),
            " (recovered after abnormal stop)" if abnormal else "",
        )

    def shutdown(self) -> None:
        with self._shutdown_lock:
            if not self._running:
                return
            if self._pop_journal is not None:
                self._pop_journal.stop()  # the last pops' records, while puts are still taken
            self._running = False
            run, checkpoint = self._run, self._checkpoint
            assert run is not None and checkpoint is not None
            reput = run.reput
            for service in reversed(run.services):
                if service is not reput:
                    service.stop()
            reput.stop()
            reput.run_once()
            caught_up = reput.dispatch_behind_bytes == 0
            try:
                self._commitlog.flush(0)
            except OSError as exc:  # sticky write error: recover on the next start
                log.error("final CommitLog flush failed: %s; keeping the abort file", exc)
                caught_up = False
            self._flush_derived()
            cp = checkpoint.current
            cp.dispatched_phy_offset, cp.cq_max_offset_sum = self._dispatched_state()
            cp.flushed_phy_offset = self._commitlog.flushed_where
            cp.logics_msg_timestamp = self._logics_timestamp()
            checkpoint.save()
            self._persist_offsets()
            self._transactions.persist()
            self._close_files()
            if caught_up:
                delete_abort_file(self._config.abort_path)
            if self._lock is not None:
                self._lock.release()
            log.info("store stopped%s", "" if caught_up else " with dispatch behind; abort file kept")

    def halt(self) -> None:
        """Stop as ``kill -9`` would: threads end, nothing is flushed or checkpointed, the abort
        file stays, written pages stay in the page cache. For fault-injection tests."""
        with self._shutdown_lock:
            if not self._running:
                return
            self._running = False
            run, lock = self._run, self._lock
            assert run is not None and lock is not None
            for service in run.services:
                service.halt()
            self._close_files(flush=False)  # the IndexFile's close flushes: its pages are in the page cache anyway
            lock.release()

    # -- internals --------------------------------------------------------------------------
    def _reput(self) -> ReputService:
        run = self._run
        assert run is not None, "the store is not started"
        return run.reput

    def _dispatched_state(self) -> tuple[int, int]:
        """(reput_from_offset, sum of ConsumeQueue max offsets), consistent with each other."""
        reput = self._reput()
        with reput.dispatch_lock:
            return reput.reput_from_offset, self._cq_store.max_offset_sum()

    def _flush_derived(self) -> None:
        with self._reput().dispatch_lock:
            self._cq_store.flush(0)
        self._lite.flush()
        if self._index_service is not None:
            self._index_service.flush()

    def _logics_timestamp(self) -> int:
        return max((cq.last_store_timestamp_ms for cq in self._cq_store.queues.values()), default=0)

    def _on_index_file_full(self, end_timestamp_ms: int) -> None:
        if self._checkpoint is not None:
            self._checkpoint.current.index_msg_timestamp = end_timestamp_ms

    def _persist_offsets(self) -> None:
        self._consumer_offsets.persist_if_dirty()
        self._lite_consumer_offsets.flush()
        self._delay_offsets.persist()

    def _disk_usage_ratio(self) -> float:
        usage = shutil.disk_usage(self._config.store_root)
        return usage.used / usage.total if usage.total else 0.0

    def _rebuild_consume_queues(self) -> None:
        """Throw every ConsumeQueue away and re-dispatch the whole CommitLog into new ones."""
        log.warning("rebuilding all ConsumeQueues from the CommitLog")
        for cq in list(self._cq_store.queues.values()):
            cq.destroy()
        self._cq_store.queues = {}
        self._commitlog.dispatch_backlog.clear()
        self._reput().redispatch(self._commitlog.min_offset, [self._cq_store])

    # -- writes -----------------------------------------------------------------------------
    def put_messages(
        self, messages: list[MessageRecord], allow_system_topics: bool = False, disk_full_ok: bool = False
    ) -> list[PutResult]:
        """Validate, append and (SYNC) wait for the flush of a batch. All or nothing on bad input.
        ``disk_full_ok``: taken past the disk-full mark (the pop journal: consumers keep acking
        while the store refuses new messages, as they must to drain it)."""
        status, error = self.put_batch(messages, allow_system_topics, disk_full_ok)
        if status in APPENDED_PUT_STATUSES:
            prefix = self._commitlog.store_host_prefix
            return [
                PutResult(status, rec.phy_offset, rec.total_size, rec.queue_offset, rec.store_timestamp_ms, "", prefix)
                for rec in messages
            ]
        return [PutResult(status, error=error) for _ in messages]

    def _put_journal(self, messages: list[MessageRecord], allow_system_topics: bool = False) -> list[PutResult]:
        return self.put_messages(messages, allow_system_topics, disk_full_ok=True)

    def put_batch(
        self, messages: list[MessageRecord], allow_system_topics: bool = False, disk_full_ok: bool = False
    ) -> tuple[PutStatus, str]:
        """:meth:`put_messages` without a result object per message: (status, error) of the
        whole batch (it is all or nothing). When the batch was appended (PUT_OK, or
        FLUSH_DISK_TIMEOUT in SYNC mode), each record holds its phy_offset, queue_offset,
        total_size and store_timestamp_ms."""
        run = self._run
        if not self._running or run is None:
            return PutStatus.SERVICE_NOT_AVAILABLE, "store is not running"
        refused = run.replication.refuse_put()  # a slave; controller mode: not writable, too few in sync
        if refused is not None:
            return refused
        if run.clean.disk_full and not disk_full_ok:
            return PutStatus.SERVICE_NOT_AVAILABLE, "disk full: writes refused"
        prepared, bad = self._put_checks.prepare(messages, allow_system_topics)
        if bad is not None:
            i, status, error = bad
            return status, error if len(messages) == 1 else f"message {i} of the batch: {error}; nothing written"
        if not prepared:
            return PutStatus.PUT_OK, ""
        try:
            self._commitlog.append_batch(prepared)
        except OSError as exc:
            log.error("append failed: %s", exc)
            return PutStatus.UNKNOWN_ERROR, f"write failed: {exc}"
        run.reput.notify_append()
        wait = any(rec.properties.get(WAIT_STORE_MSG_OK) != "false" for rec in messages)
        end = messages[-1].phy_offset + messages[-1].total_size
        group_commit = run.group_commit
        if group_commit is not None and wait and not group_commit.wait_for_flush(end):
            return PutStatus.FLUSH_DISK_TIMEOUT, ""
        unconfirmed = run.replication.after_append(end, wait)
        if unconfirmed is not None:
            return unconfirmed
        return PutStatus.PUT_OK, ""

    # -- arrivals and stats -------------------------------------------------------------------
    def add_arrival_listener(self, listener: ArrivalListener) -> Callable[[], None]:
        """Subscribe to the store's arrival bus (see ``arrivals``); returns the unsubscribe."""
        return self._arrivals.subscribe(listener)

    def delete_topic(self, topic: str) -> bool:
        """Remove a topic's config, ConsumeQueues and consumer offsets."""
        run = self._run
        assert run is not None, "the store is not started"
        existed = self._topics.delete(topic)
        with run.reput.dispatch_lock:
            self._cq_store.remove_topic(topic)
        self._consumer_offsets.remove_topic(topic)
        run.cq_flush.run_once()  # the checkpoint's queue-offset sum must not count the topic
        return existed

    def stats(self) -> StoreStats:
        commitlog, reput = self._commitlog, self.reput
        return StoreStats(
            put_messages_total=commitlog.put_messages_total,
            put_bytes_total=commitlog.put_bytes_total,
            commitlog_min_offset=commitlog.min_offset,
            commitlog_max_offset=commitlog.max_offset,
            flushed_offset=commitlog.flushed_where,
            confirm_offset=commitlog.confirm_offset,
            reput_from_offset=reput.reput_from_offset if reput is not None else 0,
            dispatch_behind_bytes=reput.dispatch_behind_bytes if reput is not None else 0,
            flush_behind_bytes=commitlog.mfq.flush_behind_bytes(),
            storage_size_bytes=commitlog.mfq.total_size_bytes() + self._cq_store.total_size_bytes(),
            topic_count=len(self._topics.list()),
            group_count=len(self._groups.list()),
            flush_mode=self._config.flush_mode.value,
            lite_topic_count=self._lite.queue_count(),
        )
