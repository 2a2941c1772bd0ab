"""One system, two doors: a message sent through either door is consumed through the other with
its body (compressed or not), tag, keys, properties and ids; official v2 clients on one side,
the remoting door's clients on the other."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import lz4.frame
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from services.broker.remoting.door import RemotingDoor
from services.broker.v2.server import BrokerServer
from services.domain.format.commitlog_format import MessageRecord, decode_record
from services.domain.remoting.codes import ResponseCode
from tests.support.node_client import consume as node_consume
from tests.support.node_client import produce as node_produce
from tests.support.official_client import consume, produce
from tests.support.remoting_client import RemotingTestClient
from tests.support.remoting_peers import start_peer
from tests.support.v2_requests import message, receive, send_ok

TEXT = b"compress me " * 1000


@pytest.fixture
def v2(broker: BrokerServer) -> Iterator[s_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        yield s_grpc.MessagingServiceStub(channel)


def test_remoting_sends_reach_an_official_v2_consumer(
    broker: BrokerServer, door: RemotingDoor, remoting: RemotingTestClient, topics: Callable[..., None], tmp_path: Path
) -> None:
    topics("CrossT", queue_nums=1)
    sends = [
        (b"plain", 0, {"UNIQ_KEY": "AA01", "TAGS": "red", "KEYS": "k1 k2", "color": "blue"}),
        (zlib.compress(TEXT, 5), 0x1 | (3 << 8), {"UNIQ_KEY": "AA02", "TAGS": "red"}),  # the Java client's zlib
        (zlib.compress(TEXT, 5), 0x1, {"UNIQ_KEY": "AA03", "TAGS": "red"}),  # type 0: zlib for old clients
        (lz4.frame.compress(TEXT), 0x1 | (1 << 8), {"UNIQ_KEY": "AA04", "TAGS": "red"}),
    ]
    for body, sys_flag, properties in sends:
        response = remoting.send_v2("CrossT", body, properties, sys_flag=sys_flag)
        assert response.code == ResponseCode.SUCCESS, response.remark
    got = consume(tmp_path, f"127.0.0.1:{broker.port}", mode="simple", group="GX", topic="CrossT", count=4)
    by_id = {m["message_id"]: m for m in got if "message_id" in m}
    assert by_id["AA01"]["body"] == "plain" and by_id["AA01"]["tag"] == "red"
    assert sorted(by_id["AA01"]["keys"]) == ["k1", "k2"] and by_id["AA01"]["properties"]["color"] == "blue"
    for message_id in ("AA02", "AA03", "AA04"):
        assert by_id[message_id]["body"] == TEXT.decode(), message_id


def test_official_v2_sends_reach_an_ali_ons_consumer(
    broker: BrokerServer, door: RemotingDoor, topics: Callable[..., None], tmp_path: Path
) -> None:
    topics("CrossV2T", queue_nums=2)
    sent = produce(
        tmp_path,
        f"127.0.0.1:{broker.port}",
        "CrossV2T",
        [{"body": f"from v2 {i}", "tag": "T", "keys": [f"key{i}"], "properties": {"n": str(i)}} for i in range(3)],
    )
    command = {
        "role": "push-consumer",
        "nameSrv": door.context.address,
        "topic": "CrossV2T",
        "group": "CID_X",
        "count": 3,
        "suspendMs": 1000,
    }
    with start_peer("ali-ons", command, tmp_path / "ons") as consumer:
        received = consumer.wait_events("received", 3, timeout_s=60)
    got = sorted((e["body"], e["tags"], e["keys"], e["properties"]["n"]) for e in received)
    assert got == [(f"from v2 {i}", "T", [f"key{i}"], str(i)) for i in range(3)]
    assert {e["properties"]["UNIQ_KEY"] for e in received} == {r["message_id"] for r in sent}


def test_a_v2_gzip_body_is_stored_as_zlib_for_remoting_consumers(
    v2: s_grpc.MessagingServiceStub, remoting: RemotingTestClient, topics: Callable[..., None]
) -> None:
    topics("GzipT", queue_nums=1)
    send_ok(v2, message("GzipT", body=gzip.compress(TEXT), body_encoding=d.GZIP))
    pulled = remoting.pull("G1", "GzipT", 0, 0, sys_flag=0x2 | 0x4, suspend_ms=10_000)  # held until dispatched
    assert pulled.code == ResponseCode.SUCCESS
    record = decode_record(pulled.body, 0, len(pulled.body), check_crc=False)
    assert isinstance(record, MessageRecord)
    assert record.sys_flag & 0x701 == 0x301  # COMPRESSED, type ZLIB
    assert zlib.decompress(record.body) == TEXT
    status, [delivered], _ = receive(v2, "GzipT")  # and a v2 consumer gets GZIP again
    assert status.code == d.OK and delivered.system_properties.body_encoding == d.GZIP
    assert gzip.decompress(delivered.body) == TEXT


def test_remoting_and_node_v2_clients_both_ways(
    broker: BrokerServer, door: RemotingDoor, remoting: RemotingTestClient, topics: Callable[..., None], tmp_path: Path
) -> None:
    topics("NodeCrossT", queue_nums=1)
    endpoint = f"127.0.0.1:{broker.port}"
    sent = remoting.send_v2(
        "NodeCrossT", zlib.compress(TEXT), {"UNIQ_KEY": "NC01", "TAGS": "n", "KEYS": "nk", "p": "1"}, sys_flag=0x301
    )
    assert sent.code == ResponseCode.SUCCESS, sent.remark
    deliveries, _ = node_consume(tmp_path / "node-c", endpoint, mode="simple", group="GN", topic="NodeCrossT", count=1)
    [got] = deliveries
    assert (got["message_id"], got["tag"], got["keys"], got["properties"]["p"]) == ("NC01", "n", ["nk"], "1")
    assert got["body_size"] == len(TEXT)  # inflated from the remoting producer's zlib
    node_sent = node_produce(tmp_path / "node-p", endpoint, "NodeCrossT", [{"body": "from node", "tag": "m"}])
    command = {
        "role": "push-consumer",
        "nameSrv": door.context.address,
        "topic": "NodeCrossT",
        "group": "CID_N",
        "subExpression": "m",
        "count": 1,
        "suspendMs": 1000,
    }
    with start_peer("ali-ons", command, tmp_path / "ons") as consumer:
        [event] = consumer.wait_events("received", 1, timeout_s=60)
    assert event["body"] == "from node" and event["properties"]["UNIQ_KEY"] == node_sent[0]["message_id"]
