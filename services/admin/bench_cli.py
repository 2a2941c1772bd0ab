"""``pyrmq bench``: a load generator against a running broker (registered by ``client_cli.py``,
whose ``--endpoint``, ``--timeout``, ``--json`` and exit codes it shares).

    pyrmq bench [--topic T] [--group G] [--messages N] [--body-bytes B] [--in-flight K]
                [--batch M] [--consume | --no-consume] [--no-progress] [--json]

Send: N messages of B random bytes, M per SendMessage, with K requests in flight (gRPC futures
from one thread, so the client's own cost stays small). Consume (unless ``--no-consume``): K
receivers, each a loop of ReceiveMessage (32 at most) then one AckMessage for the batch, until
all N have come back. Every message of a run carries the tag ``bench-<random>`` and the
receivers filter on it, so messages an earlier run left in the topic are skipped, not counted
(and the group moves past them). A progress bar on stderr shows the rate and the time left
(not when stderr is no terminal, or with ``--no-progress``).

The summary: per phase, messages, seconds, msgs/s, MiB/s (bodies) and request latency p50/p99
(send: one SendMessage of M messages; consume: one receive + ack round). ``--json`` prints
``{"messages", "sent", "consumed", "send": {...}, "consume": {...} | null, ...}``. The defaults
(10,000 messages of 1 KiB, 8 requests in flight, 8 messages per request) take about 5 s on
two CPUs shared with the broker and the store.
"""

from __future__ import annotations

import argparse
import functools
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import grpc
from apache.rocketmq.v2 import service_pb2 as s
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from services.admin.cli import _positive, _table
from services.v2client.client import (
    BrokerCallError,
    V2Client,
    ack_request,
    build_message,
    check_entries,
    now_ms,
    receive_deadline_s,
    receive_request,
    received,
)

HELP = "a load generator: send messages with requests in flight, then consume them; prints msgs/s and latency"
BENCH_TOPIC = "BenchTopic"
BENCH_GROUP = "BenchGroup"
INVISIBLE_S = 60.0  # a consumed message is acked long before this
RECEIVE_WAIT_S = 5.0  # the broker's shortest long polling
STALL_S_MIN = 10.0  # consume gives up after this long without a message (or --timeout if longer)
MIB = 1 << 20


class BenchError(RuntimeError):
    """The run could not finish (a stalled consume); exit code 1."""


@dataclass
class Phase:
    """One phase's figures; ``latencies_s`` per request (or receive + ack round)."""

    name: str
    messages: int = 0
    seconds: float = 0.0
    latencies_s: list[float] = field(default_factory=list)

    def document(self, body_bytes: int) -> dict[str, Any]:
        rate = self.messages / self.seconds if self.seconds > 0 else 0.0
        return {
            "messages": self.messages,
            "seconds": round(self.seconds, 3),
            "msgs_per_s": round(rate, 1),
            "mib_per_s": round(rate * body_bytes / MIB, 2),
            "requests": len(self.latencies_s),
            "latency_ms": {
                "p50": _percentile_ms(self.latencies_s, 0.50),
                "p99": _percentile_ms(self.latencies_s, 0.99),
            },
        }


def _percentile_ms(latencies_s: list[float], q: float) -> float | None:
    if not latencies_s:
        return None
    ordered = sorted(latencies_s)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000, 2)


class RateColumn(ProgressColumn):
    """Messages per second (rich's TransferSpeedColumn counts bytes)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} msgs/s" if speed else "? msgs/s", style="progress.data.speed")


def bench(client: V2Client, ns: argparse.Namespace, console: Console | None, document: dict[str, Any]) -> None:
    tag = f"bench-{uuid.uuid4().hex[:8]}"
    client.route(ns.topic)  # creates the topic (auto-create on), or TOPIC_NOT_FOUND before any load
    document.update(
        topic=ns.topic,
        group=ns.group,
        tag=tag,
        messages=ns.messages,
        body_bytes=ns.body_bytes,
        in_flight=ns.in_flight,
        batch=ns.batch,
        sent=0,
        consumed=0,
        send=None,
        consume=None,
    )
    body = os.urandom(ns.body_bytes)
    stderr = Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeRemainingColumn(),
        console=stderr,
        disable=ns.no_progress or not stderr.is_terminal,
    )
    with progress:
        sent = _send_phase(client, ns, body, tag, progress)
        document.update(sent=sent.messages, send=sent.document(ns.body_bytes))
        if ns.consume:
            consumed = _consume_phase(client, ns, tag, progress)
            document.update(consumed=consumed.messages, consume=consumed.document(ns.body_bytes))
    if console is not None:
        _render(console, ns, document)


def _send_phase(client: V2Client, ns: argparse.Namespace, body: bytes, tag: str, progress: Progress) -> Phase:
    """Send ``ns.messages`` in requests of ``ns.batch``, ``ns.in_flight`` at a time."""
    phase = Phase("send")
    task = progress.add_task("send", total=ns.messages)
    slots = threading.Semaphore(ns.in_flight)
    lock = threading.Lock()
    errors: list[Exception] = []

    def done(future: grpc.Future, started: float, count: int) -> None:
        try:
            latency_s = time.perf_counter() - started
            check_entries(f"SendMessage {ns.topic}", future.result())
            with lock:
                phase.latencies_s.append(latency_s)
                phase.messages += count
            progress.advance(task, count)
        except (grpc.RpcError, BrokerCallError) as exc:
            with lock:
                errors.append(exc)
        finally:
            slots.release()

    started = time.perf_counter()
    for first in range(0, ns.messages, ns.batch):
        born_ms = now_ms()
        request = s.SendMessageRequest(
            messages=[
                build_message(ns.topic, body, tag=tag, born_timestamp_ms=born_ms)
                for _ in range(min(ns.batch, ns.messages - first))
            ]
        )
        slots.acquire()
        if errors:
            slots.release()
            break
        future = client.stub.SendMessage.future(request, metadata=client.metadata, timeout=client.timeout_s)
        future.add_done_callback(functools.partial(done, started=time.perf_counter(), count=len(request.messages)))
    for _ in range(ns.in_flight):  # every request answered
        slots.acquire()
    phase.seconds = time.perf_counter() - started
    if errors:
        raise errors[0]
    return phase


def _consume_phase(client: V2Client, ns: argparse.Namespace, tag: str, progress: Progress) -> Phase:
    """``ns.in_flight`` receive + ack loops until every message of this run came back."""
    phase = Phase("consume")
    task = progress.add_task("consume", total=ns.messages)
    lock = threading.Lock()
    stop = threading.Event()
    seen: set[str] = set()
    calls: set[Any] = set()
    errors: list[Exception] = []
    stall_s = max(STALL_S_MIN, ns.timeout)
    last_progress = [time.perf_counter()]
    started_at = [time.perf_counter()]

    def finish(error: Exception | None = None) -> None:
        with lock:
            if error is not None and not stop.is_set():
                errors.append(error)
            stop.set()
            for call in calls:
                call.cancel()  # parked receives: nothing more of ours is coming

    def receiver() -> None:
        request = receive_request(ns.group, ns.topic, tag, invisible_s=INVISIBLE_S, wait_s=RECEIVE_WAIT_S)
        deadline_s = receive_deadline_s(request, client.timeout_s)
        while not stop.is_set():
            started = time.perf_counter()
            with lock:
                if stop.is_set():
                    return
                call = client.stub.ReceiveMessage(request, metadata=client.metadata, timeout=deadline_s)
                calls.add(call)
            try:
                messages = received(f"ReceiveMessage {ns.group} {ns.topic}", call)
                if messages:
                    check_entries(
                        f"AckMessage {ns.group} {ns.topic}",
                        client.stub.AckMessage(
                            ack_request(ns.group, ns.topic, messages),
                            metadata=client.metadata,
                            timeout=client.timeout_s,
                        ),
                    )
            except (grpc.RpcError, BrokerCallError) as exc:
                if not stop.is_set():
                    finish(exc)
                return
            finally:
                with lock:
                    calls.discard(call)
            now = time.perf_counter()
            with lock:
                new = {m.system_properties.message_id for m in messages} - seen
                seen.update(new)
                phase.messages = len(seen)
                if messages:
                    phase.latencies_s.append(now - started)
                if new:
                    last_progress[0] = now
                stalled = now - last_progress[0] > stall_s
            progress.advance(task, len(new))
            if phase.messages >= ns.messages:
                phase.seconds = now - started_at[0]
                finish()
            elif stalled:
                finish(
                    BenchError(
                        f"consume stalled: {phase.messages} of {ns.messages} messages came back, "
                        f"none in the last {stall_s:g} s"
                    )
                )

    threads = [threading.Thread(target=receiver, name=f"bench-receiver-{i}", daemon=True) for i in range(ns.in_flight)]
    started_at[0] = last_progress[0] = time.perf_counter()
    for thread in threads:
        thread.start()
    try:
        stop.wait()
    finally:
        finish()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    return phase


def _render(console: Console, ns: argparse.Namespace, document: dict[str, Any]) -> None:
    table = _table("PHASE", "MESSAGES", "SECONDS", "MSGS/S", "MIB/S", "P50 MS", "P99 MS")
    for column in table.columns[1:]:
        column.justify = "right"
    for name in ("send", "consume"):
        phase = document[name]
        if phase is None:
            continue
        latency = phase["latency_ms"]
        table.add_row(
            name,
            f"{phase['messages']:,}",
            f"{phase['seconds']:.2f}",
            f"{phase['msgs_per_s']:,.0f}",
            f"{phase['mib_per_s']:.2f}",
            _ms_text(latency["p50"]),
            _ms_text(latency["p99"]),
        )
    console.print(table)
    console.print(
        f"{ns.messages:,} messages of {ns.body_bytes:,} bytes to {ns.topic}, {ns.in_flight} requests in "
        f"flight, {ns.batch} message{'s' if ns.batch != 1 else ''} per SendMessage"
        + (f"; consumed as {ns.group} (tag {document['tag']})." if ns.consume else "; not consumed.")
    )
    console.print("Latency: send per SendMessage request, consume per receive + ack round.")


def _ms_text(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.2f}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topic", default=BENCH_TOPIC, help="the topic to load (default %(default)s)")
    parser.add_argument("--group", default=BENCH_GROUP, help="the consumer group (default %(default)s)")
    parser.add_argument(
        "--messages", type=_positive, default=10_000, metavar="N", help="messages to send (default %(default)s)"
    )
    parser.add_argument(
        "--body-bytes", type=_positive, default=1024, metavar="B", help="body size (default %(default)s)"
    )
    parser.add_argument(
        "--in-flight",
        type=_positive,
        default=8,
        metavar="K",
        help="requests in flight, and receivers (default %(default)s)",
    )
    parser.add_argument(
        "--batch", type=_positive, default=8, metavar="M", help="messages per SendMessage (default %(default)s)"
    )
    parser.add_argument(
        "--consume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="receive and ack the messages after sending them (default: yes)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
