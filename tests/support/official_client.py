"""The official rocketmq-python-client 5.1.2, driven in subprocesses (its apache.rocketmq.v2 stubs
clash with ours in one process): tests/broker/clients/send.py and consume.py.

* ``run_client``: send.py to completion: one result per message and the producer's settings;
* ``consume`` / ``produce``: consume.py to completion / send.py asserting every send is OK;
* ``Client``: send.py in the background (open transactions answered by its checker), its JSON
  lines on a queue.

The client writes its log under ~/logs: each run gets HOME set to a test directory.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

CLIENTS = Path(__file__).resolve().parents[1] / "broker" / "clients"
SEND_SCRIPT = CLIENTS / "send.py"
LITE_SCRIPT = CLIENTS / "lite_consume.py"
CONSUME_SCRIPT = CLIENTS / "consume.py"
CLIENT_TIMEOUT_S = 120
WAIT_S = 40  # a background Client's default wait for a line


def run_client(
    home: Path, endpoint: str, messages: list[dict], topics: tuple[str, ...] = (), **options: object
) -> tuple[list[dict], dict]:
    """(one result per message, the settings the producer applied); ``options``: more job
    fields (ak, sk, checker ...; clients/send.py)."""
    job = json.dumps({"endpoint": endpoint, "topics": list(topics), "messages": messages, **options})
    # HOME: the client writes its log under ~/logs/rocketmq_python.
    env = dict(os.environ, HOME=str(home), PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, str(SEND_SCRIPT), job], capture_output=True, text=True, env=env, timeout=CLIENT_TIMEOUT_S
    )
    assert done.returncode == 0, f"client failed:\n{done.stdout}\n{done.stderr}"
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return lines[:-1], lines[-1]["settings"]


def consume(home: Path, endpoint: str, client_timeout_s: float = CLIENT_TIMEOUT_S, **job) -> list[dict]:
    env = dict(os.environ, HOME=str(home), PYTHONUNBUFFERED="1")
    done = subprocess.run(
        [sys.executable, str(CONSUME_SCRIPT), json.dumps({"endpoint": endpoint, **job})],
        capture_output=True,
        text=True,
        env=env,
        timeout=client_timeout_s,
    )
    assert done.returncode == 0, f"consumer failed:\n{done.stdout}\n{done.stderr}"
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines and lines[-1] == {"done": True}, lines
    errors = [line for line in lines if "receive_error" in line]
    assert not errors, errors
    return lines[:-1]


def produce(home: Path, endpoint: str, topic: str, messages: list[dict]) -> list[dict]:
    results, _ = run_client(home, endpoint, [{"topic": topic, **m} for m in messages], topics=(topic,))
    assert all(r["ok"] for r in results), results
    return results


class Client:
    """send.py (or another client script) in the background: its JSON lines arrive on a queue."""

    def __init__(self, home: Path, job: dict, script: Path = SEND_SCRIPT) -> None:
        env = dict(os.environ, HOME=str(home), PYTHONUNBUFFERED="1")
        self.popen = subprocess.Popen(
            [sys.executable, str(script), json.dumps(job)],
            stdin=subprocess.PIPE if script == LITE_SCRIPT else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: queue.Queue[dict | None] = queue.Queue()
        self.seen: list[dict] = []
        self._stderr: list[str] = []
        self._pumps = [
            threading.Thread(target=self._pump, daemon=True),
            threading.Thread(target=lambda: self._stderr.extend(self.popen.stderr), daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    def _pump(self) -> None:
        for line in self.popen.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))
        self.lines.put(None)

    def next_line(self, key: str, timeout_s: float = WAIT_S) -> dict:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=max(0.01, end - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if key in line:
                return line
        raise AssertionError(f"no {key!r} line from the client; seen {self.seen}; stderr:\n{self.stderr()}")

    def stderr(self) -> str:
        return "".join(self._stderr[-50:])

    def stop(self) -> None:
        if self.popen.stdin is not None:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
        for pump in self._pumps:
            pump.join(10)
        self.popen.stdout.close()
        self.popen.stderr.close()


class LiteConsumer(Client):
    """clients/lite_consume.py: a LiteSimpleConsumer or LitePushConsumer run by commands."""

    def __init__(self, home: Path, endpoint: str, group: str, topic: str, mode: str = "simple", **job: object) -> None:
        super().__init__(home, {"endpoint": endpoint, "group": group, "topic": topic, "mode": mode, **job}, LITE_SCRIPT)
        self.next_line("started")

    def ask(self, timeout_s: float = WAIT_S, **command: object) -> dict:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(command) + "\n")
        self.popen.stdin.flush()
        return self.next_line("answer", timeout_s)["answer"]

    def subscribe(self, lite_topic: str) -> dict:
        return self.ask(op="subscribe", lite_topic=lite_topic)

    def receive(self, **command: object) -> list[dict]:
        answer = self.ask(op="receive", **command)
        assert "messages" in answer, answer
        return answer["messages"]

    def __enter__(self) -> LiteConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
