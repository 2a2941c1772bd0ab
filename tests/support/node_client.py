"""The official Node.js client (tests/broker/clients/node: send.mjs and consume.mjs, a JSON job in,
JSON lines out) run in node subprocesses: ``run_node``, ``send``, ``produce``, ``consume``; and
``LitePushConsumer``: lite_consume.mjs in the background, run by JSON commands on its stdin."""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parents[1] / "broker" / "clients" / "node"
NODE = shutil.which("node")
CLIENT_TIMEOUT_S = 60


def client_version() -> str:
    return json.loads((NODE_DIR / "node_modules" / "rocketmq-client-nodejs" / "package.json").read_text())["version"]


def run_node(script: str, home: Path, job: dict) -> list[dict]:
    # HOME: anything the client writes under ~ stays in the test's directory.
    env = dict(os.environ, HOME=str(home))
    try:
        done = subprocess.run(
            [NODE, str(NODE_DIR / script), json.dumps(job)],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            env=env,
            timeout=CLIENT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired as exc:
        out, err = (
            text.decode(errors="replace") if isinstance(text, bytes) else text or ""
            for text in (exc.stdout, exc.stderr)
        )
        pytest.fail(f"{script} still running after {CLIENT_TIMEOUT_S} s:\n{out}\n{err}")
    assert done.returncode == 0, f"{script} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def send(home: Path, endpoint: str, messages: list[dict], topics: tuple[str, ...] = ()) -> tuple[list[dict], dict]:
    """(one result per message, the settings the producer applied)."""
    lines = run_node("send.mjs", home, {"endpoint": endpoint, "topics": list(topics), "messages": messages})
    assert lines and "settings" in lines[-1], lines
    return lines[:-1], lines[-1]["settings"]


def produce(home: Path, endpoint: str, topic: str, messages: list[dict]) -> list[dict]:
    results, _ = send(home, endpoint, [{"topic": topic, **m} for m in messages], topics=(topic,))
    assert all(r["ok"] for r in results), results
    return results


def consume(home: Path, endpoint: str, allow_errors: bool = False, **job) -> tuple[list[dict], dict]:
    """(deliveries in the order the client saw them, other lines by kind: receive_error, settings)."""
    lines = run_node("consume.mjs", home, {"endpoint": endpoint, **job})
    assert lines and lines[-1] == {"done": True}, lines
    deliveries = [line for line in lines[:-1] if "body" in line]
    errors = [line for line in lines if "receive_error" in line]
    assert allow_errors or not errors, errors
    settings = next((line["settings"] for line in lines if "settings" in line), None)
    return deliveries, {"receive_error": errors, "settings": settings}


class LitePushConsumer:
    """lite_consume.mjs in the background: a LitePushConsumer bound to ``topic`` (a LITE parent).
    Its deliveries ({"pushed": ..., "result": ...}), the telemetry commands the client did not
    recognise and the SyncLiteSubscription requests it sent go to queues of their own
    (``pushes``, ``unrecognized``, ``syncs``), so that waiting for an answer loses none of them."""

    def __init__(self, home: Path, endpoint: str, group: str, topic: str, **job: object) -> None:
        """``job``: more job fields (fail_first, suspend_first, suspend_ms, shutdown_s ...)."""
        self._shutdown_s = float(job.get("shutdown_s", 10))  # type: ignore[arg-type]
        self.popen = subprocess.Popen(
            [
                NODE,
                str(NODE_DIR / "lite_consume.mjs"),
                json.dumps({"endpoint": endpoint, "group": group, "topic": topic, **job}),
            ],
            cwd=NODE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, HOME=str(home)),
        )
        self.lines: queue.Queue[dict | None] = queue.Queue()  # started, answer, done; None: stdout closed
        self.pushes: queue.Queue[dict] = queue.Queue()
        self.unrecognized: queue.Queue[dict] = queue.Queue()
        self.syncs: queue.Queue[dict] = queue.Queue()
        self._stderr: list[str] = []
        self._pumps = [
            threading.Thread(target=self._pump, daemon=True),
            threading.Thread(target=lambda: self._stderr.extend(self.popen.stderr), daemon=True),
        ]
        for pump in self._pumps:
            pump.start()
        try:
            self.started = self._next_line("started", CLIENT_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise

    def _pump(self) -> None:
        for text in self.popen.stdout:
            if not text.startswith("{"):
                continue
            line = json.loads(text)
            if "pushed" in line:
                self.pushes.put(line)
            elif "unrecognized_command" in line:
                self.unrecognized.put(line["unrecognized_command"])
            elif "sync" in line:
                self.syncs.put(line["sync"])
            else:
                self.lines.put(line)
        self.lines.put(None)

    def _next_line(self, key: str, timeout_s: float) -> dict:
        try:
            line = self.lines.get(timeout=timeout_s)
        except queue.Empty:
            line = None
        if line is None or key not in line:
            pytest.fail(f"lite_consume.mjs: no {key!r} line (got {line}); stderr:\n{self.stderr()}")
        return line

    def stderr(self) -> str:
        return "".join(self._stderr[-50:])

    def ask(self, timeout_s: float = 20, **command: object) -> dict:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(command) + "\n")
        self.popen.stdin.flush()
        return self._next_line("answer", timeout_s)["answer"]

    def subscribe(self, lite_topic: str, offset: dict | None = None) -> dict:
        """``offset``: {"policy": "MIN" | "MAX" | "LAST"}, {"offset": n}, {"tail_n": n} or {"timestamp": ms}."""
        return self.ask(op="subscribe", lite_topic=lite_topic, **({"offset": offset} if offset else {}))

    def topics(self) -> list[str]:
        return self.ask(op="topics")["topics"]

    def synced(self) -> list[dict]:
        """The SyncLiteSubscription requests sent since the last call, each {"action", "lite_topics",
        "offset_option"} (the answer to a command comes after its request is printed)."""
        out: list[dict] = []
        while not self.syncs.empty():
            out.append(self.syncs.get())
        return out

    def pushed(self, count: int, timeout_s: float = 20) -> list[dict]:
        """The next ``count`` deliveries, each {"pushed": {body, lite_topic, topic, attempt,
        message_id}, "result"}; fails the test if they do not all come within ``timeout_s``."""
        got: list[dict] = []
        end = time.monotonic() + timeout_s
        while len(got) < count:
            try:
                got.append(self.pushes.get(timeout=max(0.0, end - time.monotonic())))
            except queue.Empty:
                pytest.fail(f"{len(got)} of {count} deliveries in {timeout_s} s: {got}; stderr:\n{self.stderr()}")
        return got

    def pushed_within(self, seconds: float) -> list[dict]:
        """Every delivery that comes within ``seconds`` (to show that none does)."""
        got: list[dict] = []
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                got.append(self.pushes.get(timeout=left))
            except queue.Empty:
                break
        return got

    def stop(self) -> None:
        """Quit (the client shuts down: NotifyClientTermination after its in-flight long poll);
        killed if it takes longer than its shutdown_s and a margin."""
        try:
            if self.popen.poll() is None and self.popen.stdin is not None:
                self.popen.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.popen.stdin.close()
            self.popen.wait(self._shutdown_s + 5)
        except (OSError, subprocess.TimeoutExpired):
            self.popen.kill()
            self.popen.wait()
        for pump in self._pumps:
            pump.join(10)
        self.popen.stdout.close()
        self.popen.stderr.close()

    def __enter__(self) -> LitePushConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
