"""The official Node.js client (tests/broker/clients/node: send.mjs and consume.mjs, a JSON job in,
JSON lines out) run in node subprocesses: ``run_node``, ``send``, ``produce``, ``consume``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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
