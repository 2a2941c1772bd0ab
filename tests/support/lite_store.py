"""Lite topics on a store core, for the store tests: a LITE parent, lite messages, puts that must
succeed (dispatched before they return)."""

from __future__ import annotations

from services.domain.lite import LITE_TOPIC
from services.domain.statuses import PutStatus
from services.store.metadata.config_files import TopicConfig
from tests.support.filestore import message

PARENT = "LiteParent"


def create_parent(store, queues: int = 4) -> None:
    config = TopicConfig(topic_name=PARENT, read_queue_nums=queues, write_queue_nums=queues)
    config.message_type = "LITE"
    store.topics.create_or_update(config)


def lite(lite_topic: str, body: bytes = b"x", queue_id: int = 0, topic: str = PARENT):
    return message(topic, queue_id, body, **{LITE_TOPIC: lite_topic})


def put_ok(store, *records) -> list:
    results = store.put_messages(list(records))
    assert all(r.status is PutStatus.PUT_OK for r in results), results
    store.reput.run_once()
    return results
