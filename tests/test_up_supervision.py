"""``pyrmq up``'s supervisor (services/launcher/supervision.py) without processes: fake children
and a manual clock drive ``run_once``. Backoff doubling and its reset, the restart limit per
window, a restarted child that never gets ready, the state file and the metrics
(services/launcher/supervisor_report.py), and the ports a restarted child keeps
(services/launcher/up_supervisor.py ``pinned_environment``).
tests/test_up_supervise_groups.py runs it for real."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from services.launcher.supervision import ChildState, RestartPolicy, Supervisor
from services.launcher.supervisor_report import supervisor_registry, write_state
from services.launcher.up_supervisor import bound_port, pinned_environment, ready_fields
from services.runtime.clock import ManualClock


@dataclass
class FakeChild:
    label: str
    pid: int
    code: int | None = None
    ready: bool = True
    released: bool = False

    def exit_code(self) -> int | None:
        return self.code

    def is_ready(self) -> bool:
        return self.ready

    def release(self) -> None:
        self.released = True


@dataclass
class Rig:
    """A supervisor over ``labels``, each started child recorded in ``started``."""

    labels: tuple[str, ...] = ("store", "store-b", "broker")
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    clock: ManualClock = field(default_factory=ManualClock)
    started: list[FakeChild] = field(default_factory=list)
    changes: int = 0

    def __post_init__(self) -> None:
        self.children = {label: self._new(label) for label in self.labels}
        self.supervisor = Supervisor(dict(self.children), self._restart, self.clock, self.policy, self._changed)

    def _new(self, label: str) -> FakeChild:
        child = FakeChild(label, 100 + len(self.started))
        self.started.append(child)
        return child

    def _restart(self, label: str) -> FakeChild:
        child = self._new(label)
        child.ready = False  # until it prints its ready line
        return child

    def _changed(self) -> None:
        self.changes += 1

    def current(self, label: str) -> FakeChild:
        return self.supervisor.child(label)

    def state(self, label: str) -> ChildState:
        return next(s.state for s in self.supervisor.stats() if s.child == label)

    def advance(self, seconds: float) -> str | None:
        self.clock.advance_ms(int(seconds * 1000))
        return self.supervisor.run_once()

    def kill_and_restart(self, label: str, code: int = -9) -> float:
        """Kill the child, run until it is started again and ready; the backoff it waited."""
        self.current(label).code = code
        assert self.supervisor.run_once() is None
        old = self.current(label)
        waited_ms = 0
        while self.current(label) is old:
            assert self.advance(0.1) is None
            waited_ms += 100
        self.current(label).ready = True
        assert self.supervisor.run_once() is None
        assert self.state(label) is ChildState.RUNNING
        return waited_ms / 1000


def test_a_child_that_exits_is_restarted_after_the_backoff_and_the_others_are_left_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig()
    caplog.set_level(logging.INFO, logger="pyrmq")
    assert rig.supervisor.run_once() is None and rig.changes == 0
    rig.current("store-b").code = -9
    assert rig.supervisor.run_once() is None
    assert rig.state("store-b") is ChildState.RESTARTING and rig.current("store-b").released
    assert "store-b exited unexpectedly with code -9; restarting it in 0.5 s (restart 1)" in caplog.text
    assert rig.advance(0.4) is None and len(rig.started) == 3  # still waiting
    assert rig.advance(0.1) is None and len(rig.started) == 4  # started again, not ready yet
    assert rig.state("store-b") is ChildState.RESTARTING
    rig.current("store-b").ready = True
    assert rig.supervisor.run_once() is None
    stats = {s.child: s for s in rig.supervisor.stats()}
    assert stats["store-b"].state is ChildState.RUNNING and stats["store-b"].restarts == 1
    assert stats["store-b"].last_exit_code == -9 and stats["store-b"].pid == rig.started[-1].pid
    assert stats["store-b"].last_restart_ms == rig.clock.now_ms()
    assert stats["store"].restarts == stats["broker"].restarts == 0
    assert [c.pid for c in rig.supervisor.running()] == [100, 103, 102]
    assert "store-b is ready again" in caplog.text


def test_backoff_doubles_up_to_its_cap_and_resets_after_a_stable_run() -> None:
    policy = RestartPolicy(backoff_initial_s=0.5, backoff_max_s=2.0, restarts_max=100, restart_window_s=60.0)
    rig = Rig(("broker",), policy)
    waits = [rig.kill_and_restart("broker") for _ in range(5)]
    assert waits == [0.5, 1.0, 2.0, 2.0, 2.0]
    rig.advance(policy.backoff_reset_after_s)  # up a whole minute: the next exit starts over
    assert rig.kill_and_restart("broker") == 0.5
    assert rig.kill_and_restart("broker") == 1.0


def test_one_exit_past_the_limit_within_the_window_gives_the_child_up() -> None:
    rig = Rig(("store-b", "broker"), RestartPolicy(restarts_max=3, restart_window_s=60.0))
    for _ in range(3):
        rig.kill_and_restart("store-b")
    rig.current("store-b").code = 1
    reason = rig.supervisor.run_once()
    assert reason is not None
    assert reason.startswith("store-b exited unexpectedly with code 1; giving up on it: restarted 3 times within 60 s")
    assert rig.state("store-b") is ChildState.GIVEN_UP and rig.state("broker") is ChildState.RUNNING
    assert rig.current("store-b") not in rig.supervisor.running()
    assert rig.advance(100) is None and len(rig.started) == 5  # never started again


def test_restarts_older_than_the_window_do_not_count() -> None:
    rig = Rig(("store-b",), RestartPolicy(restarts_max=2, restart_window_s=10.0, backoff_reset_after_s=5.0))
    for _ in range(6):
        rig.kill_and_restart("store-b")
        assert rig.advance(11) is None  # up 11 s each time: the restart before left the window
    assert next(s.restarts for s in rig.supervisor.stats()) == 6


def test_a_restarted_child_that_exits_before_it_is_ready_waits_longer_and_counts() -> None:
    rig = Rig(("store",), RestartPolicy(restarts_max=2))
    rig.current("store").code = -9
    rig.supervisor.run_once()
    rig.advance(0.5)
    rig.current("store").code = 1  # died during recovery
    assert rig.supervisor.run_once() is None and rig.state("store") is ChildState.RESTARTING
    assert rig.advance(0.9) is None and len(rig.started) == 2
    assert rig.advance(0.1) is None and len(rig.started) == 3  # after 1 s: doubled
    rig.current("store").code = 1
    reason = rig.supervisor.run_once()
    assert reason is not None and "store exited before it was ready again with code 1; giving up" in reason


def test_a_restarted_child_not_ready_in_time_is_given_up() -> None:
    rig = Rig(("etcd",), RestartPolicy(ready_timeout_s=30.0))
    rig.current("etcd").code = -9
    rig.supervisor.run_once()
    rig.advance(0.5)
    assert rig.advance(29.9) is None
    reason = rig.advance(0.1)
    assert reason == "etcd was not ready within 30 s of its restart 1; giving up on it"
    assert rig.current("etcd") in rig.supervisor.running()  # up stops it with the others


def test_restart_limit_zero_stops_at_the_first_exit() -> None:
    rig = Rig(("store", "broker"), RestartPolicy(restarts_max=0))
    rig.current("broker").code = 0
    assert rig.supervisor.run_once() == "broker exited unexpectedly with code 0; not restarting it (restart limit 0)"
    assert len(rig.started) == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"backoff_initial_s": 0},
        {"backoff_initial_s": 31.0},
        {"restarts_max": -1},
        {"restart_window_s": 0},
        {"ready_timeout_s": -1},
    ],
)
def test_a_bad_policy_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        RestartPolicy(**bad)


def test_the_state_file_and_the_metrics_show_each_child(tmp_path: Path) -> None:
    rig = Rig(("store", "store-b"))
    rig.kill_and_restart("store-b")
    path = tmp_path / "up-state.json"
    write_state(path, rig.supervisor.stats(), 4242, "http://127.0.0.1:1/metrics")
    doc = json.loads(path.read_text())
    assert doc["up_pid"] == 4242 and doc["metrics"] == "http://127.0.0.1:1/metrics"
    assert doc["children"][1] == {
        "child": "store-b",
        "pid": rig.current("store-b").pid,
        "state": "running",
        "restarts": 1,
        "last_exit_code": -9,
        "last_restart_ms": rig.clock.now_ms(),
    }
    assert doc["children"][0]["restarts"] == 0 and doc["children"][0]["last_exit_code"] is None
    assert not list(tmp_path.glob("*.tmp"))
    text = generate_latest(supervisor_registry(rig.supervisor.stats)).decode()
    assert 'pyrmq_up_child_restarts_total{child="store-b"} 1.0' in text
    assert 'pyrmq_up_child_restarts_total{child="store"} 0.0' in text
    assert 'pyrmq_up_child_state{child="store-b",state="running"} 1.0' in text
    assert 'pyrmq_up_child_state{child="store-b",state="given-up"} 0.0' in text
    assert 'pyrmq_up_child_last_exit_code{child="store-b"} -9.0' in text
    assert 'pyrmq_up_child_last_exit_code{child="store"}' not in text


def test_a_restarted_child_keeps_the_ports_it_bound() -> None:
    ready = ready_fields(
        "grpc=127.0.0.1:41001 remoting=127.0.0.1:41002 metrics=http://127.0.0.1:41003/metrics store=127.0.0.1:1"
    )
    env = {
        "PYRMQ_BROKER_PORT": "0",
        "PYRMQ_BROKER_REMOTING_PORT": "0",
        "PYRMQ_BROKER_METRICS_PORT": "-1",  # off stays off
        "PYRMQ_BROKER_STORE_ADDRESS": "127.0.0.1:1",
    }
    assert pinned_environment("broker", env, ready) == {
        "PYRMQ_BROKER_PORT": "41001",
        "PYRMQ_BROKER_REMOTING_PORT": "41002",
        "PYRMQ_BROKER_METRICS_PORT": "-1",
        "PYRMQ_BROKER_STORE_ADDRESS": "127.0.0.1:1",
    }
    store = {"PYRMQ_STORE_PORT": "10911", "PYRMQ_STORE_METRICS_PORT": "0"}
    assert pinned_environment("store", store, {"grpc": "127.0.0.1:10911", "metrics": "http://[::1]:9/metrics"}) == {
        "PYRMQ_STORE_PORT": "10911",
        "PYRMQ_STORE_METRICS_PORT": "9",
    }
    assert bound_port("off") is None and bound_port("[::1]:80") == 80
