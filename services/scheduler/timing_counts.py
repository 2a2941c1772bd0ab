"""TimingCounts: timer messages waiting in the wheel, per real topic (RocketMQ's ``TimerMetrics``).

RocketMQ 5 keeps ``timingCount[REAL_TOPIC]``: +1 when a timer message is enqueued into the
wheel, -1 when it is dequeued (delivered, or rolled: the rolled copy is +1 again when it is
enqueued), persisted in ``config/timermetrics`` and exported as ``rocketmq_timing_messages``.
pyrmq keeps the same count, on the timer thread only:

* +1 when a unit is appended for a message with a ``REAL_TOPIC`` (recall markers never count);
* -1 when the dequeue finishes the unit: delivered, rolled, recalled (skipped because a marker
  named it) or dropped. RocketMQ subtracts a recalled message when its *marker* is enqueued and
  adds it back if no target turns up; pyrmq subtracts it when its slot is read and the marker
  wins, so a recall of an unknown message never makes a count wrong.

Restart (the invariant that makes the persisted counts exact): at each checkpoint (read pointer
C, TimerLog end P) the file holds, per topic, the units below P whose slot is at or after C,
finished or not: ``live`` plus the units finished in slots >= C (``_finished``). Slots before C
are done, so their units are out of both. On start-up:

1. the counts of the checkpoint are loaded (``.bak`` if the main file is newer than the
   checkpoint: it is written just before ``timercheck``);
2. units the recovery scan finds after P (appended after the checkpoint) are added;
3. the dequeue re-reads every slot from C: each unit it finds already done is subtracted
   (``finish``), each other unit is subtracted when it is finished.

Units found after a restart are known by their TimerLog ``topic_hash`` (JavaHash(REAL_TOPIC),
RocketMQ's field for this), mapped to a topic already counted when exactly one has that hash,
else read from the store. Without a usable file (first start after an upgrade, a checkpoint
that is not trusted) the counts are rebuilt from the TimerLog: every unit of slot >= C, grouped
by hash, one store read per hash (two topics whose Java hashes collide are then merged, and
messages gone from the CommitLog are not counted; both are logged).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np

from services.domain.format.java_compat import java_string_hash
from services.domain.format.properties_format import REAL_TOPIC
from services.domain.format.timerlog_format import MAGIC_DELETE, UNIT_DTYPE, UNIT_SIZE_BYTES
from services.domain.format.timermetrics_format import TimerMetricsDocument, TimingCount
from services.scheduler.store_access import SchedulerStore
from services.scheduler.timer_log import SCAN_CHUNK_UNITS, TimerLog
from services.store.client.model import StoredMessage

log = logging.getLogger(__name__)

LOOKUP_BATCH_MESSAGES = 256  # records per LookMessages while resolving hashes


class TimingCounts:
    def __init__(self) -> None:
        self.live: dict[str, int] = {}  # topic -> units waiting (the exported gauge)
        self._topics_by_hash: dict[int, set[str]] = {}
        self._finished: dict[int, dict[str, int]] = {}  # slot -> topic -> units finished there
        # topic hash -> [units, CommitLog offset, size of one of their messages]: counted at
        # start-up, topic not known yet (``resolve`` on the first run, which may read the store)
        self.unresolved: dict[int, list[int]] = {}
        self._written: dict[str, TimingCount] | None = None  # what the file holds (None: unknown)

    # -- counting (timer thread) ----------------------------------------------------------------
    def add(self, topic: str, delta: int) -> None:
        count = self.live.get(topic)
        if count is None:
            self._topics_by_hash.setdefault(java_string_hash(topic), set()).add(topic)
            count = 0
        self.live[topic] = count + delta

    def finish(self, topic: str, slot_ms: int) -> None:
        """A unit of ``topic`` in ``slot_ms`` was delivered, rolled, recalled or dropped."""
        self.add(topic, -1)
        per_slot = self._finished.get(slot_ms)
        if per_slot is None:
            per_slot = self._finished[slot_ms] = {}
        per_slot[topic] = per_slot.get(topic, 0) + 1

    def topic_of_hash(self, topic_hash: int) -> str | None:
        """The counted topic with this JavaHash, if exactly one has it."""
        topics = self._topics_by_hash.get(topic_hash)
        return next(iter(topics)) if topics is not None and len(topics) == 1 else None

    def snapshot(self) -> tuple[tuple[str, int], ...]:
        """(topic, count) sorted; callable from any thread (``dict.copy`` holds the GIL)."""
        return tuple(sorted(self.live.copy().items()))

    # -- start-up ---------------------------------------------------------------------------
    def load(self, document: TimerMetricsDocument) -> None:
        for topic, entry in document.timing_count.items():
            self.add(topic, entry.count)
        self._written = dict(document.timing_count)

    def note_unit(self, topic_hash: int, offset_py: int, size_py: int, units: int = 1) -> None:
        """``units`` units whose topic is known only by its hash (resolved on the first run)."""
        entry = self.unresolved.get(topic_hash)
        if entry is None:
            self.unresolved[topic_hash] = [units, offset_py, size_py]
        else:
            entry[0] += units

    def resolve(self, store: SchedulerStore) -> int:
        """Give the units noted at start-up their topics: by hash where a counted topic has it,
        else from one of their messages (one store read per hash). Topics resolved."""
        pending: list[tuple[int, list[int]]] = []
        for topic_hash, entry in self.unresolved.items():
            topic = self.topic_of_hash(topic_hash)
            if topic is None:
                pending.append((topic_hash, entry))
        records: dict[int, StoredMessage] = {}
        for start in range(0, len(pending), LOOKUP_BATCH_MESSAGES):
            batch = pending[start : start + LOOKUP_BATCH_MESSAGES]
            records.update(_look_up(store, [(entry[1], entry[2]) for _, entry in batch]))
        resolved = 0
        for topic_hash, entry in self.unresolved.items():
            topic = self.topic_of_hash(topic_hash)
            if topic is None:
                record = records.get(entry[1])
                topic = record.properties.get(REAL_TOPIC) if record is not None else None
                if topic is not None and java_string_hash(topic) != topic_hash:
                    topic = None
            if topic is None:
                log.warning(
                    "%d timer units of topic hash %d: no message names their topic (gone from the "
                    "CommitLog?); not counted in rocketmq_timing_messages",
                    entry[0],
                    topic_hash,
                )
                continue
            self.add(topic, entry[0])
            resolved += 1
        self.unresolved = {}
        return resolved

    # -- persistence ----------------------------------------------------------------------------
    def persisted(self, read_time_ms: int) -> dict[str, int]:
        """The counts the file holds for a checkpoint at ``read_time_ms``: live units plus
        those finished in slots at or after it (the dequeue will read those slots again)."""
        for slot_ms in [slot for slot in self._finished if slot < read_time_ms]:
            del self._finished[slot_ms]
        counts = dict(self.live)
        for per_slot in self._finished.values():
            for topic, finished in per_slot.items():
                counts[topic] = counts.get(topic, 0) + finished
        return counts

    def document(self, read_time_ms: int, counter: int, now_ms: int) -> TimerMetricsDocument | None:
        """The file for checkpoint ``counter``; None when it would hold the counts it holds."""
        counts = self.persisted(read_time_ms)
        written = self._written if self._written is not None else {}
        if self._written is not None and len(counts) == len(written):
            if all(t in written and written[t].count == n for t, n in counts.items()):
                return None
        timing = {
            topic: written[topic] if topic in written and written[topic].count == n else TimingCount(n, now_ms)
            for topic, n in counts.items()
        }
        self._written = timing
        return TimerMetricsDocument(counter=counter, timestamp_ms=now_ms, timing_count=timing)


def _look_up(store: SchedulerStore, refs: list[tuple[int, int]]) -> dict[int, StoredMessage]:
    """The records at ``refs`` whose size matches (LookMessages leaves out what it cannot find)."""
    sizes = dict(refs)
    records = store.look_messages(refs) if refs else {}
    return {offset: record for offset, record in records.items() if record.store_size_bytes == sizes.get(offset)}


def rebuild_from_log(counts: TimingCounts, timer_log: TimerLog, read_time_ms: int) -> int:
    """Note every unit (not a recall marker) whose slot is at or after ``read_time_ms``, by topic
    hash (numpy over the segments, in chunks). Units noted."""
    noted = 0
    for units in _unit_chunks(timer_log):
        delayed = units["write_time_ms"].astype(np.int64) + units["delay_ms"].astype(np.int64)
        keep = units[((units["magic"] & MAGIC_DELETE) == 0) & (delayed >= read_time_ms)]
        if not len(keep):
            continue
        hashes, first, totals = np.unique(keep["topic_hash"].astype(np.int64), return_index=True, return_counts=True)
        for topic_hash, index, total in zip(hashes.tolist(), first.tolist(), totals.tolist()):
            counts.note_unit(topic_hash, int(keep["offset_py"][index]), int(keep["size_py"][index]), total)
        noted += len(keep)
    return noted


def _unit_chunks(timer_log: TimerLog) -> Iterator[np.ndarray]:
    size = timer_log.segment_size_bytes
    chunk_bytes = SCAN_CHUNK_UNITS * UNIT_SIZE_BYTES
    for start in timer_log.segment_starts():
        for offset in range(0, size - size % UNIT_SIZE_BYTES, chunk_bytes):
            if start + offset >= timer_log.write_pos:
                return
            data = timer_log.read_range(start, offset, min(chunk_bytes, size - offset))
            units = np.frombuffer(data[: len(data) - len(data) % UNIT_SIZE_BYTES], dtype=UNIT_DTYPE)
            valid = units[units["size"] == UNIT_SIZE_BYTES]
            yield valid
            if len(valid) < len(units):
                break
