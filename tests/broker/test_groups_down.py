"""A broker group whose store is down (issue 30), one broker over two real stores in this process
(tests/support/broker_groups.py): the remoting door's routes stop offering the group for sends
and give it back once it is up; a classic send aimed at it goes to the other group when it may
move (services/broker/broker_group_router.py ``RoutedClassicSends``), answered with the queue
and offsetMsgId it was stored at; an ordered one (a FIFO topic, a message group, a transaction's
half) stays and fails. A v2 FIFO send to the down group fails with INTERNAL_SERVER_ERROR, naming
the group; tests/broker/test_groups.py has the v2 sends that move. tests/test_up_supervise_groups.py
runs it all under ``pyrmq up --groups 2``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from apache.rocketmq.v2 import definition_pb2 as d

from services.broker.broker_group_router import movable
from services.broker.classic_producer import ClassicMessage
from services.broker.remoting.door import RemotingDoor, build_remoting
from services.domain.format.commitlog_format import SYSFLAG_TRANSACTION_PREPARED_TYPE
from services.domain.format.properties_format import SHARDING_KEY
from services.domain.remoting.codes import PERM_READ, PERM_WRITE, RequestCode, ResponseCode
from services.domain.remoting.message_id import decode_offset_msg_id
from services.domain.routes import QueueData, TopicRoute, select_write_queue
from tests.support.broker_groups import GROUP_A, GROUP_B, TwoGroups, two_groups
from tests.support.remoting_client import RemotingTestClient
from tests.support.v2_requests import message, send

TOPIC = "Spread"
QUEUES = 4


@dataclass
class Door:
    groups: TwoGroups
    door: RemotingDoor
    addresses: dict[str, str]  # broker group -> its own remoting port

    def route(self, topic: str = TOPIC) -> dict[str, int]:
        """broker group -> its queues' perm in the topic's remoting route."""
        with RemotingTestClient(self.door.context.address) as namesrv:
            route = json.loads(namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}).body)
        return {q["brokerName"]: q["perm"] for q in route["queueDatas"]}

    def send_to(self, group: str, body: bytes, topic: str = TOPIC, sys_flag: int = 0, **properties: str):
        with RemotingTestClient(self.addresses[group]) as client:  # a 4.x client: the port names the group
            return client.send_v2(topic, body, {"UNIQ_KEY": body.hex(), **properties}, queue_id=1, sys_flag=sys_flag)


@pytest.fixture
def door(tmp_path: Path) -> Iterator[Door]:
    with two_groups(tmp_path, remoting_group_ports=f"{GROUP_A}=0,{GROUP_B}=0") as groups:
        groups.create(TOPIC, queue_nums=QUEUES)
        groups.create("Ordered", queue_nums=QUEUES, message_type="FIFO")
        remoting = build_remoting(groups.broker.core, "127.0.0.1", "127.0.0.1", 0, False)
        remoting.start()
        try:
            with RemotingTestClient(remoting.context.address) as namesrv:
                route = json.loads(namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC}).body)
            addresses = {b["brokerName"]: b["brokerAddrs"]["0"] for b in route["brokerDatas"]}
            yield Door(groups, remoting, addresses)
        finally:
            remoting.stop()


def test_a_down_groups_queues_are_not_writable_in_remoting_routes_until_it_is_back(door: Door) -> None:
    assert door.route() == {GROUP_A: PERM_READ | PERM_WRITE, GROUP_B: PERM_READ | PERM_WRITE}
    door.groups.mark_down(GROUP_B)
    assert door.route() == {GROUP_A: PERM_READ | PERM_WRITE, GROUP_B: PERM_READ}  # consumers keep reading
    door.groups.mark_down(GROUP_B, False)
    assert door.route() == {GROUP_A: PERM_READ | PERM_WRITE, GROUP_B: PERM_READ | PERM_WRITE}


@pytest.mark.parametrize("how", ["marked down", "store stopped"])
def test_a_classic_send_to_a_down_group_is_stored_in_the_other(door: Door, how: str) -> None:
    if how == "marked down":  # known down: not even tried
        door.groups.mark_down(GROUP_B)
    else:  # not known yet: its failure sends it on at once
        door.groups.stop_store(GROUP_B)
    for i in range(4):
        sent = door.send_to(GROUP_B, b"moved-%d" % i)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        host, port, phy_offset = decode_offset_msg_id(sent.ext_fields["msgId"])
        assert f"{host}:{port}" == door.addresses[GROUP_A]  # the group that stored it
        queue_id, offset = int(sent.ext_fields["queueId"]), int(sent.ext_fields["queueOffset"])
        door.groups.dispatched(GROUP_A)  # acknowledged once appended; its ConsumeQueue entry follows
        [stored] = door.groups.stores[GROUP_A].get_messages(TOPIC, queue_id, offset, 1).messages
        assert (stored.body, stored.phy_offset) == (b"moved-%d" % i, phy_offset)
    assert sum(door.groups.depth(GROUP_A, TOPIC)) == 4


def test_an_ordered_classic_send_stays_with_its_down_group_and_fails(door: Door) -> None:
    door.groups.stop_store(GROUP_B)
    refused = [
        door.send_to(GROUP_B, b"keyed", **{SHARDING_KEY: "order-1"}),
        door.send_to(GROUP_B, b"fifo-topic", topic="Ordered"),
        door.send_to(GROUP_B, b"half", sys_flag=SYSFLAG_TRANSACTION_PREPARED_TYPE),
    ]
    assert [r.code for r in refused] == [ResponseCode.SYSTEM_ERROR] * 3, [r.remark for r in refused]
    assert sum(door.groups.depth(GROUP_A, TOPIC)) == 0 and sum(door.groups.depth(GROUP_A, "Ordered")) == 0
    assert door.send_to(GROUP_A, b"to-a").code == ResponseCode.SUCCESS  # the group that is up serves


def test_which_classic_sends_may_move() -> None:
    route = TopicRoute(TOPIC, "MIXED", (QueueData(GROUP_A, 4, 4), QueueData(GROUP_B, 4, 4)))
    plain = ClassicMessage(TOPIC, b"x", {"UNIQ_KEY": "1"}, 1)
    assert movable([plain], route)
    assert not movable([plain], TopicRoute(TOPIC, "FIFO", route.queue_datas))
    assert not movable([plain, ClassicMessage(TOPIC, b"x", {SHARDING_KEY: "k"}, 1)], route)
    assert not movable([ClassicMessage(TOPIC, b"x", {}, 1, SYSFLAG_TRANSACTION_PREPARED_TYPE)], route)


def test_a_v2_fifo_send_to_a_down_group_fails_and_names_it(tmp_path: Path) -> None:
    with two_groups(tmp_path) as groups:
        groups.create("Fifo", queue_nums=QUEUES, message_type="FIFO")
        route = groups.routes.routes["Fifo"]
        on_b = next(f"order-{i}" for i in range(100) if select_write_queue(route, 0, f"order-{i}")[0] == GROUP_B)
        groups.stop_store(GROUP_B)
        reply = send(groups.v2, message("Fifo", message_group=on_b, message_type=d.FIFO))
        status = reply.entries[0].status if reply.entries else reply.status
        assert status.code == d.INTERNAL_SERVER_ERROR, status
        assert f"broker group {GROUP_B} is unavailable and a message group stays in its queue" in status.message
        assert sum(groups.depth(GROUP_A, "Fifo")) == 0  # never moved: order
