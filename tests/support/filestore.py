"""A FileStore for tests: ``small_config`` (tiny segments, so files roll and queues fill
quickly), ``message`` (a MessageRecord with test defaults), and the ``clock`` (ManualClock)
and ``make_store`` fixtures (started stores, shut down after the test; tests/store/conftest.py)."""

from __future__ import annotations

import pytest

from services.domain.format.commitlog_format import MessageRecord
from services.runtime.clock import ManualClock
from services.store.config import FlushMode, StoreConfig
from services.store.store import FileStore


def small_config(root, **overrides) -> StoreConfig:
    """Tiny segments so tests roll files, fill ConsumeQueues and IndexFiles quickly."""
    values = dict(
        store_root=root,
        commitlog_file_size_bytes=64 * 1024,
        consume_queue_units_per_file=64,
        index_hash_slot_num=64,
        index_num_max=256,
        flush_interval_ms=50,
        flush_consume_queue_interval_ms=50,
        warm_mapped_files=False,
    )
    values.update(overrides)
    return StoreConfig(**values)


def message(topic="TopicTest", queue_id=0, body=b"hello", tags=None, keys=None, **props) -> MessageRecord:
    properties = dict(props)
    if tags:
        properties["TAGS"] = tags
    if keys:
        properties["KEYS"] = keys
    return MessageRecord(
        topic=topic, queue_id=queue_id, body=body, properties=properties, born_timestamp_ms=1_700_000_000_000
    )


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def make_store(tmp_path, clock):
    stores = []

    def make(flush_mode=FlushMode.ASYNC, **overrides) -> FileStore:
        store = FileStore(small_config(tmp_path / "store", flush_mode=flush_mode, **overrides), clock)
        store.start()
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.shutdown()
