"""PopService in the core for tests: the ``open_store`` / ``store`` fixtures (a FileStore from
``make_store`` with the revive loop halted: redelivery is driven by hand; tests/store/conftest.py
exposes them), the topic/group names, and helpers that create the topic, put and dispatch,
pop, revive, ack and read the committed offset. Used by tests/store/test_pop.py and
test_pop_sql.py."""

from __future__ import annotations

import pytest

from services.store.metadata.config_files import TopicConfig
from services.store.pop.model import AckStatus, PopResult
from services.store.store import FileStore
from tests.support.filestore import message

TOPIC = "TopicPop"
GROUP = "GroupPop"
RETRY = "%RETRY%GroupPop_TopicPop"  # the pop retry topic of (GROUP, TOPIC)
DLQ = "%DLQ%GroupPop"
INVISIBLE_MS = 30_000


@pytest.fixture
def open_store(make_store):
    def open_() -> FileStore:
        store = make_store()
        store.pop.revive.halt()  # the tests drive redelivery with run_once()
        return store

    return open_


@pytest.fixture
def store(open_store) -> FileStore:
    return open_store()


def create_topic(store: FileStore, topic: str = TOPIC, queues: int = 1) -> None:
    store.topics.create_or_update(TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues))


def put(store: FileStore, *records) -> list:
    results = store.put_messages(list(records))
    assert all(r.ok for r in results), results
    store.reput.run_once()
    return results


def put_bodies(store: FileStore, *bodies: bytes, topic: str = TOPIC, queue_id: int = 0) -> list:
    return put(store, *(message(topic, queue_id, body) for body in bodies))


def pop(
    store: FileStore,
    group: str = GROUP,
    topic: str = TOPIC,
    queue_id: int = -1,
    max_count: int = 32,
    invisible_ms: int = INVISIBLE_MS,
    **kwargs,
) -> PopResult:
    return store.pop.pop(group, topic, queue_id, max_count, invisible_ms, **kwargs)


def revive(store: FileStore) -> None:
    store.pop.revive.run_once()
    store.reput.run_once()


def bodies(result: PopResult) -> list[bytes]:
    return [m.record.body for m in result.messages]


def ack_all(store: FileStore, result: PopResult, group: str = GROUP) -> None:
    for m in result.messages:
        assert store.pop.ack(group, m.topic, m.receipt_handle) is AckStatus.OK


def committed(store: FileStore, topic: str = TOPIC, queue_id: int = 0, group: str = GROUP) -> int:
    return store.consumer_offsets.query_offset(group, topic, queue_id)
