"""The remoting door over two broker groups: routes name one address per group (its own port,
``remoting_group_ports``), so a 4.x client that names no ``bname`` reaches the right group for
each queue; a 5.x client's ``bname`` on the main port does too."""

from __future__ import annotations

import json
from pathlib import Path

from services.broker.remoting.door import build_remoting
from services.domain.remoting.codes import RequestCode, ResponseCode
from tests.support.broker_groups import GROUP_A, GROUP_B, two_groups
from tests.support.remoting_client import RemotingTestClient
from tests.support.waits import wait_until


def test_each_group_has_its_address_and_sends_land_in_its_store(tmp_path: Path) -> None:
    with two_groups(tmp_path, remoting_group_ports=f"{GROUP_A}=0,{GROUP_B}=0") as groups:
        door = build_remoting(groups.broker.core, "127.0.0.1", "127.0.0.1", 0, False)
        door.start()
        try:
            groups.create("SpreadT", queue_nums=2)
            with RemotingTestClient(door.context.address) as namesrv:
                route = json.loads(namesrv.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "SpreadT"}).body)
            addresses = {b["brokerName"]: b["brokerAddrs"]["0"] for b in route["brokerDatas"]}
            assert set(addresses) == {GROUP_A, GROUP_B} and len(set(addresses.values())) == 2
            assert door.context.address not in addresses.values()
            for group, address in addresses.items():  # a 4.x client: no bname, the address says it
                with RemotingTestClient(address) as client:
                    sent = client.send_v2("SpreadT", group.encode(), {"UNIQ_KEY": f"ID-{group}"}, queue_id=1)
                    assert sent.code == ResponseCode.SUCCESS, sent.remark
            with RemotingTestClient(door.context.address) as client:  # a 5.x client: bname on the main port
                fields = {"topic": "SpreadT", "queueId": "1", "bname": GROUP_B}
                wait_until(
                    lambda: client.call(RequestCode.GET_MAX_OFFSET, fields).ext_fields["offset"] == "1", 10, what="B"
                )
            for group in (GROUP_A, GROUP_B):
                assert groups.depth(group, "SpreadT", 2) == [0, 1]
                [stored] = groups.stores[group].get_messages("SpreadT", 1, 0, 1).messages
                assert stored.body == group.encode()
        finally:
            door.stop()
