"""ClassicOffsets: the commit offsets classic pulls carry, in memory, written to the store in
rounds; a failed write is kept for the next."""

from __future__ import annotations

from services.broker.classic_offsets import ClassicOffsets
from services.store.client.errors import StoreError


class Writer:
    def __init__(self) -> None:
        self.written: list[tuple[str, str, int, int]] = []
        self.down = False

    def commit_consumer_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        if self.down:
            raise StoreError("store down")
        self.written.append((group, topic, queue_id, offset))


def test_the_newest_commit_of_each_queue_is_written_once_per_round() -> None:
    writers = {"a": Writer(), "b": Writer()}
    offsets = ClassicOffsets(writers.__getitem__)
    for offset in (1, 5, 9):
        offsets.commit("a", "G", "T", 0, offset)
    offsets.commit("b", "G", "T", 0, 3)
    assert offsets.get("a", "G", "T", 0) == 9 and offsets.get("a", "G", "T", 1) is None
    assert offsets.run_once() == 2
    assert offsets.get("a", "G", "T", 0) is None  # written: the store's is current
    assert writers["a"].written == [("G", "T", 0, 9)] and writers["b"].written == [("G", "T", 0, 3)]
    assert offsets.run_once() == 0  # nothing changed since


def test_a_failed_round_is_written_by_the_next_and_a_stored_offset_needs_no_write() -> None:
    writer = Writer()
    offsets = ClassicOffsets(lambda name: writer)
    offsets.commit("a", "G", "T", 0, 4)
    writer.down = True
    assert offsets.run_once() == 0
    writer.down = False
    offsets.commit("a", "G", "T", 0, 6)
    assert offsets.run_once() == 1 and writer.written == [("G", "T", 0, 6)]
    offsets.commit("a", "G", "T", 1, 2)
    offsets.stored("a", "G", "T", 1, 8)  # UPDATE_CONSUMER_OFFSET wrote it already
    assert offsets.run_once() == 0 and offsets.get("a", "G", "T", 1) is None
