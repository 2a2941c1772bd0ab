"""``pyrmq up`` once its cluster is up: the supervisor (services/launcher/supervision.py) over
the real children, until SIGINT/SIGTERM or a child given up on (``supervise``).

A child is started again as it was first started, with the same settings, except that a port it
was given as 0 (any free one) is the port it bound, read from its last ready line
(``pinned_environment``): a restarted store is at the address the broker and the helpers were
given, a restarted broker on the client port clients know. Its new ready line replaces the old
one in ``ns.ready``. Every change of state rewrites the state file (DATA_DIR/up-state.json,
services/launcher/supervisor_report.py), which ``pyrmq status`` reads; ``--up-metrics-port`` serves
the ``pyrmq_up_child_*`` metrics.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from pathlib import Path
from urllib.parse import urlsplit

from services.launcher.children import Child, stop_all
from services.launcher.supervision import RestartPolicy, Supervisor
from services.launcher.supervisor_report import supervisor_registry, write_state
from services.launcher.topology import SUPERVISOR_STATE_FILE
from services.runtime.clock import SystemClock
from services.runtime.metrics import MetricsHttpServer
from services.runtime.settings import env_name

log = logging.getLogger("pyrmq")

# A setting given as 0 (any free port) -> the ready-line key that says which port was bound.
PINNED_PORTS = (("port", "grpc"), ("metrics_port", "metrics"), ("remoting_port", "remoting"))


def ready_fields(ready_line: str) -> dict[str, str]:
    """A ready line's ``key=value`` pairs."""
    return dict(item.split("=", 1) for item in ready_line.split() if "=" in item)


def bound_port(value: str) -> int | None:
    """The port of ``HOST:PORT`` or of a URL (``http://HOST:PORT/metrics``); None if none."""
    try:
        port = urlsplit(value if "//" in value else f"//{value}").port
    except ValueError:
        return None
    return port or None


def pinned_environment(service: str, env: dict[str, str], ready: dict[str, str]) -> dict[str, str]:
    """``env`` with each port setting that was 0 replaced by the port the service bound (its
    ready line ``ready``), so the service comes back where the others know it."""
    pinned = dict(env)
    for setting, key in PINNED_PORTS:
        name = env_name(service, setting)
        if pinned.get(name) == "0" and (port := bound_port(ready.get(key, ""))) is not None:
            pinned[name] = str(port)
    return pinned


def restart_policy(ns: argparse.Namespace, ready_timeout_s: float) -> RestartPolicy:
    return RestartPolicy(restarts_max=ns.restart_limit, ready_timeout_s=ready_timeout_s)


class UpSupervisor:
    """The supervisor over ``up``'s children, its state file and its metrics endpoint."""

    def __init__(
        self, ns: argparse.Namespace, children: list[Child], wake: threading.Event, ready_timeout_s: float
    ) -> None:
        """Serves the metrics at once (``ns.up_metrics_port`` >= 0; OSError if it cannot bind)."""
        self._ns = ns
        self._wake = wake
        self._by_label = {child.label: child for child in children}
        self.state_path = Path(ns.data_dir) / SUPERVISOR_STATE_FILE
        self.supervisor = Supervisor(
            dict(self._by_label), self._start, SystemClock(), restart_policy(ns, ready_timeout_s), self._on_change
        )
        self.metrics: MetricsHttpServer | None = None
        if ns.up_metrics_port >= 0:
            self.metrics = MetricsHttpServer(
                supervisor_registry(self.supervisor.stats), ns.up_metrics_port, ns.metrics_host
            )
            log.info("pyrmq up's metrics: %s", self.metrics.url)

    @property
    def metrics_url(self) -> str:
        return self.metrics.url if self.metrics is not None else ""

    def _start(self, label: str) -> Child:
        old = self.supervisor.child(label)
        return old.restart(pinned_environment(old.spec.name, old.env, self._ns.ready.get(label, {})))

    def _on_change(self) -> None:
        for label, child in self._by_label.items():
            current = self.supervisor.child(label)
            if current is not child and current.is_ready() and current.ready_line is not None:
                self._ns.ready[label] = ready_fields(current.ready_line)  # re-read: its new line's keys
                self._by_label[label] = current
        try:
            write_state(self.state_path, self.supervisor.stats(), os.getpid(), self.metrics_url)
        except OSError as exc:
            log.warning("cannot write %s: %s", self.state_path, exc)

    def run(self, received: list[int], poll_interval_s: float) -> int:
        """Restart children that exit until a signal (forwarded: 0 once every child stopped
        cleanly) or a child given up on (every child stopped, 1)."""
        supervisor = self.supervisor
        self._on_change()
        try:
            while not received:
                self._wake.wait(poll_interval_s)
                self._wake.clear()
                if received:
                    break
                reason = supervisor.run_once()
                if reason is not None:
                    log.error("%s; stopping every service", reason)
                    stop_all(supervisor.running(), signal.SIGTERM)
                    return 1
            clean = stop_all(supervisor.running(), received[0])
            log.info("all services stopped")
            return 0 if clean else 1
        finally:
            self.close()

    def close(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None
        self.state_path.unlink(missing_ok=True)
