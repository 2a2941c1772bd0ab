"""Disk full (docs/durability.md, T1.6 in small): ENOSPC when the CommitLog needs a new segment. Every
put that did not land gets a non-OK status, nothing acknowledged is lost or corrupt, and puts
succeed again once space is back, without a restart."""

from __future__ import annotations

import errno
import os

from services.domain.statuses import GetStatus, PutStatus
from services.store.store import FileStore
from tests.support.filestore import message, small_config
from tests.support.waits import wait_until


def test_enospc_on_a_new_segment_fails_puts_cleanly_and_writes_resume(tmp_path, clock, monkeypatch) -> None:
    config = small_config(tmp_path / "s", commitlog_file_size_bytes=64 * 1024)
    store = FileStore(config, clock)
    store.start()
    real_fallocate = os.posix_fallocate
    full = {"on": False, "refused": 0}

    def fallocate(fd: int, offset: int, length: int) -> None:
        if full["on"]:
            full["refused"] += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fallocate(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    acked, failed = [], []
    try:
        for n in range(200):  # 1 KiB bodies: 64 KiB segments roll every ~55 messages
            full["on"] = 60 <= n < 120
            [result] = store.put_messages([message(body=b"%05d" % n + b"x" * 1024)])
            (acked if result.status is PutStatus.PUT_OK else failed).append((n, result.status))
        assert full["refused"] > 0 and failed, "the disk-full window must have refused some puts"
        assert all(status is not PutStatus.PUT_OK for _, status in failed)
        assert any(n >= 120 for n, _ in acked), "puts must resume once space is back"
        assert max(n for n, _ in failed) < 125, failed  # resumed within a few puts of the space coming back
    finally:
        store.shutdown()
    store = FileStore(config, clock)
    store.start()
    try:
        store.reput.run_once()
        got = store.get_messages("TopicTest", 0, 0, max_count=10_000, max_bytes=1 << 30)
        assert got.status is GetStatus.FOUND
        assert [m.body[:5] for m in got.messages] == [b"%05d" % n for n, _ in acked]  # all acked, in order, intact
    finally:
        store.shutdown()


def test_a_consume_queue_file_refused_for_space_is_made_once_space_is_back(tmp_path, clock, monkeypatch) -> None:
    """ENOSPC when dispatch needs a new ConsumeQueue file: the put was acknowledged (its bytes are
    in the CommitLog), so once space is back the reput thread dispatches it, without a restart
    (found by the netns faults: a replica's disk filled to the last byte stopped dispatch for good)."""
    store = FileStore(small_config(tmp_path / "s"), clock)
    store.start()
    real_fallocate = os.posix_fallocate
    full = {"on": True}

    def fallocate(fd: int, offset: int, length: int) -> None:
        if full["on"] and "consumequeue" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fallocate(fd, offset, length)

    monkeypatch.setattr(os, "posix_fallocate", fallocate)
    try:
        [result] = store.put_messages([message("NewTopic", 0, b"kept")])
        assert result.status is PutStatus.PUT_OK
        wait_until(lambda: isinstance(store.reput.error, OSError), 5.0, "the dispatch met ENOSPC")
        full["on"] = False
        wait_until(
            lambda: store.get_messages("NewTopic", 0, 0).status is GetStatus.FOUND, 5.0, "dispatched once space is back"
        )
        assert [m.body for m in store.get_messages("NewTopic", 0, 0).messages] == [b"kept"]
        assert store.reput.error is None
    finally:
        store.shutdown()
