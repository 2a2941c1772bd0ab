"""The broker's side of transaction checks, raw gRPC against real in-process servers:
Admin.CheckTransaction relays a RecoverOrphanedTransactionCommand to a producer's Telemetry
stream, and EndTransaction (SOURCE_SERVER_CHECK) resolves the half through the store, also on
a broker that never saw the send."""

from __future__ import annotations

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from pyrmq.admin.v1 import admin_pb2 as apb
from pyrmq.admin.v1 import admin_pb2_grpc as apb_grpc

from services.store.client.client import GrpcStoreClient
from services.store.client.model import StoredMessage
from services.txcheck.model import CheckOutcome, CheckRequest
from services.txcheck.rpc.broker_client import GrpcProducers
from tests.support.store_reads import stored, wait_stored
from tests.support.v2_requests import Stream, end, message, producer_settings, send


@pytest.fixture
def tx_store(store_address):
    store = GrpcStoreClient(store_address, put_stream=False)
    yield store
    store.close()


def half_of(tx_store: GrpcStoreClient, key: str):
    [half] = [
        r
        for r in tx_store.get_messages("RMQ_SYS_TRANS_HALF_TOPIC", 0, 0, 32).messages
        if r.properties["UNIQ_KEY"] == key
    ]
    return half


def request_for(half) -> CheckRequest:
    return CheckRequest(
        producer_group=half.properties["PGROUP"],
        topic=half.properties["REAL_TOPIC"],
        message_id=half.properties["UNIQ_KEY"],
        transaction_id=half.properties["__transactionId__"],
        half=half,
    )


def test_a_check_reaches_a_live_producer_and_its_answer_commits(broker, v2, store_stub, tx_store, topics):
    topics("TxRelay")
    tid = "0102FC0000000146A20B13E206000000AA"
    assert (
        send(
            v2,
            message(
                topic="TxRelay",
                message_id=tid,
                message_type=d.TRANSACTION,
                tag="T",
                keys=["k1"],
                user_properties={"color": "red"},
            ),
        ).status.code
        == d.OK
    )
    [half] = stored(store_stub, "RMQ_SYS_TRANS_HALF_TOPIC", 0, at_least=1)
    producers = GrpcProducers((f"127.0.0.1:{broker.port}",))
    try:
        assert producers.check(request_for(half_of(tx_store, tid))) is CheckOutcome.NO_PRODUCER
        stream = Stream(v2)
        assert stream.send(producer_settings("TxRelay")).status.code == d.OK
        assert producers.check(request_for(half_of(tx_store, tid))) is CheckOutcome.SENT
    finally:
        producers.close()
    command = stream.replies.get(timeout=10).recover_orphaned_transaction_command
    assert command.transaction_id == tid
    checked = command.message
    assert checked.topic.name == "TxRelay" and checked.body == b"hello"
    sp = checked.system_properties
    assert (sp.message_id, sp.tag, list(sp.keys), sp.message_type) == (tid, "T", ["k1"], d.TRANSACTION)
    assert sp.body_encoding == d.IDENTITY and sp.body_digest.type == d.MD5
    # The proxy's GrpcConverter filters MessageConst.STRING_HASH_SET, not __transactionId__.
    assert dict(checked.user_properties) == {"color": "red", "__transactionId__": tid}
    assert end(v2, "TxRelay", tid, d.COMMIT, d.SOURCE_SERVER_CHECK).status.code == d.OK
    [committed] = wait_stored(store_stub, "TxRelay", tid)
    assert committed.sys_flag & 0xC == 0x8 and committed.body == b"hello"
    stream.call.cancel()


def test_check_transaction_refuses_an_incomplete_request(broker):
    with grpc.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        with pytest.raises(grpc.RpcError) as caught:
            apb_grpc.AdminStub(channel).CheckTransaction(apb.CheckTransactionRequest(topic="T"), timeout=10)
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT


def test_unreachable_brokers():
    producers = GrpcProducers(("127.0.0.1:1",), rpc_timeout_s=0.5)
    try:
        half = StoredMessage(
            topic="RMQ_SYS_TRANS_HALF_TOPIC", queue_id=0, body=b"x", properties={}, queue_offset=0, phy_offset=0
        )
        assert producers.check(CheckRequest("G", "T", "M", "M", half)) is CheckOutcome.UNREACHABLE
    finally:
        producers.close()


def test_end_transaction_on_a_broker_that_never_saw_the_send(make_broker, store_stub, topics):
    topics("TxStateless")
    """Stateless brokers: the half is found through the store's index on UNIQ_KEY."""
    first, second = make_broker(), make_broker()
    tid = "0102FC0000000146A20B13E206000000BB"
    with grpc.insecure_channel(f"127.0.0.1:{first.port}") as channel:
        assert (
            send(
                s_grpc.MessagingServiceStub(channel),
                message(topic="TxStateless", message_id=tid, message_type=d.TRANSACTION),
            ).status.code
            == d.OK
        )
    wait_stored(store_stub, "RMQ_SYS_TRANS_HALF_TOPIC", tid)
    with grpc.insecure_channel(f"127.0.0.1:{second.port}") as channel:
        other = s_grpc.MessagingServiceStub(channel)
        assert end(other, "TxStateless", tid, d.COMMIT, d.SOURCE_SERVER_CHECK).status.code == d.OK
        assert (
            end(other, "TxStateless", "0102FC0000000146A20B13E2060000FFFF", d.COMMIT).status.code
            == d.INVALID_TRANSACTION_ID
        )
    assert len(wait_stored(store_stub, "TxStateless", tid)) == 1


def test_producers_of_a_group_take_turns_and_dead_streams_are_skipped():
    from services.broker.model import ClientType
    from services.broker.telemetry import ClientRegistry, ClientSession

    registry = ClientRegistry()
    got: dict[str, list] = {"a": [], "b": [], "dead": []}

    def session(client_id, alive=True, topics=("G",)):
        def push(command):
            got[client_id].append(command)
            return alive

        return ClientSession(client_id, push, 0, ClientType.PRODUCER, frozenset(topics))

    assert registry.push_to_producer("G", "cmd") is None
    for s in (session("a"), session("b"), session("dead", alive=False)):
        registry.register(s)
    registry.register(ClientSession("consumer", lambda c: True, 0, ClientType.SIMPLE_CONSUMER, group="G"))
    answered = [registry.push_to_producer("G", n) for n in range(6)]
    assert set(answered) == {"a", "b"} and answered.count("a") >= 2 and answered.count("b") >= 2
    assert registry.push_to_producer("Other", "cmd") is None
