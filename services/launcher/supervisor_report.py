"""What ``pyrmq up``'s supervisor (services/launcher/supervision.py) shows the world: a state file
``pyrmq status`` reads, and optional Prometheus metrics.

The state file, ``DATA_DIR/up-state.json`` (``SUPERVISOR_STATE_FILE``, named in
services/launcher/topology.py, where ``pyrmq status`` finds it), is rewritten whole (a temporary
file renamed over it) whenever a child changes state, and removed when ``up`` exits::

    {"up_pid": 4242, "metrics": "http://127.0.0.1:9106/metrics" or "",
     "children": [{"child": "store-b", "pid": 4250, "state": "running", "restarts": 1,
                   "last_exit_code": -9, "last_restart_ms": 1700000000000}, ...]}

Metrics (``up --up-metrics-port``; none by default), read from ``Supervisor.stats()`` at scrape:

| metric | kind | meaning |
|---|---|---|
| ``pyrmq_up_child_restarts_total{child}`` | counter | restarts of the child since ``up`` started |
| ``pyrmq_up_child_state{child, state}`` | gauge | 1 for the child's state (running, restarting, given-up), 0 for the others |
| ``pyrmq_up_child_last_exit_code{child}`` | gauge | the code of its last unexpected exit (-9: SIGKILL); absent if it never exited |
| ``pyrmq_up_child_last_restart_timestamp_seconds{child}`` | gauge | when it was last restarted; absent if never |
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from services.launcher.supervision import ChildState, ChildStats


def state_document(stats: list[ChildStats], up_pid: int, metrics_url: str) -> dict[str, object]:
    children = [{**asdict(child), "state": child.state.value} for child in stats]
    return {"up_pid": up_pid, "metrics": metrics_url, "children": children}


def write_state(path: Path, stats: list[ChildStats], up_pid: int, metrics_url: str = "") -> None:
    """The state file, replaced whole (a reader never sees half of it)."""
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(state_document(stats, up_pid, metrics_url), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


class SupervisorCollector(Collector):
    """The ``pyrmq_up_child_*`` families, from ``stats`` at each scrape."""

    def __init__(self, stats: Callable[[], list[ChildStats]]) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        stats = self._stats()
        restarts = CounterMetricFamily(
            "pyrmq_up_child_restarts", "Restarts of a child of pyrmq up since it started.", labels=["child"]
        )
        state = GaugeMetricFamily(
            "pyrmq_up_child_state", "1 for the state a child of pyrmq up is in.", labels=["child", "state"]
        )
        exit_code = GaugeMetricFamily(
            "pyrmq_up_child_last_exit_code", "The code of a child's last unexpected exit.", labels=["child"]
        )
        restarted = GaugeMetricFamily(
            "pyrmq_up_child_last_restart_timestamp_seconds", "When a child was last restarted.", labels=["child"]
        )
        for child in stats:
            restarts.add_metric([child.child], child.restarts)
            for kind in ChildState:
                state.add_metric([child.child, kind.value], 1.0 if child.state is kind else 0.0)
            if child.last_exit_code is not None:
                exit_code.add_metric([child.child], child.last_exit_code)
            if child.last_restart_ms is not None:
                restarted.add_metric([child.child], child.last_restart_ms / 1000)
        return [restarts, state, exit_code, restarted]


def supervisor_registry(stats: Callable[[], list[ChildStats]]) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SupervisorCollector(stats))
    return registry
