"""The official rocketmq-python-client 5.1.2 PushConsumer against the broker's receipt-handle
renewal (services/broker/renewal.py): a listener that runs longer than the invisible time gets
no duplicate, and FIFO order holds while messages are renewed.

The push consumer never sends an invisible duration (it receives with ``auto_renew``), so the
broker's ``auto_renew_invisible_ms`` is what the listener must outlast: the normal suite shrinks
it to 3 s (renewal 1.5 s ahead, scanned every 0.3 s, 3 s slices) and runs listeners of 7 s; the
issue's literal case (the default 60 s, a 90 s listener) is marked slow.
"""

from __future__ import annotations

import pytest
from pyrmq.store.v1 import store_pb2 as pb

from tests.support.official_client import consume, produce

pytestmark = pytest.mark.needs("rocketmq-python-client")

FAST_RENEWAL = dict(
    auto_renew_invisible_ms=3_000, renew_ahead_ms=1_500, renew_scan_interval_ms=300, renew_slices_ms=(3_000,)
)


def create_topic(store_stub, name: str, message_type: str) -> None:
    config = pb.TopicConfig(topic_name=name, read_queue_nums=4, write_queue_nums=4, perm=6)
    config.attributes["message.type"] = message_type
    store_stub.CreateOrUpdateTopic(pb.CreateOrUpdateTopicRequest(config=config), timeout=10)


def committed(store_stub, group: str, topic: str) -> int:
    """Messages the group acked, by its committed offsets."""
    total = 0
    for queue_id in range(4):
        response = store_stub.QueryConsumerOffset(
            pb.QueryConsumerOffsetRequest(group=group, topic=topic, queue_id=queue_id), timeout=10
        )
        total += max(0, response.offset)
    return total


def slow_listener_gets_no_duplicate(broker, store_stub, tmp_path, topic: str, listener_s: float, linger_s: float):
    endpoint = f"127.0.0.1:{broker.port}"
    create_topic(store_stub, topic, "NORMAL")
    produce(tmp_path, endpoint, topic, [{"body": f"job-{i}"} for i in range(2)])
    got = consume(
        tmp_path,
        endpoint,
        client_timeout_s=listener_s + linger_s + 60,
        mode="push",
        group=f"{topic}Group",
        topic=topic,
        count=2,
        listener_s=listener_s,
        linger_s=linger_s,
        deadline_s=listener_s + 30,
    )
    # Each message delivered once, on its first attempt, although the listener outlasted the
    # invisible time several times over; and both acks (with the handles first handed out) held.
    assert sorted((m["body"], m["attempt"]) for m in got) == [("job-0", 1), ("job-1", 1)], got
    assert committed(store_stub, f"{topic}Group", topic) == 2
    assert broker.renewer is not None and broker.renewer.stats().renewals >= 2


def test_slow_push_listener_gets_no_duplicate(make_broker, store_stub, tmp_path):
    broker = make_broker(**FAST_RENEWAL)
    slow_listener_gets_no_duplicate(broker, store_stub, tmp_path, "SlowListenerTopic", listener_s=7, linger_s=4)


@pytest.mark.slow
def test_ninety_second_push_listener_gets_no_duplicate(make_broker, store_stub, tmp_path):
    broker = make_broker()  # the defaults: 60 s invisible, renewed 10 s ahead
    slow_listener_gets_no_duplicate(broker, store_stub, tmp_path, "NinetySecondTopic", listener_s=90, linger_s=10)


def test_fifo_order_holds_under_renewal(make_broker, store_stub, tmp_path):
    broker = make_broker(**FAST_RENEWAL)
    endpoint = f"127.0.0.1:{broker.port}"
    create_topic(store_stub, "FifoRenewTopic", "FIFO")
    store_stub.CreateOrUpdateGroup(
        pb.CreateOrUpdateGroupRequest(
            config=pb.SubscriptionGroupConfig(group_name="FifoRenewGroup", consume_message_orderly=True)
        ),
        timeout=10,
    )
    produce(
        tmp_path,
        endpoint,
        "FifoRenewTopic",
        [{"body": f"{group}:{i}", "message_group": group} for i in range(3) for group in ("g-A", "g-B")],
    )
    # 2 s per message, one message group at a time: the last of a group waits 4 s in the
    # client's cache, past its 3 s invisible time, so it stays invisible only by renewal.
    got = consume(
        tmp_path,
        endpoint,
        mode="push",
        group="FifoRenewGroup",
        topic="FifoRenewTopic",
        count=6,
        listener_s=2,
        linger_s=4,
        deadline_s=40,
    )
    for group in ("g-A", "g-B"):
        assert [(m["body"], m["attempt"]) for m in got if m["message_group"] == group] == [
            (f"{group}:{i}", 1) for i in range(3)
        ], got
    assert len(got) == 6 and committed(store_stub, "FifoRenewGroup", "FifoRenewTopic") == 6
    assert broker.renewer is not None and broker.renewer.stats().renewals >= 1
