"""Real etcd members for tests: ``etcd_server`` (one member) and ``etcd_cluster`` (three), on free
loopback ports with their data on /dev/shm when there is one (else under the test's tmp_path),
with short raft timings (``--heartbeat-interval 50 --election-timeout 500``) so a leader is
elected, and re-elected after a kill, in well under a second. Stopped (SIGKILL) after the test.
``EtcdCluster.kill_leader()`` finds the leader through Maintenance.Status and SIGKILLs it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from services.runtime.etcd import EtcdUnavailable
from services.runtime.etcd.rpc.client import EtcdClient
from services.runtime.process import free_ports
from tests.support.components import etcd_binary, require
from tests.support.waits import wait_until

HEARTBEAT_MS = 50
ELECTION_MS = 500
READY_TIMEOUT_S = 20.0
SHM = Path("/dev/shm")


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class EtcdCluster:
    members: list[Member]
    root: Path
    killed: list[int] = field(default_factory=list)

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    def start(self) -> None:
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        for m in self.members:
            log = open(m.data_dir.parent / f"{m.name}.log", "wb")  # closed by the child's exit
            m.process = subprocess.Popen(
                [
                    str(etcd_binary()),
                    f"--name={m.name}",
                    f"--data-dir={m.data_dir}",
                    f"--listen-client-urls=http://{m.endpoint}",
                    f"--advertise-client-urls=http://{m.endpoint}",
                    f"--listen-peer-urls={m.peer_url}",
                    f"--initial-advertise-peer-urls={m.peer_url}",
                    f"--initial-cluster={initial}",
                    "--initial-cluster-state=new",
                    f"--initial-cluster-token=pyrmq-test-{self.root.name}",
                    f"--heartbeat-interval={HEARTBEAT_MS}",
                    f"--election-timeout={ELECTION_MS}",
                    "--logger=zap",
                    "--log-outputs=stderr",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()
        self.wait_leader(READY_TIMEOUT_S)

    def client(self, **kwargs: float) -> EtcdClient:
        return EtcdClient(self.endpoints, **kwargs)

    def leader_index(self, timeout_s: float = 1.0) -> int | None:
        """The index of the member every live member names as leader, or None."""
        with EtcdClient(self.endpoints, timeout_s=timeout_s) as client:
            ids: dict[int, int] = {}
            leaders = set()
            for i, m in enumerate(self.members):
                if not m.alive():
                    continue
                try:
                    status = client.status(i, timeout_s)
                except EtcdUnavailable:
                    return None
                ids[status.header.member_id] = i
                leaders.add(status.leader)
            if len(leaders) != 1:
                return None
            return ids.get(leaders.pop())

    def wait_leader(self, timeout_s: float) -> int:

        def leader() -> int | None:
            for m in self.members:
                if m.process is not None and m.process.poll() is not None and self.members.index(m) not in self.killed:
                    raise AssertionError(f"etcd {m.name} exited {m.process.returncode}:\n{self.log(m)}")
            return self.leader_index()

        return wait_until(
            leader,
            timeout_s,
            "an etcd leader",
            describe=lambda: "\n".join(self.log(m) for m in self.members),
            accept=lambda index: index is not None,  # the leader may be member 0
        )

    def kill(self, index: int) -> None:
        """SIGKILL of one member."""
        process = self.members[index].process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait()
        self.killed.append(index)

    def kill_leader(self) -> int:
        """SIGKILL of the current leader; returns its index."""
        leader = self.wait_leader(5.0)
        self.kill(leader)
        return leader

    def log(self, m: Member) -> str:
        path = m.data_dir.parent / f"{m.name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def stop(self) -> None:
        for m in self.members:
            if m.alive():
                assert m.process is not None
                m.process.kill()
                m.process.wait()


@dataclass
class _Root:
    path: Path
    owned: bool


def data_root(tmp_path: Path) -> _Root:
    if SHM.is_dir():
        return _Root(Path(tempfile.mkdtemp(prefix="pyrmq-etcd-", dir=SHM)), True)
    return _Root(tmp_path / "etcd", False)


def start_cluster(tmp_path: Path, size: int) -> Iterator[EtcdCluster]:
    require("etcd")
    root = data_root(tmp_path)
    root.path.mkdir(parents=True, exist_ok=True)
    ports = free_ports(2 * size)
    members = [Member(f"m{i}", ports[2 * i], ports[2 * i + 1], root.path / f"m{i}.etcd") for i in range(size)]
    cluster = EtcdCluster(members, root.path)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        if root.owned:
            shutil.rmtree(root.path, ignore_errors=True)


@pytest.fixture
def etcd_server(tmp_path: Path) -> Iterator[EtcdCluster]:
    """One etcd member."""
    yield from start_cluster(tmp_path, 1)


@pytest.fixture
def etcd_cluster(tmp_path: Path) -> Iterator[EtcdCluster]:
    """Three etcd members."""
    yield from start_cluster(tmp_path, 3)
