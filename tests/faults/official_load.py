"""Part of the chaos load through the official rocketmq-python-client, recorded into a History
like tests/faults/workload.py's threads (the client runs in subprocesses: its apache.rocketmq.v2
stubs clash with ours; tests/support/official_client.py's ``Client`` reads their JSON lines):

* ``OfficialProducer``: tests/faults/official_producer.py sends NORMAL messages one at a time
  as writer ``writer`` until a stop file appears. A send is invoked when its ``invoke`` line
  arrives (the script prints it just before sending) and completed when its ``done`` line does.
  **Every failed send is ``info``**: the client retries a send itself (3 attempts by default),
  so its last error says nothing of the attempts before it, one of which may have been stored.
* ``OfficialConsumer``: tests/broker/clients/consume.py, a SimpleConsumer receiving and acking
  in the workload's consumer group. Its lines name no queue or offset (recorded as -1: the
  offset checks skip them); a delivery whose ack failed is recorded as maybe acked
  (``consumer_ack_unknown``: the line does not tell a refusal from a lost answer). It is killed
  at the end: what it held unacked comes back to the other consumers after its invisible time.
"""

from __future__ import annotations

import logging
import queue
import subprocess
import threading
import time
from pathlib import Path

from tests.faults.checker import INFO, OK, Delivery, History, Send
from tests.support.official_client import CONSUME_SCRIPT, Client

log = logging.getLogger(__name__)

PRODUCER_SCRIPT = Path(__file__).resolve().parent / "official_producer.py"
STOP_WAIT_S = 30.0  # a send in its client's retries when told to stop: 3 attempts of 5 s, and backoff


class OfficialProducer:
    def __init__(self, home: Path, endpoint: str, topic: str, writer: str, history: History) -> None:
        self.history = history
        self.topic = topic
        self.writer = writer
        self.stop_file = home / f"{writer}.stop"
        home.mkdir(parents=True, exist_ok=True)
        job = {
            "endpoint": endpoint,
            "topic": topic,
            "writer": writer,
            "seed": history.seed,
            "stop_file": str(self.stop_file),
        }
        self.client = Client(home, job, PRODUCER_SCRIPT)
        self.errors: list[str] = []
        self._pending: dict[str, Send] = {}
        self._thread = threading.Thread(target=self._pump, name=f"official-{writer}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            line = self.client.lines.get()
            if line is None:
                return
            if "invoke" in line:
                key = line["invoke"]
                counter = int(key.rsplit("-", 1)[1])
                self._pending[key] = self.history.invoke(self.writer, counter, self.topic, line["body"].encode())
            elif "done" in line:
                send = self._pending.pop(line["done"])
                if line["ok"]:
                    self.history.complete(send, OK, message_id=line["message_id"])
                else:
                    self.history.complete(send, INFO, f"official {line['error'][:80]}")

    def stop_sending(self) -> None:
        """Asks the script to stop after its current send, waits, and kills it if it does not."""
        self.stop_file.touch()
        try:
            self.client.popen.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:  # killed by stop() below
            self.errors.append(f"{self.writer}: did not stop within {STOP_WAIT_S} s; stderr {self.client.stderr()}")
        self.client.stop()
        self._thread.join(5)
        if self.client.popen.returncode not in (0, None, -9):
            self.errors.append(f"{self.writer} exited {self.client.popen.returncode}: {self.client.stderr()}")


class OfficialConsumer:
    def __init__(self, home: Path, endpoint: str, topic: str, group: str, history: History, name: str = "oc0") -> None:
        self.history = history
        self.topic = topic
        self.name = name
        self.receive_errors = 0
        home.mkdir(parents=True, exist_ok=True)
        job = {
            "endpoint": endpoint,
            "mode": "simple",
            "group": group,
            "topic": topic,
            "count": 1 << 40,
            "deadline_s": 1 << 20,  # stopped by stop()
            "await_s": 5,
            "invisible_s": 10,
            "max_messages": 16,
            "action": "ack",
        }
        self.client = Client(home, job, CONSUME_SCRIPT)
        self._thread = threading.Thread(target=self._pump, name=f"official-{name}", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            try:
                line = self.client.lines.get(timeout=1.0)
            except queue.Empty:
                continue
            if line is None:
                return
            if "receive_error" in line:
                self.receive_errors += 1
                continue
            if "message_id" not in line:
                continue
            message_id = line["message_id"]
            self.history.deliver(
                Delivery(
                    message_id,
                    self.topic,
                    -1,
                    -1,
                    line["body"].encode(),
                    line.get("message_group"),
                    line.get("attempt") or 1,
                    t=time.monotonic(),
                )
            )
            if line.get("acked"):
                self.history.consumer_acked([message_id])
            elif line.get("acked") is False:
                self.history.consumer_ack_unknown([message_id])

    def stop(self) -> None:
        self.client.stop()
        self._thread.join(5)
