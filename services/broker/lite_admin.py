"""Lite topics in the admin answers (issue 18): a consumer group's offsets in lite topics
(``%LMQ%$parent$lite`` queue 0 in the store's offset table) are reported per LITE parent, never
one status row per lite topic, and read in pages of the store's ListLiteTopics, never one call per
lite topic. No gRPC here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from services.domain.lite import split_lmq_name
from services.store.client.model import LiteTopicView


class LiteStore(Protocol):
    def list_lite_topics(
        self, parent: str, group: str = "", backlog_only: bool = False, after: str = "", limit: int = 0
    ) -> tuple[list[LiteTopicView], str]: ...


def split_committed(committed: dict[str, dict[int, int]]) -> tuple[dict[str, dict[int, int]], set[str]]:
    """(the offsets of ordinary topics, the LITE parents the group has lite topic offsets under)."""
    plain: dict[str, dict[int, int]] = {}
    parents: set[str] = set()
    for topic, queues in committed.items():
        lite = split_lmq_name(topic)
        if lite is None:
            plain[topic] = queues
        else:
            parents.add(lite[0])
    return plain, parents


def consumed_lite_topics(store: LiteStore, group: str, parent: str) -> Iterator[tuple[LiteTopicView, int]]:
    """Each lite topic of ``parent`` the group has an offset in, with its lag
    (``max_offset - max(consumer_offset, min_offset)``, as any queue's)."""
    after = ""
    while True:
        page, after = store.list_lite_topics(parent, group, after=after)
        for row in page:
            if row.consumer_offset >= 0:
                yield row, max(0, row.max_offset - max(row.consumer_offset, row.min_offset))
        if not after:
            return


def lite_lag(store: LiteStore, group: str, parent: str) -> tuple[int, int]:
    """(lite topics of ``parent`` the group has consumed, their summed lag)."""
    count = lag = 0
    for _, behind in consumed_lite_topics(store, group, parent):
        count += 1
        lag += behind
    return count, lag
