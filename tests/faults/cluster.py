"""A pyrmq cluster of separate service processes (store, broker, scheduler, txcheck), each
started as ``python -m services.<name>`` exactly as ``pyrmq up`` does, but by the test, so one
service can be ``kill -9``ed and restarted while the others keep running (``pyrmq up`` stops
the whole cluster when a child dies, tests/broker/test_process.py).

The store and the broker listen on fixed ports picked at start (a restarted store must be where
the broker and the scheduler already look for it; a restarted broker where clients look).
Settings go through the environment (``PYRMQ_<SERVICE>_<KEY>``) or extra flags.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from pyrmq.admin.v1 import admin_pb2 as admin_pb
from pyrmq.admin.v1 import admin_pb2_grpc as admin_grpc

from tests.support.processes import Process

REPO_ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"^pyrmq-(?P<name>\w+) ready (?P<rest>.*)$")
EXIT_WAIT_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Service:
    name: str
    process: Process
    ready: dict[str, str]
    spawned_t: float
    ready_t: float


@dataclass
class Cluster:
    """``start()`` brings up the services named in ``services`` in order."""

    data_dir: Path
    processes: list[Process]  # the `processes` fixture: killed at teardown
    services: tuple[str, ...] = ("store", "broker", "scheduler", "txcheck")
    env: dict[str, str] = field(default_factory=dict)  # PYRMQ_* for every service
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    store_port: int = field(default_factory=free_port)
    broker_port: int = field(default_factory=free_port)
    running: dict[str, Service] = field(default_factory=dict)

    @property
    def store_address(self) -> str:
        return f"127.0.0.1:{self.store_port}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.broker_port}"

    def args(self, name: str) -> list[str]:
        common = ["--metrics-port", "-1"]
        by_name = {
            "store": ["--data-dir", str(self.data_dir), "--port", str(self.store_port)],
            # No remoting port unless a test asks (extra_args come last: --remoting-port 0 wins).
            "broker": ["--port", str(self.broker_port), "--remoting-port", "-1", "--store-address", self.store_address],
            "scheduler": ["--data-dir", str(self.data_dir), "--store-address", self.store_address, "--port", "0"],
            "txcheck": ["--store-address", self.store_address, "--broker-address", self.endpoint, "--port", "0"],
        }
        return [sys.executable, "-m", f"services.{name}", *by_name[name], *common, *self.extra_args.get(name, [])]

    def environment(self, name: str) -> dict[str, str]:
        """The PYRMQ_* variables of service ``name`` (a subclass adds per-service ones)."""
        return self.env

    def module(self, name: str) -> str:
        """The service a label runs (``store`` for every label here; a replica set has several)."""
        return name

    def start(self) -> Cluster:
        for name in self.services:
            self.spawn(name)
        return self

    def spawn(self, name: str) -> Service:
        """Start one service and wait for its ready line (the previous one of that name must be gone)."""
        t0 = time.monotonic()
        process = Process(self.args(name), REPO_ROOT, env=self.environment(name))
        self.processes.append(process)
        while True:
            match = process.wait_line(READY)
            if match["name"] == self.module(name):
                break
        ready = dict(item.split("=", 1) for item in match["rest"].split() if "=" in item)
        service = Service(name, process, ready, t0, time.monotonic())
        self.running[name] = service
        return service

    def kill(self, name: str) -> None:
        """kill -9, and wait until the process is gone."""
        process = self.running[name].process
        os.kill(process.popen.pid, signal.SIGKILL)
        assert process.popen.wait(EXIT_WAIT_S) == -signal.SIGKILL

    def log(self, name: str, tail: int = 4000) -> str:
        service = self.running.get(name)
        return service.process.log()[-tail:] if service else ""

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(f"--- {name} ---\n{self.log(name, tail)}" for name in self.running)

    def stop(self) -> None:
        """SIGTERM in reverse order; each must exit 0."""
        for name in reversed(list(self.running)):
            process = self.running[name].process
            if process.popen.poll() is None:
                code = process.stop(signal.SIGTERM)
                assert code == 0, f"{name} exited {code}:\n{process.log()[-3000:]}"

    # -- admin
    def create_topic(self, name: str, message_type: str = "NORMAL", queues: int = 4) -> None:
        with grpc.insecure_channel(self.endpoint) as channel:
            admin_grpc.AdminStub(channel).CreateTopic(
                admin_pb.CreateTopicRequest(
                    name=name, message_type=admin_pb.MessageType.Value(message_type), queue_nums=queues
                ),
                timeout=10,
            )

    def create_group(self, name: str, fifo: bool = False) -> None:
        with grpc.insecure_channel(self.endpoint) as channel:
            admin_grpc.AdminStub(channel).CreateGroup(admin_pb.CreateGroupRequest(name=name, fifo=fifo), timeout=10)
