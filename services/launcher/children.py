"""The children of ``pyrmq up`` (services/launcher/up.py): ``Child``, one running service and
the thread that reads its ready line; ``start_waves``, the rows that may start at once;
``stop_all``, the children stopped tier by tier (``STOP_TIERS``), each tier at once."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from services.launcher.topology import ServiceSpec

log = logging.getLogger("pyrmq")

STOP_TIMEOUT_S = 30.0  # per tier of children, after the signal; then those still running are killed
# The order children stop in: each tier only once the tier before has exited, so no service loses
# what it calls while it stops (the broker's in-flight calls reach the store, txcheck's last
# commits too); the services of one tier call nothing of each other and stop at once. A row not
# named here stops first.
STOP_TIERS: tuple[tuple[str, ...], ...] = (("scheduler", "txcheck"), ("broker",), ("store",), ("etcd",))
Row = tuple[str, ServiceSpec, Callable[[], argparse.Namespace]]  # services/launcher/topology.rows


def die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when `pyrmq up` dies, even by SIGKILL (Linux)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass  # not Linux: children outlive a SIGKILL'ed parent, as before


class Child:
    """One running service: its process, and a thread reading its stdout for the ready line."""

    def __init__(
        self,
        spec: ServiceSpec,
        env: dict[str, str],
        wake: threading.Event,
        log_path: Path | None = None,
        label: str = "",
    ) -> None:
        self.spec = spec
        self.label = label or spec.name  # "store-1": a replica of the store row
        self.env = env  # its settings (PYRMQ_<SERVICE>_<KEY>), besides this process's environment
        self._args = (spec, wake, log_path, label)
        self.ready_line: str | None = None
        self.ready = threading.Event()
        self._wake = wake
        self._log = open(log_path, "a", encoding="utf-8") if log_path else None  # (closed in stop)
        self.process = subprocess.Popen(
            [sys.executable, "-m", spec.module],
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            bufsize=1,
            env={**os.environ, **env},
            preexec_fn=die_with_parent,
            # Its own process group: a terminal's Ctrl-C reaches only `up`, which forwards one
            # signal (a second SIGINT during the child's interpreter shutdown would kill it, -2).
            process_group=0,
        )
        self._reader = threading.Thread(target=self._read_stdout, name=f"{self.label}-stdout", daemon=True)
        self._reader.start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        prefix = f"pyrmq-{self.spec.name} ready"
        for line in self.process.stdout:
            if self.ready_line is None and line.startswith(prefix):
                self.ready_line = line[len(prefix) :].strip()
                self.ready.set()
                self._wake.set()
            else:
                sys.stderr.write(f"[{self.label}] {line}")
        self.process.wait()
        self._wake.set()  # EOF: the child exited (or closed stdout, which it must not do)

    def exited(self) -> bool:
        return self.process.poll() is not None

    # -- as services/launcher/supervision.py supervises it -----------------------------------------
    @property
    def pid(self) -> int:
        return self.process.pid

    def exit_code(self) -> int | None:
        return self.process.poll()

    def is_ready(self) -> bool:
        return self.ready.is_set()

    def release(self) -> None:
        """Close this side of its log file (it exited)."""
        if self._log is not None:
            self._log.close()

    def restart(self, env: dict[str, str] | None = None) -> Child:
        """The same service started again (after it exited), with ``env`` if given (the same
        settings with the ports it bound: up.py ``pinned_environment``)."""
        self.release()
        spec, wake, log_path, label = self._args
        return Child(spec, self.env if env is None else env, wake, log_path, label)

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` if the child still runs (``stopped`` waits for it)."""
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def stopped(self, deadline: float) -> int:
        """Wait for the child until ``deadline`` (time.monotonic), then kill it; its exit code."""
        try:
            return self.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.error("%s did not stop within %.0f s, killing it", self.label, STOP_TIMEOUT_S)
            self.process.kill()
            return self.process.wait()
        finally:
            if self._log is not None:
                self._log.close()


def start_waves(planned: list[Row]) -> list[list[Row]]:
    """The rows in the waves they start in: a wave's rows start at once, once every row of the
    waves before is ready. Consecutive rows of one kind that read no ready line of each other
    share a wave: a group's follower replicas (store-1, store-2: each finds its master through
    etcd), the brokers after the first (they take its bound port), the schedulers and txchecks
    (they read the stores' and brokers'). Every other row starts alone, in table order."""

    def kind(label: str, spec: ServiceSpec) -> str:
        if spec.name in ("scheduler", "txcheck"):
            return "helpers"
        follower = label.rsplit("-", 1)[-1].isdigit()  # store-1, store-b-2, broker-1
        return f"{spec.name} followers" if follower else label  # a label: alone

    waves: list[list[Row]] = []
    for row in planned:
        if waves and kind(*row[:2]) == kind(*waves[-1][-1][:2]):
            waves[-1].append(row)
        else:
            waves.append([row])
    return waves


def stop_tiers(children: list[Child]) -> list[list[Child]]:
    """``children`` in the tiers they stop in (``STOP_TIERS``; rows it does not name first)."""
    tier_of = {name: i + 1 for i, names in enumerate(STOP_TIERS) for name in names}
    tiers: list[list[Child]] = [[] for _ in range(len(STOP_TIERS) + 1)]
    for child in reversed(children):
        tiers[tier_of.get(child.spec.name, 0)].append(child)
    return [tier for tier in tiers if tier]


def stop_all(children: list[Child], signum: int) -> bool:
    """Stop the children tier by tier (``STOP_TIERS``): signal every child of a tier, then wait
    for them all with one deadline, STOP_TIMEOUT_S, killing those still running at it. True if
    every one exited 0."""
    clean = True
    for tier in stop_tiers(children):
        was_running = {child.label: not child.exited() for child in tier}
        for child in tier:
            child.send_signal(signum)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for child in tier:
            code = child.stopped(deadline)
            if code != 0:
                if was_running[child.label]:
                    log.error("%s exited with code %d", child.label, code)
                clean = False
    return clean
