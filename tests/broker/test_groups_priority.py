"""Priority messages over two broker groups (issues 17 and 18): a send goes to a group as any
send does, and in that group to its priority's level; each group hands its backlog out highest
priority first (RIP-80 orders within one broker group, not across groups)."""

from __future__ import annotations

import pytest
from apache.rocketmq.v2 import definition_pb2 as d

from tests.support.broker_groups import GROUP_A, GROUP_B, TwoGroups, two_groups
from tests.support.v2_requests import message, receive, send

TOPIC = "SpreadPriority"
LEVELS = 10


@pytest.fixture
def groups(tmp_path) -> TwoGroups:
    with two_groups(tmp_path) as cluster:
        cluster.create(TOPIC, queue_nums=LEVELS, message_type="PRIORITY")
        yield cluster


def test_each_group_stores_by_level_and_hands_out_the_top_first(groups: TwoGroups) -> None:
    priorities = [0, 4, 9, 2, 7, 7, 1, 12, 3, 5, 8, 6]
    for i, priority in enumerate(priorities):
        sent = message(
            TOPIC, body=b"p%d" % priority, message_id=f"{i:032X}", message_type=d.PRIORITY, priority=priority
        )
        response = send(groups.v2, sent)
        assert response.status.code == d.OK, response.status
    a, b = groups.depth(GROUP_A, TOPIC, LEVELS), groups.depth(GROUP_B, TOPIC, LEVELS)
    assert sum(a) == sum(b) == len(priorities) // 2  # sends alternate groups
    stored = [0] * LEVELS
    for priority in priorities:
        stored[min(priority, LEVELS - 1)] += 1
    assert [x + y for x, y in zip(a, b)] == stored  # each at its level, in whichever group
    for group in (GROUP_A, GROUP_B):
        handed = []
        for _ in range(len(priorities) // 2):
            status, [got], _ = receive(groups.v2, TOPIC, "G", broker=group, batch_size=1, polling_s=1)
            assert status.code == d.OK and got.system_properties.message_type == d.PRIORITY
            handed.append(got.system_properties.priority)
        levels = [min(p, LEVELS - 1) for p in handed]
        assert levels == sorted(levels, reverse=True), (group, handed)
