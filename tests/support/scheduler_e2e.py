"""The scheduler end to end, against a real store: ``SCHEDULER_READY`` (the ready line of
``python -m services.scheduler``), ``delivered`` (every record of a topic's queues, read through
a GrpcStoreClient) and ``metric`` (one sample of a /metrics page). Used by
tests/scheduler/test_end_to_end.py and test_soak.py."""

from __future__ import annotations

import re
import urllib.request

from services.store.client.client import GrpcStoreClient
from services.store.client.model import StoredMessage

SCHEDULER_READY = re.compile(
    r"^pyrmq-scheduler ready grpc=(?P<grpc>\S+) metrics=(?P<metrics>\S+) "
    r"store=(?P<store>\S+) data=(?P<data>\S+)$"
)


def delivered(store: GrpcStoreClient, topic: str, queues: int = 8) -> list[StoredMessage]:
    records = []
    for queue_id in range(queues):
        offset = 0
        while (result := store.get_messages(topic, queue_id, offset, 256)).messages:
            records += result.messages
            offset = result.next_begin_offset
    return records


def metric(url: str, name: str) -> float:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    match = re.search(rf"^{name} (\S+)$", text, re.M)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))
