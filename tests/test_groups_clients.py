"""The official Node.js and Python clients against a cluster of two broker groups (issue 17), all
real processes: a local etcd, one store per group (``broker-a``, ``broker-b``, controller mode
with their etcd leases) and one broker whose topic routes come from etcd.

* Node.js: sends land on both groups' queues (``Admin.QueryMessages`` names each message's
  group); a simple consumer and a push consumer (another consumer group) each receive every
  message exactly once; on a FIFO topic, message groups placed on both broker groups are each
  received in the order sent.
* Python, one group killed: after a first batch (on both groups), broker-b's store is SIGKILLed;
  every send of a second batch is still acknowledged, and stored in broker-a; broker-b's store
  restarts on its port and data, a third batch goes to both groups again, and a simple consumer
  then receives exactly the acknowledged messages, each once, the first batch's broker-b messages
  included.
* A send the broker routes to the dead group before its etcd lease expires goes to broker-a
  within the send's deadline: the put is bounded by the sender's deadline, and a group of one
  replica, where no election can replace the dead master, answers at once (MasterTransport).

One cluster serves every test (module-scoped); the kill tests run last and restart broker-b's store.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc

from services.domain.routes import QueueData, TopicRoute, select_write_queue
from services.runtime.process import free_ports
from tests.support import node_client, official_client
from tests.support.etcd import start_cluster as start_etcd
from tests.support.processes import BROKER_READY, ROOT, STORE_READY, Process, broker_command, store_command
from tests.support.v2_requests import METADATA, message
from tests.support.waits import wait_until

pytestmark = [pytest.mark.needs("etcd", "rocketmq-python-client", "rocketmq-client-nodejs"), pytest.mark.timeout(180)]

GROUP_A, GROUP_B = "broker-a", "broker-b"
GROUPS = {GROUP_A, GROUP_B}
QUEUES = 4  # per broker group
LEASE_TTL_MS = 2_000  # a killed store's group has no master about this long after its death
# The Node push consumer's shutdown waits for its in-flight long polls: the broker tells
# consumers 5 s instead of 20 s (tests/broker/test_nodejs_client.py: PUSH_POLLING_MS).
PUSH_POLLING_MS = 5_000
# A simple consumer long-polls one route queue per receive, and a receive on a group it has
# drained waits out the whole poll: 1 s polls (await_s) instead of the 5 s minimum keep those short.
POLLING_MS_MIN = 1_000
SEND_TIMEOUT_S = 3.0  # the broker's send_timeout_ms: a SendMessage is answered within it
WAIT_S = 30.0
MESSAGE_IDS = "0102FC0000000146A20B13E206000000%02X"  # v2 message ids for raw sends


@dataclass
class Cluster:
    """The processes: ``stores`` by group (the live one), the broker at ``endpoint``; ``started``
    is every process, killed when the module is done."""

    root: Path
    etcd_endpoints: str
    store_ports: dict[str, int]
    started: list[Process] = field(default_factory=list)
    stores: dict[str, Process] = field(default_factory=dict)
    endpoint: str = ""

    def start_store(self, group: str) -> Process:
        """The group's store on its fixed port and data directory (a restart finds both again)."""
        store = Process(
            store_command(
                self.root / group,
                "--commitlog-file-size-bytes",
                str(4 << 20),
                "--set",
                f"broker_name={group}",
                "--set",
                f"etcd_endpoints={self.etcd_endpoints}",
                "--set",
                f"lease_ttl_ms={LEASE_TTL_MS}",
                "--set",
                "index_hash_slot_num=1024",
                "--set",
                "index_num_max=4096",
                metrics_port=-1,
                port=self.store_ports[group],
            ),
            ROOT,
        )
        self.started.append(store)
        store.wait_line(STORE_READY)
        self.stores[group] = store
        return store

    def start_broker(self) -> None:
        broker = Process(
            broker_command(
                f"127.0.0.1:{self.store_ports[GROUP_A]}",
                "--tls-mode",
                "plaintext",
                "--broker-name",
                GROUP_A,
                "--etcd-endpoints",
                self.etcd_endpoints,
                "--set",
                f"consumer_long_polling_timeout_ms={PUSH_POLLING_MS}",
                "--set",
                f"long_polling_timeout_ms_min={POLLING_MS_MIN}",
                "--set",
                f"send_timeout_ms={int(SEND_TIMEOUT_S * 1000)}",
            ),
            ROOT,
        )
        self.started.append(broker)
        self.endpoint = broker.wait_line(BROKER_READY)["endpoint"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("groups")
    etcd_run = start_etcd(root, 1)
    etcd = next(etcd_run)
    ports = free_ports(2)
    made = Cluster(root, ",".join(etcd.endpoints), {GROUP_A: ports[0], GROUP_B: ports[1]})
    try:
        for group in (GROUP_A, GROUP_B):
            made.start_store(group)
        made.start_broker()
        yield made
    finally:
        for process in reversed(made.started):
            process.kill()
        etcd_run.close()


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[pb_grpc.AdminStub]:
    with grpc.insecure_channel(cluster.endpoint) as channel:
        yield pb_grpc.AdminStub(channel)


# -- helpers ---------------------------------------------------------------------------------------


def route_permissions(endpoint: str, topic: str) -> dict[str, set[str]]:
    """broker group -> the permissions of its queues in the topic's route as clients get it."""
    with grpc.insecure_channel(endpoint) as channel:
        route = s_grpc.MessagingServiceStub(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name=topic)), metadata=METADATA, timeout=10
        )
    assert route.status.code == d.OK, route.status
    found: dict[str, set[str]] = {}
    for queue in route.message_queues:
        found.setdefault(queue.broker.name, set()).add(d.Permission.Name(queue.permission))
    return found


def wait_route(endpoint: str, topic: str) -> None:
    """Until the broker routes ``topic`` over both groups, each writable (its etcd watch saw the
    route; a restarted group has a master again)."""
    wait_until(
        lambda: route_permissions(endpoint, topic),
        WAIT_S,
        f"the route of {topic}: both groups READ_WRITE",
        accept=lambda seen: {group for group, perms in seen.items() if perms == {"READ_WRITE"}} == GROUPS,
    )


def create_topic(cluster: Cluster, admin: pb_grpc.AdminStub, name: str, message_type: int = pb.NORMAL) -> None:
    reply = admin.CreateTopic(
        pb.CreateTopicRequest(
            name=name, message_type=message_type, queue_nums=QUEUES, broker_groups=[GROUP_A, GROUP_B]
        ),
        timeout=10,
    )
    assert list(reply.topic.broker_groups) == [GROUP_A, GROUP_B]
    wait_route(cluster.endpoint, name)


def create_group(admin: pb_grpc.AdminStub, name: str, fifo: bool = False) -> None:
    reply = admin.CreateGroup(pb.CreateGroupRequest(name=name, fifo=fifo), timeout=10)
    assert reply.group.fifo is fifo


def stored_groups(admin: pb_grpc.AdminStub, topic: str, key: str, count: int) -> dict[str, str]:
    """message id -> the broker group whose store holds it, for the ``count`` messages of
    ``topic`` with ``key`` (waiting for the stores' IndexFiles to have them all), each stored once."""
    reply = wait_until(
        lambda: admin.QueryMessages(pb.QueryMessagesRequest(topic=topic, key=key, max_num=64), timeout=10),
        WAIT_S,
        f"{count} messages with key {key} in {topic}",
        accept=lambda reply: len(reply.messages) >= count and not reply.unreachable_broker_groups,
    )
    records = [(m.message_id, m.broker_name) for m in reply.messages]
    found = dict(records)
    assert len(records) == len(found) == count, f"{count} messages with key {key} wanted in {topic}: {records}"
    return found


def placed_message_groups(per_group: int) -> dict[str, str]:
    """``per_group`` message groups for each broker group: name -> the broker group whose queue
    the broker's FIFO placement (services/domain/routes.py) gives it."""
    route = TopicRoute("NodeFifo", "FIFO", (QueueData(GROUP_A, QUEUES, QUEUES), QueueData(GROUP_B, QUEUES, QUEUES)))
    chosen: dict[str, str] = {}
    for i in range(1000):
        placed = select_write_queue(route, 0, f"order-{i}")
        assert placed is not None
        if sum(group == placed[0] for group in chosen.values()) < per_group:
            chosen[f"order-{i}"] = placed[0]
        if len(chosen) == per_group * len(GROUPS):
            return chosen
    raise AssertionError(f"no {per_group} message groups per broker group among 1000 names: {chosen}")


# -- Node.js ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node_spread(cluster: Cluster, admin: pb_grpc.AdminStub, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """24 messages sent by the Node producer to a topic over both groups: their bodies."""
    create_topic(cluster, admin, "NodeSpread")
    bodies = [f"n-{i}" for i in range(24)]
    sent = node_client.produce(
        tmp_path_factory.mktemp("node-send"),
        cluster.endpoint,
        "NodeSpread",
        [{"body": body, "keys": [body, "node-spread"]} for body in bodies],
    )
    held = stored_groups(admin, "NodeSpread", "node-spread", len(bodies))
    assert set(held) == {r["message_id"] for r in sent}
    assert set(held.values()) == GROUPS, held
    return bodies


def test_node_simple_consumer_receives_both_groups_messages_once(
    cluster: Cluster, admin: pb_grpc.AdminStub, node_spread: list[str], tmp_path: Path
) -> None:
    create_group(admin, "NodeSpreadSimple")
    got, _ = node_client.consume(
        tmp_path,
        cluster.endpoint,
        group="NodeSpreadSimple",
        topic="NodeSpread",
        count=len(node_spread),
        deadline_s=40,
        await_s=1,
        action="ack",
    )
    assert sorted(m["body"] for m in got) == sorted(node_spread)
    assert all(m["acked"] is True and m["attempt"] == 1 for m in got), got


def test_node_push_consumer_receives_both_groups_messages_once(
    cluster: Cluster, admin: pb_grpc.AdminStub, node_spread: list[str], tmp_path: Path
) -> None:
    create_group(admin, "NodeSpreadPush")
    got, other = node_client.consume(
        tmp_path,
        cluster.endpoint,
        mode="push",
        group="NodeSpreadPush",
        topic="NodeSpread",
        count=len(node_spread),
        deadline_s=40,
    )
    assert other["settings"]["long_polling_timeout_ms"] == PUSH_POLLING_MS
    # Every delivery until the consumer shut down: a duplicate would show.
    assert sorted(m["body"] for m in got) == sorted(node_spread)
    assert all(m["result"] == "SUCCESS" for m in got), got


def test_node_fifo_message_groups_in_order_on_both_groups(
    cluster: Cluster, admin: pb_grpc.AdminStub, tmp_path: Path
) -> None:
    create_topic(cluster, admin, "NodeFifo", pb.FIFO)
    create_group(admin, "NodeFifoSimple", fifo=True)
    placement = placed_message_groups(2)
    per_group = 4
    messages = [
        {"body": f"{group}:{i}", "message_group": group, "keys": ["node-fifo"]}
        for i in range(per_group)
        for group in placement
    ]  # interleaved: order-a:0, order-b:0, ..., order-a:1, ...
    sent = node_client.produce(tmp_path / "send", cluster.endpoint, "NodeFifo", messages)
    held = stored_groups(admin, "NodeFifo", "node-fifo", len(messages))
    for spec, result in zip(messages, sent, strict=True):
        assert held[result["message_id"]] == placement[spec["message_group"]], (spec, held)
    assert set(held.values()) == GROUPS

    got, _ = node_client.consume(
        tmp_path / "consume",
        cluster.endpoint,
        group="NodeFifoSimple",
        topic="NodeFifo",
        count=len(messages),
        deadline_s=40,
        await_s=1,
        batch=4,
    )
    assert len(got) == len(messages) and all(m["attempt"] == 1 and m["acked"] for m in got), got
    for group in placement:
        assert [m["body"] for m in got if m["message_group"] == group] == [f"{group}:{i}" for i in range(per_group)]


# -- Python, one group killed and restarted ----------------------------------------------------------


def send_batch(home: Path, endpoint: str, batch: str, count: int) -> dict[str, str]:
    """``count`` sends by the official Python producer, each acknowledged: message id -> body."""
    bodies = [f"{batch}-{i}" for i in range(count)]
    sent = official_client.produce(home, endpoint, "Survive", [{"body": b, "keys": [b, batch]} for b in bodies])
    return {r["message_id"]: body for r, body in zip(sent, bodies, strict=True)}


def test_python_client_loses_nothing_when_a_group_dies_and_returns(
    cluster: Cluster, admin: pb_grpc.AdminStub, tmp_path: Path
) -> None:
    create_topic(cluster, admin, "Survive")
    create_group(admin, "SurviveGroup")
    first = send_batch(tmp_path / "p1", cluster.endpoint, "first", 12)
    first_held = stored_groups(admin, "Survive", "first", len(first))
    assert set(first_held.values()) == GROUPS, first_held
    on_b = {message_id for message_id, group in first_held.items() if group == GROUP_B}

    # SIGKILL broker-b's store: every send of the second batch is still acknowledged.
    assert cluster.stores[GROUP_B].stop(signal.SIGKILL) == -signal.SIGKILL
    second = send_batch(tmp_path / "p2", cluster.endpoint, "second", 12)

    # The store comes back on its port with its data; the broker routes to it again.
    cluster.start_store(GROUP_B)
    wait_route(cluster.endpoint, "Survive")
    assert set(stored_groups(admin, "Survive", "second", len(second)).values()) == {GROUP_A}
    third = send_batch(tmp_path / "p3", cluster.endpoint, "third", 12)
    assert set(stored_groups(admin, "Survive", "third", len(third)).values()) == GROUPS

    acknowledged = first | second | third
    got = official_client.consume(
        tmp_path / "c",
        cluster.endpoint,
        group="SurviveGroup",
        topic="Survive",
        count=len(acknowledged),
        deadline_s=60,
        await_s=1,
        action="ack",
    )
    received = [(m["message_id"], m["body"]) for m in got]
    assert sorted(received) == sorted(acknowledged.items())  # nothing lost, nothing twice
    assert on_b and on_b <= {message_id for message_id, _ in received}  # back with their group
    assert all(m["acked"] is True and m["attempt"] == 1 for m in got), got


def test_a_send_meant_for_a_group_that_just_died_goes_to_the_other_in_time(
    cluster: Cluster, admin: pb_grpc.AdminStub
) -> None:
    create_topic(cluster, admin, "Failover")
    assert cluster.stores[GROUP_B].stop(signal.SIGKILL) == -signal.SIGKILL
    answers = []
    try:
        with grpc.insecure_channel(cluster.endpoint) as channel:
            v2 = s_grpc.MessagingServiceStub(channel)
            # Round-robin over both groups' queues (within the lease): some are meant for broker-b.
            for i in range(2 * QUEUES):
                started = time.monotonic()
                reply = v2.SendMessage(
                    s.SendMessageRequest(messages=[message("Failover", body=b"f-%d" % i, message_id=MESSAGE_IDS % i)]),
                    metadata=METADATA,
                    timeout=10 * SEND_TIMEOUT_S,  # long enough to see the broker's own answer
                )
                status = reply.entries[0].status if reply.entries else reply.status
                answers.append((d.Code.Name(status.code), status.message, round(time.monotonic() - started, 1)))
    finally:
        cluster.start_store(GROUP_B)
        wait_route(cluster.endpoint, "Failover")
    assert all(code == "OK" and took <= SEND_TIMEOUT_S + 0.5 for code, _, took in answers), answers
