"""The store process (``python -m services.store``) and ``pyrmq up``, run as real subprocesses."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pyrmq.store.v1 import store_pb2 as pb
from pyrmq.store.v1 import store_pb2_grpc as pb_grpc

from tests.support.processes import EXIT_TIMEOUT_S, STORE_READY, Process, pyrmq_up_command, start_store, store_command
from tests.support.waits import wait_until

UP_READY = re.compile(r"^pyrmq up: store grpc=(?P<grpc>\S+) metrics=(?P<metrics>\S+) data=(?P<data>\S+) ")


def test_store_process_serves_stops_cleanly_and_keeps_data(tmp_path: Path, processes: list[Process]) -> None:
    data_dir = tmp_path / "data"
    store, ready = start_store(processes, data_dir, tmp_path)
    assert ready["data"] == str((data_dir / "store").resolve())
    assert ready["metrics"].startswith("http://127.0.0.1:") and ready["metrics"].endswith("/metrics")
    with grpc.insecure_channel(ready["grpc"]) as channel:
        stub = pb_grpc.StoreStub(channel)
        [result] = stub.PutMessages(
            pb.PutMessagesRequest(messages=[pb.Message(topic="TopicTest", queue_id=0, body=b"survives a restart")]),
            timeout=10,
        ).results
        assert result.status == pb.PUT_OK
    assert store.stop(signal.SIGTERM) == 0, store.log()
    assert "store service stopped" in store.log()

    _, ready = start_store(processes, data_dir, tmp_path)
    with grpc.insecure_channel(ready["grpc"]) as channel:
        stub = pb_grpc.StoreStub(channel)
        found = stub.LookMessageByPhyOffset(pb.LookMessageByPhyOffsetRequest(phy_offset=result.phy_offset), timeout=10)
        assert found.body == b"survives a restart"
        got = stub.GetMessages(pb.GetMessagesRequest(topic="TopicTest", queue_id=0, queue_offset=0), timeout=10)
        assert got.status == pb.FOUND and [m.body for m in got.messages] == [b"survives a restart"]


def test_pyrmq_up_starts_the_store_and_stops_on_sigint(tmp_path: Path, processes: list[Process]) -> None:
    data_dir = tmp_path / "data"
    up = Process(
        pyrmq_up_command(data_dir),
        tmp_path,
    )
    processes.append(up)
    ready = up.wait_line(UP_READY)
    assert ready["data"] == str((data_dir / "store").resolve())
    with grpc.insecure_channel(ready["grpc"]) as channel:
        response = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="pyrmq.store.v1.Store"), timeout=10
        )
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    assert up.stop(signal.SIGINT) == 0, up.log()
    assert "[store]" not in up.log()  # the child printed nothing but its ready line


def test_ctrl_c_in_a_terminal_stops_pyrmq_up_cleanly(tmp_path: Path, processes: list[Process]) -> None:
    """A terminal's Ctrl-C signals the whole foreground process group; the children are in their
    own group, so each gets exactly one SIGINT (from `up`) and exits 0."""
    up = Process(
        pyrmq_up_command(tmp_path / "data"),
        tmp_path,
        own_group=True,
    )
    processes.append(up)
    up.wait_line(UP_READY)
    os.killpg(up.popen.pid, signal.SIGINT)
    assert up.popen.wait(EXIT_TIMEOUT_S) == 0, up.log()
    assert "exited with code" not in up.log()


def test_pyrmq_up_exits_non_zero_when_the_store_dies(tmp_path: Path, processes: list[Process]) -> None:
    """Without supervision (--restart-limit 0; by default up restarts it: tests/test_up_supervise.py)."""
    up = Process(
        pyrmq_up_command(tmp_path / "data", "--restart-limit", "0"),
        tmp_path,
    )
    processes.append(up)
    up.wait_line(UP_READY)
    child_pid = _store_child_of(up.popen.pid)
    os.kill(child_pid, signal.SIGKILL)
    assert up.popen.wait(EXIT_TIMEOUT_S) != 0
    assert "store exited unexpectedly" in up.log()


def test_store_child_stops_when_pyrmq_up_is_killed(tmp_path: Path, processes: list[Process]) -> None:
    up = Process(
        pyrmq_up_command(tmp_path / "data"),
        tmp_path,
    )
    processes.append(up)
    up.wait_line(UP_READY)
    child_pid = _store_child_of(up.popen.pid)
    os.kill(up.popen.pid, signal.SIGKILL)
    up.popen.wait(EXIT_TIMEOUT_S)

    def exited() -> bool:
        try:
            os.waitpid(child_pid, os.WNOHANG)  # reaped by init normally; harmless otherwise
        except ChildProcessError:
            pass
        try:
            return Path(f"/proc/{child_pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie
        except FileNotFoundError:
            return True  # gone

    wait_until(exited, EXIT_TIMEOUT_S, f"the store child {child_pid} exited")


def _store_child_of(parent_pid: int) -> int:
    """The `-m services.store` child of ``parent_pid`` (`pyrmq up` also runs the broker)."""
    [pid] = [pid for pid in _children_of(parent_pid) if b"services.store" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    return pid


def _children_of(parent_pid: int) -> list[int]:
    """Pids whose parent is ``parent_pid`` (Linux /proc/<pid>/stat, field 4)."""
    children = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent_pid:
            children.append(int(pid))
    return children


def test_a_second_store_waits_for_the_lock_then_starts_or_gives_up(tmp_path: Path, processes: list[Process]) -> None:
    data_dir = tmp_path / "data"
    first, _ = start_store(processes, data_dir, tmp_path)
    impatient = Process(
        store_command(data_dir, "--lock-wait-ms", "300", metrics_port=-1),
        tmp_path,
    )
    processes.append(impatient)
    assert impatient.popen.wait(EXIT_TIMEOUT_S) == 1
    assert "is in use by another process" in impatient.wait_log("is in use by another process")

    patient = Process(
        store_command(data_dir, "--lock-wait-ms", "30000", metrics_port=-1),
        tmp_path,
    )
    processes.append(patient)
    assert "waiting for it to exit" in patient.wait_log("waiting for it to exit")  # it waits on the lock now
    first.popen.kill()  # a kill -9: the lock goes with the process
    patient.wait_line(STORE_READY)
    assert patient.stop(signal.SIGTERM) == 0, patient.log()
