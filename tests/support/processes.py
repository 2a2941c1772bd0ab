"""Service processes for tests: start one, read its stdout for the ready line with a timeout,
stop or kill it (``Process``); ``start_store`` starts ``python -m services.store``,
``start_cluster`` a store and a broker; the ready lines of the store, the broker and ``pyrmq up``;
``child_pids``, the processes ``pyrmq up`` started.
The `processes` fixture (tests/conftest.py) kills whatever a test started."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.cli import run_pyrmq
from tests.support.waits import wait_until

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60
EXIT_TIMEOUT_S = 30
STORE_READY = re.compile(r"^pyrmq-store ready grpc=(?P<grpc>\S+) metrics=(?P<metrics>\S+) data=(?P<data>\S+)$")
BROKER_READY = re.compile(r"^pyrmq-broker ready grpc=\S+ .*endpoint=(?P<endpoint>\S+) tls=")
# ``pyrmq up`` (store and broker under one parent): its one ready line.
UP_READY = re.compile(
    r"^pyrmq up: store grpc=(?P<store>\S+) metrics=\S+ data=\S+ broker grpc=(?P<broker>\S+) "
    r"(?:remoting=(?P<remoting>\S+) )?metrics=\S+ "
    r"store=(?P<broker_store>\S+) endpoint=(?P<endpoint>\S+) .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$"
)


class Process:
    """A child process whose stdout lines are read by a thread, so waits can time out."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None, own_group: bool = False) -> None:
        """``own_group``: in a new process group, as a shell's foreground job (a terminal's
        Ctrl-C is ``os.killpg(popen.pid, SIGINT)``)."""
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.popen = subprocess.Popen(
            args,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            process_group=0 if own_group else None,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.popen.stdout, self.lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.popen.stderr, self.stderr.append), daemon=True).start()

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in stream:
            sink(line.rstrip("\n"))
        stream.close()
        sink(None)

    def wait_line(self, pattern: re.Pattern[str]) -> re.Match[str]:
        while True:
            try:
                line = self.lines.get(timeout=READY_TIMEOUT_S)
            except queue.Empty:
                raise AssertionError(f"no ready line; stderr:\n{self.log()}") from None
            if line is None:
                raise AssertionError(f"exited {self.popen.wait()} before ready; stderr:\n{self.log()}")
            if match := pattern.match(line):
                return match

    def stop(self, signum: int) -> int:
        self.popen.send_signal(signum)
        return self.popen.wait(EXIT_TIMEOUT_S)

    def wait_log(self, text: str, timeout_s: float = 10.0) -> str:
        """The stderr so far, once it contains ``text`` or ``timeout_s`` passed (another thread
        reads stderr, so it may lag the process's exit)."""
        try:
            wait_until(lambda: text in self.log(), timeout_s)
        except AssertionError:
            pass  # the caller's assertion on the log says what is missing
        return self.log()

    def log(self) -> str:
        return "\n".join(line for line in self.stderr if line is not None)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()


def sigstop(pid: int, what: str = "", timeout_s: float = 5.0) -> None:
    """SIGSTOP, returning once the process is stopped (the signal is delivered asynchronously)."""
    os.kill(pid, signal.SIGSTOP)
    label = f"{what} (pid {pid})" if what else f"pid {pid}"
    wait_until(
        lambda: process_state(pid) in ("T", "t"), timeout_s, f"{label} stopped", describe=lambda: process_state(pid)
    )


def process_state(pid: int) -> str:
    """The state letter of /proc/PID/stat (after the parenthesised command name); "" once gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return ""
    return stat[stat.rindex(")") + 2]


def child_pids(parent_pid: int) -> dict[str, int]:
    """{"store": pid, "broker": pid, ...} of ``pyrmq up``'s children (the last part of the module
    each runs), from /proc (Linux)."""
    children = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent_pid and b"-m" in cmdline:
            children[cmdline[cmdline.index(b"-m") + 1].decode().rsplit(".", 1)[-1]] = int(pid)
    return children


def store_command(data_dir: Path | str, *extra: str, metrics_port: int = 0, port: int = 0) -> list[str]:
    """``python -m services.store`` on gRPC ``port`` (0: an ephemeral one) with its data in
    ``data_dir`` (``metrics_port`` 0: an ephemeral one, -1: none)."""
    return [
        sys.executable,
        "-m",
        "services.store",
        "--data-dir",
        str(data_dir),
        "--port",
        str(port),
        "--metrics-port",
        str(metrics_port),
        *extra,
    ]


def broker_command(store_address: str, *extra: str, metrics_port: int = -1, remoting_port: int = -1) -> list[str]:
    """``python -m services.broker`` on an ephemeral client port over the store at
    ``store_address`` (``metrics_port`` 0: an ephemeral one, -1: none; ``remoting_port`` likewise:
    off unless a test speaks remoting, never RocketMQ's fixed 9876)."""
    return [
        sys.executable,
        "-m",
        "services.broker",
        "--port",
        "0",
        "--remoting-port",
        str(remoting_port),
        "--metrics-port",
        str(metrics_port),
        "--store-address",
        store_address,
        *extra,
    ]


def start_store(processes: list[Process], data_dir: Path, cwd: Path) -> tuple[Process, re.Match[str]]:
    process = Process(store_command(data_dir, "--commitlog-file-size-bytes", str(1 << 20)), cwd)
    processes.append(process)
    return process, process.wait_line(STORE_READY)


def pyrmq_status(endpoint: str) -> dict:
    """``pyrmq status --json`` of the cluster whose broker is at ``endpoint`` (metrics not probed),
    run in this process (tests/support/cli.py)."""
    _, out, _ = run_pyrmq("status", "--endpoint", endpoint, "--json", "--metrics-port", "-1")
    return json.loads(out)


def pyrmq_up_command(
    data_dir: Path | str,
    *extra: str,
    port: int = 0,
    store_port: int = 0,
    metrics_port: int = 0,
    remoting_port: int = -1,
) -> list[str]:
    """``pyrmq up`` with its data in ``data_dir``; ports 0 are ephemeral (``metrics_port`` -1: none;
    ``remoting_port`` -1, the default: the brokers serve no remoting port, never the fixed 9876)."""
    return [
        sys.executable,
        "-m",
        "services.launcher.cli",
        "up",
        "--data-dir",
        str(data_dir),
        "--port",
        str(port),
        "--remoting-port",
        str(remoting_port),
        "--store-port",
        str(store_port),
        "--metrics-port",
        str(metrics_port),
        *extra,
    ]


def start_cluster(data_dir: Path, started: list) -> str:
    """A store and a broker as subprocesses on 127.0.0.1 (Spark's workers reach them like any
    client: tests/pipeline); returns the broker's endpoint."""
    _, ready = start_store(started, data_dir, ROOT)
    broker = Process(broker_command(ready["grpc"]), ROOT)
    started.append(broker)
    return broker.wait_line(BROKER_READY)["endpoint"]
