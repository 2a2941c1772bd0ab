"""The remoting test peers, real RocketMQ remoting clients run as subprocesses by pyrmq's tests:

- ``"ali-ons"``: npm ali-ons 3.12.0 (pure JavaScript), driven by tests/remoting/peers/ali_ons_peer.js;
- ``"cpp"``: PyPI rocketmq-client-python 0.5.0rc2 (ctypes over rocketmq-client-cpp's librocketmq.so),
  driven by tests/remoting/peers/cpp_peer.py under .venv-rocketmq-cpp/bin/python.

`make setup` installs both; ``require_peer`` skips a test without its peer, or fails it under
PYRMQ_REQUIRE_COMPONENTS=1 (tests/support/components.py). ``start_peer`` runs a driver with one
command and returns a ``PeerProcess``: its JSON event lines as they come, waits on them, and stop.

Command (a dict, given to the driver as JSON; camelCase as the clients name things):

| key | roles | meaning |
|---|---|---|
| role | all | "producer", "push-consumer", "transaction-producer" (cpp only) |
| nameSrv | all | "host:port" of the name server (pyrmq's remoting port) |
| topic, group | all | the topic (each message may name another) and the producer or consumer group |
| messages | producers | [{body, bodyB64, tag, keys: [..], props: {k: v}, delayLevel, shardingKey, oneway (cpp), deliverTimeMs (ali-ons)}] |
| orderly | producer, push-consumer (cpp) | cpp: send each message by sharding key (its shardingKey, else its first key, else its index) / consume orderly |
| shardingKey | messages | cpp: the queue is chosen by the key's hash (no property is sent); ali-ons: by its md5, and it sends the property __SHARDING_KEY |
| linger | producer | stay up after the sends (until SIGTERM or stdin's end) |
| timeoutMs, retries | producers | send timeout (3000); retries (ali-ons: retryTimesWhenSendFailed, 2) |
| localAnswer, checkAnswer | transaction-producer | the local transaction's answer ("UNKNOWN"), then every check's ("COMMIT"): COMMIT, ROLLBACK, UNKNOWN |
| model | push-consumer | "CLUSTERING" (default) or "BROADCASTING" |
| subExpression | push-consumer | tag expression ("*", "TagA || TagB") |
| count | push-consumer | after this many successful consumptions: a done event, and exit; 0: run until stopped |
| failFirst | push-consumer | each message is answered RETRY while its reconsumeTimes < failFirst, then SUCCESS |
| consumeFromWhere | push-consumer (ali-ons) | default CONSUME_FROM_FIRST_OFFSET; the cpp binding has no such setting (LAST_OFFSET) |
| maxReconsumeTimes, suspendMs, rebalanceMs | push-consumer (ali-ons) | 16, 15000 (brokerSuspendMaxTimeMillis), 10000 |
| readProps, threads | push-consumer (cpp) | more property names to read from each message (the binding cannot list them); consume threads |

What each client puts on the wire of its own (tests/remoting/golden has samples): ali-ons sends an
untagged message with the property TAGS=null (the string), extFields values as JSON numbers and
booleans, SEND_MESSAGE_V2 only, and a producer's first HEART_BEAT only after 30 s; cpp sends
SEND_MESSAGE (10) only, extFields AccessKey "", OnsChannel and Signature even without credentials,
a header ending in a newline, and never sets the oneway flag bit (oneway sends and END_TRANSACTION
carry flag 0 and wait for no answer).

Events (one JSON object per line, each with "event"):

| event | fields |
|---|---|
| started | peer, role, pid: the client started (a producer has sent nothing yet) |
| sent | index (into messages), msgId, offsetMsgId, queueId, queueOffset, status (ali-ons SEND_OK ..., cpp OK ...), broker; cpp: offsetMsgId, queueId and broker are null (its SendResult lacks them), oneway sends only {index, oneway}; ali-ons: msgId is the broker's (it sets no UNIQ_KEY), offsetMsgId the same; transaction-producer: localAnswer |
| send-error | index, error, name, code (ali-ons: the response code) |
| received | msgId, topic, tags, keys [..], body (UTF-8), bodyB64, properties {..}, reconsumeTimes, queueId, queueOffset, broker (null for cpp), result (SUCCESS or RETRY); ali-ons: storeHost; cpp: commitLogOffset, and body is cut at a NUL byte |
| check | a transaction check the broker asked (cpp): the message's fields as in received, and answer |
| error | error, name, code, where: what the client reported |
| done | the producer sent every message, or the consumer consumed count |
| closed | reason, clean: the driver is about to exit |
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support import components
from tests.support.waits import wait_until

PEERS_DIR = components.REMOTING_PEERS_DIR
ALI_ONS_DRIVER = PEERS_DIR / "ali_ons_peer.js"
CPP_DRIVER = PEERS_DIR / "cpp_peer.py"
COMPONENT = {"ali-ons": "ali-ons", "cpp": "rocketmq-client-cpp"}
LANGUAGE = {"ali-ons": "JAVA", "cpp": "CPP"}  # what each puts in its headers' language
CLIENT = {
    "ali-ons": f"npm ali-ons {components.ALI_ONS_VERSION}",
    "cpp": f"PyPI rocketmq-client-python {components.CPP_PEER_VERSION} (rocketmq-client-cpp)",
}
STOP_TIMEOUT_S = 10.0


def require_peer(peer: str) -> None:
    """Skip the test (fail it under PYRMQ_REQUIRE_COMPONENTS=1) unless ``peer`` is installed."""
    components.require(COMPONENT[peer])


def peer_missing(peer: str) -> str | None:
    return components.missing(COMPONENT[peer])


def driver_argv(peer: str) -> list[str]:
    if peer == "ali-ons":
        return [shutil.which("node") or "node", str(ALI_ONS_DRIVER)]
    if peer == "cpp":
        return [str(components.CPP_PEER_PYTHON), str(CPP_DRIVER)]
    raise ValueError(f"unknown peer {peer!r} (ali-ons, cpp)")


class PeerProcess:
    """A driver running one command. ``events`` is every event line so far; ``wait_event`` and
    ``wait_events`` wait for them; ``stop`` ends it (stdin closed and SIGTERM, then SIGKILL)."""

    def __init__(self, peer: str, command: dict[str, Any], home: Path) -> None:
        """``home``: the driver's HOME (the C++ client writes its logs under ~/logs)."""
        self.peer = peer
        self.command = command
        home.mkdir(parents=True, exist_ok=True)
        self.popen = subprocess.Popen(
            [*driver_argv(peer), json.dumps(command)],
            cwd=PEERS_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, HOME=str(home)),
        )
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._other: list[str] = []  # stdout lines that are not JSON (there should be none)
        self._stderr: list[str] = []
        self._stdout_closed = threading.Event()
        self._pumps = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    def _pump_stdout(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            with self._lock:
                if isinstance(event, dict):
                    self._events.append(event)
                else:
                    self._other.append(line)
        self._stdout_closed.set()

    def _pump_stderr(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            with self._lock:
                self._stderr.append(line)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self._events if name is None or e.get("event") == name]

    def stderr(self, lines: int = 40) -> str:
        with self._lock:
            return "".join(self._stderr[-lines:])

    def describe(self) -> str:
        return f"{self.peer} {self.command.get('role')} (exit {self.popen.poll()}): events {self.events()}; stderr:\n{self.stderr()}"

    def wait_events(
        self,
        name: str,
        count: int = 1,
        timeout_s: float = 20.0,
        where: Callable[[dict[str, Any]], bool] = lambda _: True,
    ) -> list[dict[str, Any]]:
        """The first ``count`` events named ``name`` for which ``where`` holds; AssertionError
        (with the events so far and stderr) if they do not come within ``timeout_s`` or the
        driver exits first."""

        def found() -> list[dict[str, Any]] | None:
            matching = [e for e in self.events(name) if where(e)]
            if len(matching) >= count:
                return matching[:count]
            # exited (and stdout drained) without them: say so now, not at the deadline
            return [] if self._stdout_closed.is_set() else None

        result = wait_until(
            found,
            timeout_s,
            what=f"{count} {name!r} event(s) from {self.peer}",
            describe=self.describe,
            accept=lambda value: value is not None,
        )
        assert result, f"{self.peer} exited before {count} {name!r} event(s): {self.describe()}"
        return result

    def wait_event(self, name: str, timeout_s: float = 20.0) -> dict[str, Any]:
        return self.wait_events(name, 1, timeout_s)[0]

    def wait_exit(self, timeout_s: float = 20.0) -> int:
        """The exit code, once the driver exits by itself (a producer after done, a consumer after
        count)."""
        try:
            code = self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.peer} still running after {timeout_s:g} s: {self.describe()}") from None
        self._join()
        return code

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Close stdin and send SIGTERM (the driver shuts its client down and exits 0); SIGKILL
        if it is still running after ``timeout_s``. Returns the exit code (-9 when killed)."""
        if self.popen.poll() is None:
            try:
                assert self.popen.stdin is not None
                self.popen.stdin.close()
            except OSError:  # it exited meanwhile: its pipe is gone
                pass
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._join()
        return self.popen.returncode

    def _join(self) -> None:
        for pump in self._pumps:
            pump.join(5)
        for stream in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if stream is not None and not stream.closed:
                stream.close()

    def __enter__(self) -> PeerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_peer(
    peer: str, command: dict[str, Any], home: Path, wait_started: bool = True, timeout_s: float = 20.0
) -> PeerProcess:
    """Start ``peer``'s driver on ``command`` (``require_peer`` first), by default waiting for its
    ``started`` event (stopping it and failing if that does not come)."""
    require_peer(peer)
    process = PeerProcess(peer, command, home)
    if wait_started:
        try:
            process.wait_event("started", timeout_s)
        except BaseException:
            process.stop()
            raise
    return process
