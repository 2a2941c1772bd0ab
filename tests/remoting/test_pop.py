"""The pop family for 5.x push consumers that let the broker balance: POP_MESSAGE with RocketMQ's
offset infos, acks and changes of invisible time by POP_CK, QUERY_ASSIGNMENT and
SET_MESSAGE_REQUEST_MODE."""

from __future__ import annotations

import json
from collections.abc import Callable

from services.broker.remoting.door import RemotingDoor
from services.broker.remoting.pop import allocate_averagely
from services.domain.format.commitlog_format import MessageRecord
from services.domain.remoting.codes import RequestCode, ResponseCode
from tests.support.remoting_client import RemotingTestClient
from tests.support.remoting_client import stored_records as records
from tests.support.waits import wait_until


def pop(client: RemotingTestClient, topic: str, group: str = "GP", invisible_ms: int = 60_000, poll_ms: int = 5_000):
    fields = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": "-1",
        "maxMsgNums": "32",
        "invisibleTime": str(invisible_ms),
        "pollTime": str(poll_ms),
        "bornTime": "0",
        "initMode": "0",
    }
    return client.call(RequestCode.POP_MESSAGE, fields, timeout_s=poll_ms / 1000 + 10)


def pop_cks(response) -> list[tuple[MessageRecord, str]]:
    """Each popped record with the POP_CK the Java client builds for it (ExtraInfoUtil)."""
    start = {}
    for item in response.ext_fields["startOffsetInfo"].split(";"):
        kind, queue_id, offset = item.split(" ")
        start[(kind, int(queue_id))] = offset
    head = response.ext_fields
    out = []
    for record in records(response.body):
        kind = "1" if record.topic.startswith("%RETRY%") else "0"
        ck = " ".join([start[(kind, record.queue_id)], head["popTime"], head["invisibleTime"], head["reviveQid"], kind,
                       "broker-a", str(record.queue_id), str(record.queue_offset)])  # fmt: skip
        out.append((record, ck))
    return out


def ack(client: RemotingTestClient, record: MessageRecord, ck: str, group: str = "GP"):
    fields = {
        "consumerGroup": group,
        "topic": record.topic,
        "queueId": str(record.queue_id),
        "extraInfo": ck,
        "offset": str(record.queue_offset),
    }
    return client.call(RequestCode.ACK_MESSAGE, fields)


def test_popped_messages_are_acked_by_their_pop_ck(
    door: RemotingDoor, remoting: RemotingTestClient, topics: Callable[..., None]
) -> None:
    topics("PopT", queue_nums=2)
    door.context.core.admin.create_group("GP")
    for i in range(3):
        assert remoting.send_v2("PopT", b"pop %d" % i, {"UNIQ_KEY": f"P{i}"}, queue_id=i % 2).code == 0
    got: list = []

    def popped() -> bool:
        response = pop(remoting, "PopT", poll_ms=1000)
        if response.code == ResponseCode.SUCCESS:
            got.extend(pop_cks(response))
        return len(got) >= 3

    wait_until(popped, 20, what="3 messages popped")
    assert sorted(r.body for r, _ in got) == [b"pop 0", b"pop 1", b"pop 2"]
    assert all(r.store_host[1] == int(door.context.address.rsplit(":", 1)[1]) for r, _ in got)
    for record, ck in got:
        assert ack(remoting, record, ck).code == ResponseCode.SUCCESS
    again = ack(remoting, *got[0])
    assert again.code == ResponseCode.NO_MESSAGE  # acked: that POP_CK names nothing any more
    assert pop(remoting, "PopT", poll_ms=200).code == ResponseCode.POLLING_TIMEOUT


def test_an_unacked_pop_comes_back_and_a_change_of_invisible_time_moves_its_pop_ck(
    door: RemotingDoor, remoting: RemotingTestClient, topics: Callable[..., None]
) -> None:
    topics("PopBackT", queue_nums=1)
    door.context.core.admin.create_group("GB2")
    assert remoting.send_v2("PopBackT", b"again", {"UNIQ_KEY": "PB1"}).code == 0
    first = []
    wait_until(lambda: bool(first.extend(pop_cks(pop(remoting, "PopBackT", "GB2", 60_000, 1000))) or first), 20,
               what="popped")  # fmt: skip
    record, ck = first[0]
    fields = {
        "consumerGroup": "GB2",
        "topic": "PopBackT",
        "queueId": "0",
        "extraInfo": ck,
        "offset": str(record.queue_offset),
        "invisibleTime": "1000",
    }
    changed = remoting.call(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, fields)
    assert changed.code == ResponseCode.SUCCESS and changed.ext_fields["invisibleTime"] == "1000"
    assert ack(remoting, record, ck, "GB2").code == ResponseCode.NO_MESSAGE  # the old POP_CK is gone
    back = []
    wait_until(lambda: bool(back.extend(pop_cks(pop(remoting, "PopBackT", "GB2", 60_000, 1000))) or back), 20,
               what="the message back after 1 s")  # fmt: skip
    again, ck2 = back[0]
    assert again.body == b"again" and again.reconsume_times == 1
    assert ack(remoting, again, ck2, "GB2").code == ResponseCode.SUCCESS


def test_assignments_average_in_pull_mode_and_give_every_queue_in_pop_mode(
    door: RemotingDoor, remoting: RemotingTestClient, topics: Callable[..., None]
) -> None:
    topics("AssignT", queue_nums=4)
    for client_id in ("c1@1", "c2@2"):
        heartbeat = {"clientID": client_id, "consumerDataSet": [{"groupName": "GA", "subscriptionDataSet": [
            {"topic": "AssignT", "subString": "*"}]}]}  # fmt: skip
        assert remoting.call(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode()).code == 0

    def assignment(client_id: str) -> list[tuple[str, int]]:
        body = json.dumps({"topic": "AssignT", "consumerGroup": "GA", "clientId": client_id}).encode()
        data = json.loads(remoting.call(RequestCode.QUERY_ASSIGNMENT, body=body).body)
        return [(a["mode"], a["messageQueue"]["queueId"]) for a in data["messageQueueAssignments"]]

    assert assignment("c1@1") == [("PULL", 0), ("PULL", 1)] and assignment("c2@2") == [("PULL", 2), ("PULL", 3)]
    mode = json.dumps({"topic": "AssignT", "consumerGroup": "GA", "mode": "POP", "popShareQueueNum": 0}).encode()
    assert remoting.call(RequestCode.SET_MESSAGE_REQUEST_MODE, body=mode).code == 0
    assert assignment("c1@1") == assignment("c2@2") == [("POP", -1)]


def test_averaging_is_rocketmqs() -> None:
    queues = list(range(10))
    shares = [allocate_averagely(queues, ["a", "b", "c"], c) for c in ("a", "b", "c")]
    assert shares == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [allocate_averagely([0, 1], ["a", "b", "c"], c) for c in "abc"] == [[0], [1], []]
