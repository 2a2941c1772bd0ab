"""Replication of the store's ``config/`` tables (issue 16): topics.json, subscriptionGroup.json,
consumerOffset.json, delayOffset.json and auth.json reach the slaves on the ``Replicate`` stream
that carries the CommitLog. RocketMQ's ``SlaveSynchronize`` has each slave pull them from its
master every 10 s over separate RPCs; pyrmq's master pushes them on the stream each slave already
holds open. No gRPC here: ``rpc/replicate.py`` sends what ``ConfigPublisher.due`` returns,
``rpc/replicate_client.py`` hands what arrives to ``HAClient.on_config``, which installs it here.

* What is sent: a whole file's content, as the table would write it now (``encode``: the same
  bytes it persists), with the table's ``change_count``. Each table's counter moves on every
  change (consumer offsets: every commit, and every persist that bumps the file's dataVersion),
  so the publisher compares counters, never contents: a check costs one integer comparison
  per table, and a table is encoded only when it changed.
* When: every table right after the handshake, then those that changed, checked at most every
  ``ha_config_sync_interval_ms`` (so a burst of commits costs one send per interval).
* The slave: ``install`` decodes the content (nothing changes if it does not decode: logged,
  and the CommitLog keeps flowing), replaces the in-memory table and writes the file as the
  store writes its own (``metadata.write_atomically``: temp, fsync, rename, ``.bak``), so the
  slave's APIs answer the master's values and a restart of the slave loads them.
* ``transactionMetrics`` is not sent: it is derived from the CommitLog, and each replica's own
  reput dispatch counts it from the identical bytes.

What a failover repeats (store README, "What a failover keeps"): the changes of the last
interval that had not reached the slave, and every message in flight (pop state is memory).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from services.runtime.clock import Clock

log = logging.getLogger(__name__)


class ReplicatedTable(Protocol):
    """A ``config/`` table that reaches the slaves (topic_config, consumer_offsets, auth_config)."""

    path: Path

    @property
    def change_count(self) -> int: ...
    def encode(self) -> str: ...
    def install(self, text: str) -> None: ...


@dataclass(frozen=True)
class ConfigSnapshot:
    """One file's whole content on the master, at the table's ``change_count`` ``version``."""

    name: str  # the file name in config/
    content: bytes
    version: int


@dataclass(frozen=True)
class ConfigSyncStats:
    snapshots_sent: int  # master: files sent to slaves
    snapshots_installed: int  # slave: files installed
    snapshots_refused: int  # slave: files that did not decode or that this store does not have


class ConfigTables:
    """The tables a store replicates, by file name; the master's publishers and the slave's
    installs both go through here."""

    def __init__(self, tables: Sequence[ReplicatedTable], interval_ms: int, clock: Clock) -> None:
        self.tables = {table.path.name: table for table in tables}
        self.interval_ms = interval_ms
        self._clock = clock
        self._lock = threading.Lock()  # the counters below
        self._sent = 0
        self._installed = 0
        self._refused = 0

    def publisher(self) -> ConfigPublisher:
        """The sender state of one slave session (every table is due at once)."""
        return ConfigPublisher(self, self._clock)

    def install(self, name: str, content: bytes, version: int) -> bool:
        """A slave: make table ``name`` the master's ``content``; False (logged) when it cannot."""
        table = self.tables.get(name)
        try:
            if table is None:
                raise ValueError("this store has no such table")
            table.install(content.decode("utf-8"))
        except (ValueError, TypeError, KeyError) as exc:  # what a bad file raises on load, too
            log.error("replicated %s (version %d) not installed: %s", name, version, exc)
            with self._lock:
                self._refused += 1
            return False
        with self._lock:
            self._installed += 1
        return True

    def counted_sent(self, count: int) -> None:
        with self._lock:
            self._sent += count

    def stats(self) -> ConfigSyncStats:
        with self._lock:
            return ConfigSyncStats(self._sent, self._installed, self._refused)


class ConfigPublisher:
    """What one slave session has been sent: each table's ``change_count`` at its last send."""

    def __init__(self, tables: ConfigTables, clock: Clock) -> None:
        self._tables = tables
        self._clock = clock
        self._sent: dict[str, int] = {}
        self._next_check_ms: int | None = None

    def _now_ms(self) -> int:
        return round(self._clock.monotonic_s() * 1000)

    def wait_s(self) -> float:
        """Seconds until the next check is due (0: now)."""
        if self._next_check_ms is None:
            return 0.0
        return max(0, self._next_check_ms - self._now_ms()) / 1000

    def due(self) -> list[ConfigSnapshot]:
        """The tables that changed since they were last sent (all, the first time); nothing
        before the interval since the last check passed."""
        now_ms = self._now_ms()
        if self._next_check_ms is not None and now_ms < self._next_check_ms:
            return []
        self._next_check_ms = now_ms + self._tables.interval_ms
        snapshots = []
        for name, table in self._tables.tables.items():
            version = table.change_count  # read before encoding: a change meanwhile is sent next time
            if self._sent.get(name) != version:
                snapshots.append(ConfigSnapshot(name, table.encode().encode("utf-8"), version))
                self._sent[name] = version
        if snapshots:
            self._tables.counted_sent(len(snapshots))
        return snapshots
