"""Store replicas for replication fault tests (tests/store/ha/test_faults.py): ``Replica``
(replica_group.py: a store and its gRPC server in this process, controller-mode or static
roles), and ``ReplicaProcess``, ``python -m services.store`` as a child process configured by
``PYRMQ_STORE_*`` variables, which a test can SIGSTOP, SIGCONT and SIGKILL. Plus the
comparison of two CommitLogs' segment files and a gRPC put that never raises."""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import grpc
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from tests.support.processes import ROOT, STORE_READY, Process, sigstop
from tests.support.replica_group import Replica

__all__ = ["Replica", "ReplicaProcess", "put_status", "read_commitlog", "segment_names"]


@dataclass
class ReplicaProcess:
    """``python -m services.store`` on a fixed port with its data in ``data_dir``; ``settings``
    become ``PYRMQ_STORE_<KEY>`` variables."""

    data_dir: Path
    port: int
    settings: dict[str, object]
    processes: list[Process]  # the `processes` fixture: killed at teardown
    process: Process | None = None
    stopped: list[float] = field(default_factory=list)  # monotonic times of SIGSTOPs

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.popen.pid

    @property
    def commitlog_dir(self) -> Path:
        return self.data_dir / "store" / "commitlog"

    def start(self) -> ReplicaProcess:
        env = {
            f"PYRMQ_STORE_{key.upper()}": str(value.value if isinstance(value, Enum) else value)
            for key, value in self.settings.items()
        }
        args = [sys.executable, "-m", "services.store", "--data-dir", str(self.data_dir), "--port", str(self.port)]
        self.process = Process([*args, "--metrics-port", "-1"], ROOT, env=env)
        self.processes.append(self.process)
        self.process.wait_line(STORE_READY)
        return self

    def sigstop(self) -> None:
        """SIGSTOP, returning once the process is stopped (the signal is delivered asynchronously)."""
        sigstop(self.pid)
        self.stopped.append(time.monotonic())

    def sigcont(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def sigkill(self) -> None:
        assert self.process is not None
        os.kill(self.pid, signal.SIGKILL)
        self.process.popen.wait(10)

    def terminate(self) -> int:
        assert self.process is not None
        return self.process.stop(signal.SIGTERM)

    def log(self) -> str:
        return self.process.log() if self.process is not None else ""


def put_status(stub: pb_grpc.StoreStub, body: bytes, queue_id: int = 0, timeout_s: float = 10) -> tuple[str, int, int]:
    """One message put over gRPC: (status name, phy_offset, wrote_bytes), where a whole refused
    call (gRPC UNAVAILABLE, a deadline) reads as its gRPC code's name and (-1, 0)."""
    request = pb.PutMessagesRequest(messages=[pb.Message(topic="TopicTest", queue_id=queue_id, body=body)])
    try:
        [result] = stub.PutMessages(request, timeout=timeout_s).results
    except grpc.RpcError as exc:
        return f"grpc:{exc.code().name}", -1, 0
    return pb.PutStatus.Name(result.status), result.phy_offset, result.wrote_bytes


def read_commitlog(directory: Path, file_size: int, start: int, end: int) -> bytes:
    """The CommitLog bytes [start, end) from the segment files in ``directory``."""
    out = bytearray()
    offset = start
    while offset < end:
        base = offset - offset % file_size
        with open(directory / f"{base:020d}", "rb") as f:
            f.seek(offset - base)
            data = f.read(min(end, base + file_size) - offset)
        assert data, f"segment {base:020d} ends before {offset}"
        out += data
        offset += len(data)
    return bytes(out)


def segment_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.isdigit())
