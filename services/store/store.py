"""FileStore: the store core. Wires CommitLog, ConsumeQueues, IndexFile, reput, flush,
recovery and retention together behind one narrow API (no gRPC here).

Data flow::

    put_messages --validate--> CommitLog.append_batch (one lock per batch)
                                   |  (SYNC: wait for the group commit covering the batch)
                                   v
                 ReputService (thread, woken on append) -> ConsumeQueueStore, IndexService
                                   |
                                   v
                 arrival listeners (long polling, WatchArrivals)

The CommitLog is the truth; ConsumeQueues, IndexFiles and the checkpoint are caches that
recovery truncates and reput rebuilds from it.
"""
from __future__ import annotations

import logging
import operator
import shutil
import threading
from typing import Callable

from services.store.checkpoint import (
    CheckpointFile, StoreLock, abort_file_exists, create_abort_file, delete_abort_file)
from services.store.clean import CleanService
from services.store.clock import Clock, SystemClock
from services.store.commitlog import CommitLog
from services.store.config import FlushMode, StoreConfig
from services.store.consume_queue import ConsumeQueueStore
from services.store.mapped_file import WarmAheadService
from services.store.flush import (
    ConsumeQueueFlushService, FlushService, GroupCommitService, PeriodicTask)
from services.domain.format.commitlog_format import (
    PROPERTIES_SIZE_MAX_BYTES,
    MessageRecord,
    decode_offset_msg_id,
)
from services.domain.format.properties_format import WAIT_STORE_MSG_OK, PropertiesError
from services.store.index_service import IndexService
from services.store.consumer_offsets import ConsumerOffsetManager, DelayOffsetManager
from services.store.metadata import TopicConfig
from services.domain.names import is_system_topic, validate_topic_name
from services.store.auth_config import AuthConfigManager
from services.store.topic_config import SubscriptionGroupManager, TopicConfigManager
from services.store.model import (
    Arrival, DispatchRequest, GetResult, GetStatus, PutResult, PutStatus, StoreStats)
from services.store.pop import PopService
from services.store.recovery import recover
from services.store.store_read import StoreReader

log = logging.getLogger(__name__)

CONSUMER_OFFSET_PERSIST_INTERVAL_MS = 5_000


class _IndexDispatcher:
    def __init__(self, index_service: IndexService) -> None:
        self.index_service = index_service

    def dispatch(self, requests: list[DispatchRequest]) -> None:
        self.index_service.build_index_batch(requests)


# The batch-wide size checks run in C over the prepared tuples (record, topic part, properties).
_RECORD = operator.itemgetter(0)
_PROPERTIES_BYTES = operator.itemgetter(2)
_TOTAL_SIZE = operator.attrgetter("total_size")


class FileStore(StoreReader):
    def __init__(self, config: StoreConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        self.commitlog = CommitLog(config, self.clock)
        self.cq_store = ConsumeQueueStore(config.consume_queue_dir, config.consume_queue_units_per_file)
        self.index_service = (IndexService(config.index_dir, config.index_hash_slot_num,
                                           config.index_num_max, self.clock,
                                           on_index_msg_timestamp=self._on_index_file_full)
                              if config.message_index_enable else None)
        self.topics = TopicConfigManager(config.config_dir, self.clock)
        self.groups = SubscriptionGroupManager(config.config_dir, self.clock)
        self.consumer_offsets = ConsumerOffsetManager(config.config_dir, self.clock)
        self.delay_offsets = DelayOffsetManager(config.config_dir, self.clock)
        self.auth = AuthConfigManager(config.config_dir, self.clock)
        self._listeners: list[Callable[[list[Arrival]], None]] = []
        self._services: list = []
        self._lock: StoreLock | None = None
        self.checkpoint: CheckpointFile | None = None
        self.reput = None
        self.group_commit: GroupCommitService | None = None
        self.clean: CleanService | None = None
        self.running = False
        self.recovery = None
        self._shutdown_lock = threading.Lock()
        self._topic_cache: dict[str, int] = {}
        self._topic_cache_version = -1
        self.pop = PopService(self)  # consumer groups' pop / ack state; revive loop started below

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self.config.store_root.mkdir(parents=True, exist_ok=True)
        self._lock = StoreLock(self.config.lock_path)
        try:
            self._start_locked()
        except BaseException:
            self._close_files()
            self._lock.release()
            raise

    def _close_files(self) -> None:
        if self.checkpoint is not None:
            self.checkpoint.close()
        if self.index_service is not None:
            self.index_service.close()
        self.cq_store.close()
        self.commitlog.close()

    def _start_locked(self) -> None:
        from services.store.reput import ReputService

        config = self.config
        abnormal = abort_file_exists(config.abort_path)
        if abnormal:
            log.warning("abort file found: the last stop was not clean; recovering")
        for manager in (self.topics, self.groups, self.consumer_offsets, self.delay_offsets, self.auth):
            manager.load()
        self.checkpoint = CheckpointFile(config.checkpoint_path)
        cp = self.checkpoint.loaded
        self.commitlog.mfq.load()
        self.cq_store.load()
        self.cq_store.recover()
        if self.index_service is not None:
            # RocketMQ drops index files newer than index_msg_timestamp after a crash (that
            # timestamp only moves when a file fills, so: every open file). Our offset checkpoint
            # says how far the index is durable, so with a valid one recovery truncates instead.
            trusted = not abnormal or cp.dispatched_phy_offset >= 0
            self.index_service.load(last_exit_ok=trusted, index_msg_timestamp=cp.index_msg_timestamp)
        self.recovery = recover(config, self.commitlog, self.cq_store, self.index_service, cp, abnormal)
        dispatchers = [self.cq_store] + ([_IndexDispatcher(self.index_service)] if self.index_service else [])
        self.reput = ReputService(self.commitlog, dispatchers, self._listeners, self.max_offset_in_queue)
        self.reput.reput_from_offset = self.recovery.reput_from_offset
        lost = self._consume_queue_units_lost(cp)
        self.reput.run_once()  # catch up before serving: queue offsets come from the ConsumeQueues
        holes = self.cq_store.queues_with_holes() if abnormal else []
        if holes:
            log.warning("ConsumeQueues with holes after an abnormal stop (%s): rebuilding them", ", ".join(holes[:5]))
        if lost or holes or not self._consume_queues_consistent():
            self._rebuild_consume_queues()
        self.commitlog.queue_offset_table = self.cq_store.queue_offset_table()
        self.cq_store.correct_min_offsets(self.commitlog.min_offset)
        # Recovery flushed the CommitLog to its end: record that before serving (the first
        # checkpoint save is just below), so a power cut before the next save still knows which
        # damage lies in the unflushed window (a torn tail) and which would be real corruption.
        self.checkpoint.current.flushed_phy_offset = self.commitlog.flushed_where
        create_abort_file(config.abort_path)
        self._start_services()
        self.running = True
        log.info("store started: commitlog [%d, %d), reput from %d, %d queues%s", self.commitlog.min_offset,
                 self.commitlog.max_offset, self.recovery.reput_from_offset, len(self.cq_store.queues),
                 " (recovered after abnormal stop)" if abnormal else "")

    def _start_services(self) -> None:
        config = self.config
        assert self.checkpoint is not None and self.reput is not None
        cq_flush = ConsumeQueueFlushService(
            config.flush_consume_queue_interval_ms, self._dispatched_state,
            self._flush_derived, self.checkpoint, lambda: self._logics_timestamp())
        cq_flush.run_once()
        self._cq_flush = cq_flush
        if config.flush_mode is FlushMode.SYNC:
            self.group_commit = GroupCommitService(self.commitlog, self.checkpoint, config.sync_flush_timeout_ms)
            flusher = self.group_commit
        else:
            flusher = FlushService(self.commitlog, self.checkpoint, self.clock, config.flush_interval_ms,
                                   config.flush_least_pages, config.flush_thorough_interval_ms)
        self.clean = CleanService(config, self.clock, self.commitlog, self.cq_store, self.index_service,
                                  self.reput.dispatch_lock, disk_usage=self._disk_usage_ratio)
        offsets = PeriodicTask("persist-offsets", CONSUMER_OFFSET_PERSIST_INTERVAL_MS, self._persist_offsets)
        # Stopped in reverse order: the pop revive loop first, consumer offsets persisted after it.
        self._services = [self.reput, flusher, cq_flush, self.clean, offsets, self.pop.revive]
        if config.warm_ahead_bytes > 0:
            warm = WarmAheadService(self.commitlog.mfq, config.warm_ahead_bytes)
            self.commitlog.on_populate_low = warm.wake
            self._services.insert(0, warm)
        for service in self._services:
            service.start()

    def shutdown(self) -> None:
        with self._shutdown_lock:
            if not self.running:
                return
            self.running = False
            assert self.reput is not None and self.checkpoint is not None
            for service in reversed(self._services):
                if service is not self.reput:
                    service.stop()
            self.reput.stop()
            self.reput.run_once()
            caught_up = self.reput.dispatch_behind_bytes == 0
            try:
                self.commitlog.flush(0)
            except OSError as exc:  # sticky write error: recover on the next start
                log.error("final CommitLog flush failed: %s; keeping the abort file", exc)
                caught_up = False
            self._flush_derived()
            cp = self.checkpoint.current
            cp.dispatched_phy_offset, cp.cq_max_offset_sum = self._dispatched_state()
            cp.flushed_phy_offset = self.commitlog.flushed_where
            cp.logics_msg_timestamp = self._logics_timestamp()
            self.checkpoint.save()
            self._persist_offsets()
            self._close_files()
            if caught_up:
                delete_abort_file(self.config.abort_path)
            if self._lock is not None:
                self._lock.release()
            log.info("store stopped%s", "" if caught_up else " with dispatch behind; abort file kept")

    def halt(self) -> None:
        """Stop as ``kill -9`` would: threads end, nothing is flushed or checkpointed, the abort
        file stays, written pages stay in the page cache. For fault-injection tests."""
        with self._shutdown_lock:
            if not self.running:
                return
            self.running = False
            for service in self._services:
                service.halt()
            self._close_files()  # the IndexFile's close flushes: its pages are in the page cache anyway
            self._lock.release()

    # -- internals --------------------------------------------------------------------------
    def _dispatched_state(self) -> tuple[int, int]:
        """(reput_from_offset, sum of ConsumeQueue max offsets), consistent with each other."""
        with self.reput.dispatch_lock:
            return self.reput.reput_from_offset, self.cq_store.max_offset_sum()

    def _flush_derived(self) -> None:
        with self.reput.dispatch_lock:
            self.cq_store.flush(0)
        if self.index_service is not None:
            self.index_service.flush()

    def _logics_timestamp(self) -> int:
        return max((cq.last_store_timestamp_ms for cq in self.cq_store.queues.values()), default=0)

    def _on_index_file_full(self, end_timestamp_ms: int) -> None:
        if self.checkpoint is not None:
            self.checkpoint.current.index_msg_timestamp = end_timestamp_ms

    def _persist_offsets(self) -> None:
        self.consumer_offsets.persist_if_dirty()
        self.delay_offsets.persist()

    def _disk_usage_ratio(self) -> float:
        usage = shutil.disk_usage(self.config.store_root)
        return usage.used / usage.total if usage.total else 0.0

    def _consume_queue_units_lost(self, cp) -> bool:
        """Did ConsumeQueue units below the checkpoint's dispatched offset disappear?"""
        if cp.dispatched_phy_offset < self.commitlog.min_offset or cp.cq_max_offset_sum < 0:
            # No checkpoint, or one older than retention: units in deleted files cannot be told
            # apart, and a needless rebuild would forget queues whose records all aged out.
            return False
        held = self.cq_store.units_below_sum(cp.dispatched_phy_offset)
        if held != cp.cq_max_offset_sum:
            log.warning("ConsumeQueues hold %d units below phy_offset %d, the checkpoint recorded %d: "
                        "rebuilding them", held, cp.dispatched_phy_offset, cp.cq_max_offset_sum)
            return True
        return False

    def _consume_queues_consistent(self) -> bool:
        """Each queue's last unit must point at a record of that queue with that offset."""
        for (topic, queue_id), cq in self.cq_store.queues.items():
            if cq.max_offset <= cq.min_offset:
                continue
            unit = cq.get_unit(cq.max_offset - 1)
            if unit is None:
                return False
            phy_offset, size, _ = unit
            if phy_offset < self.commitlog.min_offset:
                continue
            rec = self.commitlog.read_record(phy_offset)
            if (rec is None or rec.total_size != size or rec.topic != topic
                    or rec.queue_id != queue_id or rec.queue_offset != cq.max_offset - 1):
                log.warning("ConsumeQueue %s-%d disagrees with the CommitLog at queue offset %d",
                            topic, queue_id, cq.max_offset - 1)
                return False
        return True

    def _rebuild_consume_queues(self) -> None:
        """Throw every ConsumeQueue away and re-dispatch the whole CommitLog into new ones."""
        log.warning("rebuilding all ConsumeQueues from the CommitLog")
        for cq in list(self.cq_store.queues.values()):
            cq.destroy()
        self.cq_store.queues = {}
        self.commitlog.dispatch_backlog.clear()
        self.reput.reput_from_offset = self.commitlog.min_offset
        saved = self.reput.dispatchers
        self.reput.dispatchers = [self.cq_store]
        try:
            self.reput.run_once()
        finally:
            self.reput.dispatchers = saved

    # -- writes -----------------------------------------------------------------------------
    def put_messages(self, messages: list[MessageRecord], allow_system_topics: bool = False) -> list[PutResult]:
        """Validate, append and (SYNC) wait for the flush of a batch. All or nothing on bad input."""
        status, error = self.put_batch(messages, allow_system_topics)
        if status is PutStatus.PUT_OK or status is PutStatus.FLUSH_DISK_TIMEOUT:
            prefix = self.commitlog.store_host_prefix
            return [PutResult(status, rec.phy_offset, rec.total_size, rec.queue_offset, rec.store_timestamp_ms,
                              "", prefix) for rec in messages]
        return [PutResult(status, error=error) for _ in messages]

    def put_batch(self, messages: list[MessageRecord], allow_system_topics: bool = False) -> tuple[PutStatus, str]:
        """:meth:`put_messages` without a result object per message: (status, error) of the
        whole batch (it is all or nothing). When the batch was appended (PUT_OK, or
        FLUSH_DISK_TIMEOUT in SYNC mode), each record holds its phy_offset, queue_offset,
        total_size and store_timestamp_ms."""
        if not self.running:
            return PutStatus.SERVICE_NOT_AVAILABLE, "store is not running"
        if self.clean is not None and self.clean.disk_full:
            return PutStatus.SERVICE_NOT_AVAILABLE, "disk full: writes refused"
        prepared, bad = self._prepare(messages, allow_system_topics)
        if bad is not None:
            i, status, error = bad
            return status, error if len(messages) == 1 else f"message {i} of the batch: {error}; nothing written"
        if not prepared:
            return PutStatus.PUT_OK, ""
        try:
            self.commitlog.append_batch(prepared)
        except OSError as exc:
            log.error("append failed: %s", exc)
            return PutStatus.UNKNOWN_ERROR, f"write failed: {exc}"
        self.reput.notify_append()
        if self.group_commit is not None and any(
                rec.properties.get(WAIT_STORE_MSG_OK) != "false" for rec in messages):
            last = messages[-1]
            if not self.group_commit.wait_for_flush(last.phy_offset + last.total_size):
                return PutStatus.FLUSH_DISK_TIMEOUT, ""
        return PutStatus.PUT_OK, ""

    def _prepare(self, messages: list[MessageRecord], allow_system_topics: bool
                 ) -> tuple[list[tuple[MessageRecord, bytes, bytes]], tuple[int, PutStatus, str] | None]:
        """The batch prepared for the CommitLog, and (index, status, error) of the first message
        that cannot be stored (None: all can). Cheap checks run first for the whole batch; the
        rare failing message is explained by :meth:`_validate` / :meth:`_check_sizes`."""
        topic_checks: dict[str, tuple[PutStatus | None, str, int]] = {}
        body_max = self.config.body_size_max_bytes
        first_bad: tuple[int, PutStatus, str] | None = None
        last_topic = None
        write_queue_nums = 0
        for i, rec in enumerate(messages):
            if rec.topic != last_topic:
                last_topic = rec.topic
                check = topic_checks.get(last_topic)
                if check is None:
                    check = topic_checks[last_topic] = self._check_topic(last_topic, allow_system_topics)
                write_queue_nums = check[2]
            body = rec.body
            if check[0] is not None or body is None or len(body) > body_max or not 0 <= rec.queue_id < write_queue_nums:
                status, error = self._validate(rec, allow_system_topics, topic_checks)
                if status is not None:
                    first_bad = (i, status, error)
                    messages = messages[:i]
                    break
        try:
            prepared = self.commitlog.prepare_batch(messages)
        except PropertiesError as exc:
            first_bad = (exc.index, PutStatus.MESSAGE_ILLEGAL, str(exc))
            prepared = self.commitlog.prepare_batch(messages[:exc.index])
        properties_max = PROPERTIES_SIZE_MAX_BYTES - (20 if self.config.append_prop_crc else 0)
        record_max = min(self.config.record_size_max_bytes, self.config.commitlog_file_size_bytes - 8)
        if prepared and (max(map(len, map(_PROPERTIES_BYTES, prepared))) > properties_max
                         or max(map(_TOTAL_SIZE, map(_RECORD, prepared))) > record_max):
            for i, (rec, _, properties_bytes) in enumerate(prepared):  # which one (rare)
                status, error = self._check_sizes(rec, len(properties_bytes))
                if status is not None:
                    return prepared, (i, status, error)
        return prepared, first_bad

    def _validate(self, rec: MessageRecord, allow_system_topics: bool,
                  topic_checks: dict[str, tuple[PutStatus | None, str, int]]) -> tuple[PutStatus | None, str]:
        """Check one message; ``topic_checks`` memoises the per-topic part within a batch."""
        check = topic_checks.get(rec.topic)
        if check is None:
            check = topic_checks[rec.topic] = self._check_topic(rec.topic, allow_system_topics)
        status, error, write_queue_nums = check
        if status is not None:
            return status, error
        if rec.body is None:
            return PutStatus.MESSAGE_ILLEGAL, "message body is missing"
        if len(rec.body) > self.config.body_size_max_bytes:
            return PutStatus.MESSAGE_ILLEGAL, (
                f"body of {len(rec.body)} bytes exceeds the limit of {self.config.body_size_max_bytes}")
        if rec.queue_id < 0 or rec.queue_id >= write_queue_nums:
            return PutStatus.QUEUE_ID_ILLEGAL, (
                f"queue id {rec.queue_id} is out of range: topic {rec.topic} has {write_queue_nums} write queues")
        return None, ""  # properties are checked while they are encoded (CommitLog.prepare)

    def _check_topic(self, topic: str, allow_system_topics: bool) -> tuple[PutStatus | None, str, int]:
        """(status, error, write queue count) for puts to ``topic``; creates it when allowed."""
        error = validate_topic_name(topic)
        if error:
            return PutStatus.TOPIC_ILLEGAL, error, 0
        if is_system_topic(topic):
            if not allow_system_topics:
                return PutStatus.TOPIC_ILLEGAL, f"topic {topic} is a system topic", 0
            return None, "", 1 << 30  # internal callers choose system queues themselves
        write_queue_nums = self._write_queue_nums(topic)
        if write_queue_nums is None:
            if not self.config.auto_create_topic_enable:
                return PutStatus.TOPIC_NOT_FOUND, f"topic {topic} does not exist", 0
            nums = self.config.default_topic_queue_nums
            write_queue_nums = self.topics.create_or_update(
                TopicConfig(topic_name=topic, read_queue_nums=nums, write_queue_nums=nums)).write_queue_nums
        return None, "", write_queue_nums

    def _write_queue_nums(self, topic: str) -> int | None:
        """Write queue count of ``topic`` from a cache refreshed whenever the topic table changes."""
        version = self.topics.data_version.counter
        if version != self._topic_cache_version:
            self._topic_cache = {t.topic_name: t.write_queue_nums for t in self.topics.list()}
            self._topic_cache_version = version
        return self._topic_cache.get(topic)

    def _check_sizes(self, rec: MessageRecord, properties_len: int) -> tuple[PutStatus | None, str]:
        if self.config.append_prop_crc:
            properties_len += 20  # the CRC trailer counts too
        if properties_len > PROPERTIES_SIZE_MAX_BYTES:
            return PutStatus.PROPERTIES_SIZE_EXCEEDED, (
                f"properties of {properties_len} bytes exceed {PROPERTIES_SIZE_MAX_BYTES}")
        if rec.total_size > self.config.record_size_max_bytes:
            return PutStatus.MESSAGE_ILLEGAL, f"record of {rec.total_size} bytes is too large"
        if rec.total_size + 8 > self.config.commitlog_file_size_bytes:
            return PutStatus.MESSAGE_ILLEGAL, (
                f"record of {rec.total_size} bytes does not fit a {self.config.commitlog_file_size_bytes}-byte segment")
        return None, ""

    # -- listeners and stats ------------------------------------------------------------------
    def add_arrival_listener(self, listener: Callable[[list[Arrival]], None]) -> Callable[[], None]:
        self._listeners.append(listener)

        def unsubscribe() -> None:
            try:
                self._listeners.remove(listener)
            except ValueError:
                pass
        return unsubscribe

    def delete_topic(self, topic: str) -> bool:
        """Remove a topic's config, ConsumeQueues and consumer offsets."""
        existed = self.topics.delete(topic)
        with self.reput.dispatch_lock:
            self.cq_store.remove_topic(topic)
        self.consumer_offsets.remove_topic(topic)
        self._cq_flush.run_once()  # the checkpoint's queue-offset sum must not count the topic
        return existed

    def stats(self) -> StoreStats:
        commitlog = self.commitlog
        return StoreStats(
            put_messages_total=commitlog.put_messages_total, put_bytes_total=commitlog.put_bytes_total,
            commitlog_min_offset=commitlog.min_offset, commitlog_max_offset=commitlog.max_offset,
            flushed_offset=commitlog.flushed_where, confirm_offset=commitlog.confirm_offset,
            reput_from_offset=self.reput.reput_from_offset if self.reput else 0,
            dispatch_behind_bytes=self.reput.dispatch_behind_bytes if self.reput else 0,
            flush_behind_bytes=commitlog.mfq.flush_behind_bytes(),
            storage_size_bytes=commitlog.mfq.total_size_bytes() + self.cq_store.total_size_bytes(),
            topic_count=len(self.topics.list()), group_count=len(self.groups.list()),
            flush_mode=self.config.flush_mode.value)


__all__ = ["FileStore", "GetResult", "GetStatus", "decode_offset_msg_id"]
