"""``FakeStore``: the broker's ``BrokerStore`` in memory (topics, groups, put outcomes with
per-queue offsets, look-up by phy offset and key) that records every PutMessages call. The
broker core tests use it (the ``fake_store`` fixture of tests/broker/conftest.py), and so do
tests/broker/test_plain_send_path.py and tests/scheduler/test_recall.py."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from services.store.client.model import (
    GroupInfo,
    PutOutcome,
    PutStatus,
    StoredMessage,
    StoreMessage,
    TopicInfo,
)


@dataclass
class FakeStore:
    """A BrokerStore in memory. ``outcome`` may override the status of every put."""

    topics: dict[str, TopicInfo] = field(default_factory=dict)
    groups: dict[str, GroupInfo] = field(default_factory=dict)
    calls: list[tuple[list[StoreMessage], bool]] = field(default_factory=list)
    outcome: Callable[[StoreMessage], PutStatus] | None = None
    next_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    records: dict[int, StoredMessage] = field(default_factory=dict)  # phy offset -> record
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put_messages(self, messages: list[StoreMessage], allow_system_topics: bool) -> list[PutOutcome]:
        with self.lock:
            self.calls.append((list(messages), allow_system_topics))
            results = []
            for message in messages:
                status = self.outcome(message) if self.outcome else PutStatus.PUT_OK
                if status is not PutStatus.PUT_OK:
                    results.append(PutOutcome(status, error=f"fake {status.name}"))
                    continue
                key = (message.topic, message.queue_id)
                offset = self.next_offsets.get(key, 0)
                self.next_offsets[key] = offset + 1
                phy_offset = 1000 * (len(self.records) + 1)
                self.records[phy_offset] = StoredMessage(
                    topic=message.topic,
                    queue_id=message.queue_id,
                    body=message.body,
                    properties=dict(message.properties),
                    queue_offset=offset,
                    phy_offset=phy_offset,
                    sys_flag=message.sys_flag,
                    born_timestamp_ms=message.born_timestamp_ms,
                    born_host=message.born_host,
                    reconsume_times=message.reconsume_times,
                    prepared_transaction_offset=message.prepared_transaction_offset,
                )
                results.append(PutOutcome(PutStatus.PUT_OK, queue_offset=offset, phy_offset=phy_offset))
            return results

    def look_message(self, phy_offset: int) -> StoredMessage | None:
        return self.records.get(phy_offset)

    def query_messages_by_key(self, topic: str, key: str, max_num: int) -> list[StoredMessage]:
        return [
            r
            for r in self.records.values()
            if r.topic == topic
            and (r.properties.get("UNIQ_KEY") == key or key in r.properties.get("KEYS", "").split(" "))
        ][:max_num]

    def get_topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def create_topic(self, topic: TopicInfo) -> TopicInfo:
        self.topics[topic.name] = topic
        return topic

    def get_group(self, name: str) -> GroupInfo | None:
        return self.groups.get(name)

    def close(self) -> None:
        pass

    @property
    def put_messages_sent(self) -> list[StoreMessage]:
        return [m for batch, _ in self.calls for m in batch]
