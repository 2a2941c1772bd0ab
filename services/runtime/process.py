"""What every pyrmq service process shares: logging set-up, stop signals, address formatting,
CPU affinity, garbage-collector tuning.

Used by ``service_main.run_service``, which every service's ``__main__`` calls.
"""

from __future__ import annotations

import datetime
import gc
import json
import logging
import os
import signal
import socket
import sys
import threading

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
SIGNAL_POLL_INTERVAL_S = 0.2
_IDLE = threading.Event()  # never set: an interruptible sleep


LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class JsonFormatter(logging.Formatter):
    """One JSON object per line (for Loki, Elasticsearch, ``docker logs | jq``): ts (ISO-8601,
    UTC, ms), level, logger, message, service, and exc (the traceback) when there is one."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        out = {
            "ts": ts.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "service": self.service,
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


def configure_logging(service: str = "pyrmq", level: str = "INFO", log_format: str = "text") -> None:
    """One line per event on stderr (stdout carries only the ready line): ``text`` for people,
    ``json`` for log collectors. Called once at start (defaults) and again with the service's
    settings once they are read."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"log_format must be one of {LOG_FORMATS}, got {log_format!r}")
    if level.upper() not in LOG_LEVELS:
        raise ValueError(f"log_level must be one of {LOG_LEVELS}, got {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service) if log_format == "json" else logging.Formatter(LOG_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def parse_cpu_list(text: str) -> frozenset[int]:
    """CPUs in ``taskset -c`` list form (``"0"``, ``"0,2"``, ``"0-3,6"``); empty text: none.
    Raises ValueError for anything else."""
    cpus: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, dash, last = part.partition("-")
        try:
            low, high = int(first), int(last) if dash else int(first)
        except ValueError:
            raise ValueError(f"bad CPU list {text!r}: {part!r} is not a CPU number or range") from None
        if low < 0 or high < low:
            raise ValueError(f"bad CPU list {text!r}: {part!r} is not a CPU number or range")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def apply_cpu_affinity(text: str) -> frozenset[int] | None:
    """Pin this process to the CPUs of ``text``: every thread it has (a library may start some
    on import: numpy's OpenBLAS workers) and those it starts after; empty text leaves the
    operating system's choice. A Python service runs its Python code one thread at a
    time (the GIL): on one core its threads hand the GIL over without waking another core, which
    measured 1.5-2x faster under many concurrent puts here. Returns the CPUs set, or None."""
    cpus = parse_cpu_list(text)
    if not cpus:
        return None
    available = os.sched_getaffinity(0)
    if not cpus <= available:
        raise ValueError(
            f"cpu_affinity {text!r} names CPUs this process may not use (it may use "
            f"{','.join(map(str, sorted(available)))})"
        )
    os.sched_setaffinity(0, cpus)
    for task in os.listdir("/proc/self/task"):  # a thread id is a pid to sched_setaffinity (Linux)
        try:
            os.sched_setaffinity(int(task), cpus)
        except ProcessLookupError:
            pass  # the thread has ended
    return cpus


def free_ports(count: int, with_successor: bool = False, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports the kernel gives out on ``host`` now (all held until the last is
    found, so none repeats; with ``with_successor``, each one's successor is free too, as etcd's
    peer port beside its client port). Closed again on return: another process could take one
    before its user binds it, which then fails its start loudly."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            probe = socket.socket()
            held.append(probe)
            probe.bind((host, 0))
            port = probe.getsockname()[1]
            if with_successor:
                successor = socket.socket()
                held.append(successor)
                try:
                    successor.bind((host, port + 1))
                except OSError:
                    continue
            ports.append(port)
        return ports
    finally:
        for sock in held:
            sock.close()


def format_address(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class StopSignals:
    """Records SIGTERM and SIGINT. The handler only appends to a list: taking a lock inside a
    signal handler (Event.set, logging) can deadlock the main thread it interrupted, so the main
    thread polls instead (``wait``)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.received.append(signum)

    def __bool__(self) -> bool:
        return bool(self.received)

    def sleep(self, seconds: float) -> None:
        """Sleep ``seconds`` (not cut short by a signal: callers check ``bool(self)`` after)."""
        _IDLE.wait(seconds)

    def wait(self) -> str:
        """Block until a stop signal arrives; returns its name."""
        while not self.received:
            _IDLE.wait(SIGNAL_POLL_INTERVAL_S)
        return signal.Signals(self.received[0]).name


GC_GEN1_THRESHOLD = 20  # young collections per middle one (Python: 10)
GC_GEN2_THRESHOLD = 100  # middle collections per full one (Python: 10)


def tune_gc(gen0_threshold: int) -> bool:
    """Freeze what start-up allocated (never scanned again) and run the cyclic collector less
    often: the young generation every ``gen0_threshold`` net allocations (Python: 700), then
    ``GC_GEN1_THRESHOLD`` and ``GC_GEN2_THRESHOLD``. The hot paths (records, tuples, bytes,
    protobuf messages) make no reference cycles, so reference counting frees them and the
    collector only costs time: with Python's thresholds it was ~20 % of the store's in-process
    put and dispatch (bench/RESULTS.md, 2026-11-26). ``gen0_threshold`` <= 0 keeps Python's
    defaults. Returns whether it changed anything. Call once the service has started.

    Not for a gRPC server with a per-connection stream cap: a call that ends through an
    exception path is freed only by a collection (a cycle through its traceback's frames) and
    holds its HTTP/2 stream until then (the broker keeps Python's defaults for this reason)."""
    if gen0_threshold <= 0:
        return False
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0_threshold, GC_GEN1_THRESHOLD, GC_GEN2_THRESHOLD)
    return True
