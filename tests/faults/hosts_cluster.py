"""A pyrmq cluster spread over test hosts (tests/support/netns.py), each service on a host of its
own and started as a user would start it on a separate machine: its own ``--host`` /
``advertised_host`` / ``store_host`` on the host's address, RocketMQ's usual ports (each host has
its ports to itself), the etcd endpoints of the other hosts.

Hosts (one service each, named as the service): ``etcd-0..2`` (a 3-member etcd cluster, short
raft timings), ``store-0..2`` (one broker group, ``broker-a``, of 3 replicas in controller mode,
SYNC_MASTER, SYNC flush, 2 s leases; each replica's data on a tmpfs of its own, so a disk can
fill up), ``broker-0..1`` (two brokers following the group's master through etcd, plaintext
client port). The test's clients run in the root namespace and reach the brokers through
``endpoint`` (``ipv4:<broker-0>,<broker-1>``: gRPC's pick_first goes to broker-1 when broker-0
refuses connections).

Store and broker processes run with libfaketime preloaded (``HostsClusterConfig.faketime``), so
a clock fault can move one host's wall clock (``Hosts.set_clock``); etcd (Go) ignores it.

The group's state is read from etcd (``group_state``: the master, its epoch, the SyncStateSet,
the live replicas), as tests/faults/replica_cluster.py does: ``master()``, ``wait_master``,
``wait_new_master``, ``wait_in_sync``; services are ``kill``ed (-9), ``restart``ed (on the same
host, address and data), ``pause``d (SIGSTOP) and ``resume``d.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from pyrmq.admin.v1 import admin_pb2 as admin_pb
from pyrmq.admin.v1 import admin_pb2_grpc as admin_grpc

from services.coordination.group_keys import GroupKeys
from services.coordination.group_state import GroupState
from services.launcher.compose import ETCD_ELECTION_TIMEOUT_MS, ETCD_HEARTBEAT_INTERVAL_MS
from services.runtime.etcd import EtcdUnavailable, Get
from services.runtime.etcd.rpc.client import EtcdClient
from tests.faults.cluster import READY, REPO_ROOT
from tests.support.components import etcd_binary, require
from tests.support.netns import Host, Hosts
from tests.support.processes import Process, sigstop
from tests.support.waits import wait_until

GROUP = "broker-a"
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
STORE_PORT = 10911
SCHEDULER_PORT = 10915
BROKER_PORT = 8081
POLL_S = 0.05
EXIT_WAIT_S = 10.0
READY_TIMEOUT_S = 60.0
FAULTS_TOPICS = (("FaultsNormal", "NORMAL"), ("FaultsFifo", "FIFO"))
FAULTS_GROUPS = (("FaultsGroup", False), ("FaultsFifoGroup", True))


@dataclass(frozen=True)
class HostsClusterConfig:
    etcd_members: int = 3
    replicas: int = 3
    brokers: int = 2
    broker_role: str = "SYNC_MASTER"
    lease_ttl_ms: int = 2_000
    etcd_heartbeat_ms: int = ETCD_HEARTBEAT_INTERVAL_MS  # as deploy/docker-compose.yml
    etcd_election_ms: int = ETCD_ELECTION_TIMEOUT_MS
    disk_bytes: int = 128 << 20  # each replica's tmpfs
    etcd_disk_bytes: int = 256 << 20  # each etcd member's tmpfs (its WAL preallocates 64 MB segments)
    commitlog_file_size_bytes: int = 4 << 20
    consume_queue_units_per_file: int = 10_000  # 200 KB ConsumeQueue files
    # A slave that stops catching up (cut off, paused, its disk full) leaves the SyncStateSet after
    # this long (default 15 s), so a short fault's effect on the set shows within the test.
    ha_max_time_slave_not_catchup_ms: int = 3_000
    faketime: bool = True  # stores and brokers with libfaketime preloaded (clock faults)
    store_env: tuple[tuple[str, str], ...] = ()  # more PYRMQ_STORE_* for every replica
    broker_env: tuple[tuple[str, str], ...] = ()  # more PYRMQ_BROKER_* for every broker
    # The scheduler (delay and timer messages) on a host of its own, following the group's master
    # through etcd as the brokers do (`make chaos` runs one: its DELAY load).
    schedulers: int = 0

    def names(self) -> list[str]:
        return [
            *(f"etcd-{i}" for i in range(self.etcd_members)),
            *(f"store-{i}" for i in range(self.replicas)),
            *(f"broker-{i}" for i in range(self.brokers)),
            *(f"scheduler-{i}" for i in range(self.schedulers)),
        ]


def kind_of(name: str) -> tuple[str, int]:
    kind, _, index = name.rpartition("-")
    return kind, int(index)


@dataclass
class HostsCluster:
    """``start()`` brings up etcd, the replicas (until a master is elected), then the brokers."""

    hosts: Hosts
    config: HostsClusterConfig = field(default_factory=HostsClusterConfig)
    running: dict[str, Process] = field(default_factory=dict)
    started: list[Process] = field(default_factory=list)  # every process, killed by close()
    paused: set[str] = field(default_factory=set)

    # -- addresses
    def host(self, name: str) -> Host:
        return self.hosts[name]

    def names(self, kind: str) -> list[str]:
        return [n for n in self.config.names() if kind_of(n)[0] == kind]

    @property
    def etcd_endpoints(self) -> list[str]:
        return [f"{self.host(n).address}:{ETCD_CLIENT_PORT}" for n in self.names("etcd")]

    def store_address(self, replica: int) -> str:
        return f"{self.host(f'store-{replica}').address}:{STORE_PORT}"

    @property
    def broker_endpoints(self) -> list[str]:
        return [f"{self.host(n).address}:{BROKER_PORT}" for n in self.names("broker")]

    @property
    def group(self) -> str:
        return GROUP

    @property
    def endpoint(self) -> str:
        """The clients' target: every broker, in order (gRPC pick_first)."""
        return "ipv4:" + ",".join(self.broker_endpoints)

    def data_dir(self, name: str) -> Path:
        return self.hosts.root_dir / "data" / name

    # -- commands
    def command(self, name: str) -> tuple[list[str], dict[str, str]]:
        kind, i = kind_of(name)
        host = self.host(name)
        if kind == "etcd":
            return self._etcd_command(name, host), {}
        if kind == "store":
            env = {
                "PYRMQ_STORE_ETCD_ENDPOINTS": ",".join(self.etcd_endpoints),
                "PYRMQ_STORE_REPLICA_ID": str(i),
                "PYRMQ_STORE_BROKER_ROLE": self.config.broker_role,
                "PYRMQ_STORE_BROKER_NAME": GROUP,
                "PYRMQ_STORE_ADVERTISED_HOST": host.address,
                "PYRMQ_STORE_FLUSH_MODE": "SYNC",
                "PYRMQ_STORE_LEASE_TTL_MS": str(self.config.lease_ttl_ms),
                "PYRMQ_STORE_HA_MAX_TIME_SLAVE_NOT_CATCHUP_MS": str(self.config.ha_max_time_slave_not_catchup_ms),
                "PYRMQ_STORE_COMMITLOG_FILE_SIZE_BYTES": str(self.config.commitlog_file_size_bytes),
                # Each queue's first ConsumeQueue file is allocated whole: 6 MB at the default
                # 300,000 units would fill the small disk with a few topics.
                "PYRMQ_STORE_CONSUME_QUEUE_UNITS_PER_FILE": str(self.config.consume_queue_units_per_file),
                # A full disk refuses puts (at 90 %), checked every second; forced cleaning,
                # which deletes unconsumed segments by design, is left out of these tests.
                "PYRMQ_STORE_CLEAN_RESOURCE_INTERVAL_MS": "1000",
                "PYRMQ_STORE_DISK_SPACE_CLEAN_FORCIBLY_RATIO": "1.0",
                **dict(self.config.store_env),
            }
            args = [sys.executable, "-m", "services.store", "--data-dir", str(self.data_dir(name))]
            return [*args, "--host", host.address, "--port", str(STORE_PORT), "--metrics-port", "-1"], env
        if kind == "scheduler":
            env = {
                "PYRMQ_SCHEDULER_ETCD_ENDPOINTS": ",".join(self.etcd_endpoints),
                "PYRMQ_SCHEDULER_BROKER_NAME": GROUP,
            }
            args = [sys.executable, "-m", "services.scheduler", "--data-dir", str(self.data_dir(name))]
            return [*args, "--host", host.address, "--port", str(SCHEDULER_PORT), "--metrics-port", "-1"], env
        assert kind == "broker", name
        env = {
            "PYRMQ_BROKER_ETCD_ENDPOINTS": ",".join(self.etcd_endpoints),
            "PYRMQ_BROKER_BROKER_NAME": GROUP,
            "PYRMQ_BROKER_TLS_MODE": "plaintext",
            **dict(self.config.broker_env),
        }
        args = [sys.executable, "-m", "services.broker", "--host", host.address, "--port", str(BROKER_PORT)]
        args += ["--remoting-port", "-1", "--metrics-port", "-1", "--store-address", self.store_address(0)]
        return args, env

    def _etcd_command(self, name: str, host: Host) -> list[str]:
        peers = ",".join(f"{n}=http://{self.host(n).address}:{ETCD_PEER_PORT}" for n in self.names("etcd"))
        client_url = f"http://{host.address}:{ETCD_CLIENT_PORT}"
        peer_url = f"http://{host.address}:{ETCD_PEER_PORT}"
        return [
            str(etcd_binary()),
            f"--name={name}",
            f"--data-dir={self.data_dir(name)}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster={peers}",
            "--initial-cluster-state=new",
            f"--initial-cluster-token=pyrmq-hosts-{self.hosts.run_id}",
            f"--heartbeat-interval={self.config.etcd_heartbeat_ms}",
            f"--election-timeout={self.config.etcd_election_ms}",
            "--log-level=warn",
            "--logger=zap",
            "--log-outputs=stderr",
        ]

    # -- starting and stopping
    def start(self) -> HostsCluster:
        require("etcd")
        for name in self.names("store"):
            self.hosts.mount_tmpfs(self.data_dir(name), self.config.disk_bytes)
        for name in self.names("etcd"):
            # A disk of its own, as on its own machine: an fsync stalled by the rest of the test
            # suite's writes on the shared disk (seen once at the start of a `make test` phase:
            # a member silent for 5 s, the replicas' leases gone) is no fault under test.
            self.hosts.mount_tmpfs(self.data_dir(name), self.config.etcd_disk_bytes)
        self.spawn(*self.names("etcd"))
        self.wait_etcd_leader(30.0)
        self.spawn(*self.names("store"))
        self.wait_master(30.0)
        self.spawn(*self.names("broker"))
        self.spawn(*self.names("scheduler"))
        for topic, message_type in FAULTS_TOPICS:
            self.create_topic(topic, message_type)
        for group, fifo in FAULTS_GROUPS:
            self.create_group(group, fifo)
        return self

    def spawn(self, *names: str) -> None:
        """Start services (each must not be running), all at once; return when each is ready:
        a store or a broker has printed its ready line, an etcd member answers its status."""
        for name in names:
            assert name not in self.running or self.running[name].popen.poll() is not None, f"{name} runs"
            args, env = self.command(name)
            faketime = self.config.faketime and kind_of(name)[0] != "etcd"
            process = Process(self.host(name).command(args, faketime=faketime), REPO_ROOT, env=env)
            self.started.append(process)
            self.running[name] = process
            self.paused.discard(name)
        for name in names:
            kind, i = kind_of(name)
            if kind == "etcd":
                wait_until(
                    lambda i=i: self._etcd_status(i) is not None,  # type: ignore[misc]
                    READY_TIMEOUT_S,
                    f"{name} answering",
                    describe=lambda name=name: self.log(name),  # type: ignore[misc]
                    pause_max_s=0.2,
                )
                continue
            while (match := self.running[name].wait_line(READY))["name"] != kind:
                pass
            del match

    def kill(self, name: str) -> None:
        """kill -9, and wait until the process is gone (a paused one too)."""
        process = self.running[name]
        os.kill(process.popen.pid, signal.SIGKILL)
        assert process.popen.wait(EXIT_WAIT_S) == -signal.SIGKILL
        self.paused.discard(name)

    def restart(self, name: str) -> None:
        """Start a killed service again, on its host with its data."""
        self.spawn(name)

    def pause(self, name: str) -> None:
        """SIGSTOP, returning once the process is stopped."""
        sigstop(self.running[name].popen.pid, name)
        self.paused.add(name)

    def resume(self, name: str) -> None:
        os.kill(self.running[name].popen.pid, signal.SIGCONT)
        self.paused.discard(name)

    def alive(self, name: str) -> bool:
        return name in self.running and self.running[name].popen.poll() is None

    def stop(self) -> None:
        """SIGTERM in reverse order (brokers, stores, etcd); each must exit 0."""
        for name in reversed(self.config.names()):
            if self.alive(name):
                if name in self.paused:
                    self.resume(name)
                code = self.running[name].stop(signal.SIGTERM)
                clean = (0, -signal.SIGTERM) if kind_of(name)[0] == "etcd" else (0,)  # etcd dies of it, cleanly
                assert code in clean, f"{name} exited {code}:\n{self.log(name)}"

    def close(self) -> None:
        for process in self.started:
            if process.popen.poll() is None:
                os.kill(process.popen.pid, signal.SIGCONT)  # a stopped process dies of SIGKILL anyway
            process.kill()

    def log(self, name: str, tail: int = 4000) -> str:
        process = self.running.get(name)
        return process.log()[-tail:] if process else ""

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {name} ---\n{self.log(name, tail)}" for name in self.running)

    # -- etcd
    def etcd(self, timeout_s: float = 5.0) -> EtcdClient:
        return EtcdClient(self.etcd_endpoints, timeout_s=timeout_s, attempt_timeout_s=1.0)

    def _etcd_status(self, index: int) -> tuple[int, int] | None:
        """(member id, the leader it sees) of etcd member ``index``, None if it does not answer."""
        with EtcdClient(self.etcd_endpoints, timeout_s=1.0) as client:
            try:
                status = client.status(index, 1.0)
            except EtcdUnavailable:
                return None
        return status.header.member_id, status.leader

    def etcd_leader(self) -> int | None:
        """The index of the etcd member that every answering member names leader, else None."""
        ids, leaders = {}, set()
        for i in range(self.config.etcd_members):
            status = self._etcd_status(i)
            if status is not None:
                ids[status[0]] = i
                leaders.add(status[1])
        return ids.get(leaders.pop()) if len(leaders) == 1 else None

    def wait_etcd_leader(self, timeout_s: float) -> int:
        leader = wait_until(
            self.etcd_leader, timeout_s, "an etcd leader", describe=self.logs, accept=lambda i: i is not None
        )
        assert leader is not None
        return leader

    def move_etcd_leader(self, index: int, timeout_s: float = 10.0) -> None:
        """Make etcd member ``index`` the leader (``etcdctl move-leader``, asked of the leader)."""
        leader = self.wait_etcd_leader(timeout_s)
        if leader == index:
            return
        status = self._etcd_status(index)
        assert status is not None, f"etcd-{index} does not answer"
        etcdctl = shutil.which("etcdctl")
        assert etcdctl, "etcdctl not found (apt-get install -y etcd-client)"
        endpoint = f"--endpoints=http://{self.etcd_endpoints[leader]}"
        subprocess.run(
            [etcdctl, endpoint, "move-leader", f"{status[0]:x}"], check=True, capture_output=True, timeout=20
        )
        wait_until(self.etcd_leader, timeout_s, f"etcd-{index} leader", accept=lambda i: i == index, pause_max_s=0.1)

    # -- the group, as etcd says
    def group_state(self) -> GroupState:
        keys = GroupKeys(GROUP)
        with self.etcd() as etcd:
            result = etcd.txn([], [Get(keys.root, prefix=True)])
        return GroupState.from_kvs(keys, result.results[0].kvs, result.revision)

    def _group_state_or_none(self) -> GroupState | None:
        try:
            return self.group_state()
        except EtcdUnavailable:
            return None  # etcd has no quorum this moment: not an answer

    @staticmethod
    def live_master(state: GroupState | None) -> int | None:
        if state is None or state.master is None or not state.master_alive():
            return None
        return state.master.masterBrokerId

    def master(self) -> int | None:
        """The live master's replica id as etcd says, None if there is none (or no quorum)."""
        return self.live_master(self._group_state_or_none())

    def master_name(self) -> str:
        master = self.wait_master(10.0)
        return f"store-{master}"

    def wait_master(self, timeout_s: float, other_than: int | None = None) -> int:
        state = wait_until(
            self._group_state_or_none,
            timeout_s,
            f"a live master (other than {other_than})",
            describe=lambda: f"{self._group_state_or_none()}\n{self.logs()}",
            accept=lambda seen: self.live_master(seen) not in (None, other_than),
            pause_max_s=POLL_S,
        )
        master = self.live_master(state)
        assert master is not None
        return master

    def wait_new_master(self, old: int, timeout_s: float = 15.0) -> int:
        return self.wait_master(timeout_s, other_than=old)

    def wait_in_sync(self, timeout_s: float = 40.0) -> GroupState:
        """Until a live master's SyncStateSet holds every replica (each slave caught up)."""

        def all_in_sync(state: GroupState | None) -> bool:
            if state is None or state.sync_state is None or self.live_master(state) is None:
                return False
            return len(state.sync_state.syncStateSet) == self.config.replicas

        state = wait_until(
            self._group_state_or_none,
            timeout_s,
            "every replica in sync",
            describe=lambda: f"{self._group_state_or_none()}\n{self.logs()}",
            accept=all_in_sync,
            pause_max_s=POLL_S,
        )
        assert state is not None
        return state

    # -- admin, through broker-0
    def create_topic(self, name: str, message_type: str = "NORMAL", queues: int = 4) -> None:
        request = admin_pb.CreateTopicRequest(
            name=name, message_type=admin_pb.MessageType.Value(message_type), queue_nums=queues
        )
        with grpc.insecure_channel(self.broker_endpoints[0]) as channel:
            admin_grpc.AdminStub(channel).CreateTopic(request, timeout=10)

    def create_group(self, name: str, fifo: bool = False) -> None:
        with grpc.insecure_channel(self.broker_endpoints[0]) as channel:
            admin_grpc.AdminStub(channel).CreateGroup(admin_pb.CreateGroupRequest(name=name, fifo=fifo), timeout=10)
