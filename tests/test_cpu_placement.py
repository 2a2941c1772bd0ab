"""``pyrmq up``'s CPU placement (services/launcher/placement.py): the plan for 1, 2, 4 and 16 CPUs and 1 or
3 store replicas, explicit settings winning, and the children of a real ``pyrmq up`` running on
the CPUs planned."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from services.launcher.etcd_local import EtcdLocalConfig
from services.launcher.placement import (
    affinity_environment,
    describe,
    explicit_affinities,
    format_cpu_list,
    plan,
    plan_for_up,
)
from services.runtime.process import parse_cpu_list
from services.scheduler.config import SchedulerConfig
from services.txcheck.config import TxCheckConfig
from tests.support.processes import Process, child_pids, pyrmq_up_command

ONE = [("store", "store"), ("broker", "broker"), ("scheduler", "scheduler"), ("txcheck", "txcheck")]
THREE = [
    ("etcd", "etcd"),
    ("store", "store"),
    ("store-1", "store"),
    ("store-2", "store"),
    ("broker", "broker"),
    ("scheduler", "scheduler"),
    ("txcheck", "txcheck"),
]
UP_READY = re.compile(r"^pyrmq up: .* cpus=(?P<cpus>\S+) \(RocketMQ clients: endpoints \S+\)$")


@pytest.mark.parametrize(
    "cpus, rows, expected",
    [
        (1, ONE, {"store": "", "broker": "", "scheduler": "", "txcheck": ""}),
        (2, ONE, {"store": "0", "broker": "1", "scheduler": "", "txcheck": ""}),
        (4, ONE, {"store": "0", "broker": "1", "scheduler": "2-3", "txcheck": "2-3"}),
        (16, ONE, {"store": "0", "broker": "1", "scheduler": "2-15", "txcheck": "2-15"}),
        (1, THREE, dict.fromkeys(("etcd", "store", "store-1", "store-2", "broker", "scheduler", "txcheck"), "")),
        # More hot processes than CPUs: the broker keeps its own, the replicas share the other.
        (
            2,
            THREE,
            {"etcd": "", "store": "0", "store-1": "0", "store-2": "0", "broker": "1", "scheduler": "", "txcheck": ""},
        ),
        (
            4,
            THREE,
            {"etcd": "", "store": "0", "store-1": "1", "store-2": "2", "broker": "3", "scheduler": "", "txcheck": ""},
        ),
        (
            16,
            THREE,
            {
                "etcd": "4-15",
                "store": "0",
                "store-1": "1",
                "store-2": "2",
                "broker": "3",
                "scheduler": "4-15",
                "txcheck": "4-15",
            },
        ),
    ],
)
def test_the_store_and_the_broker_get_cores_of_their_own(cpus: int, rows, expected: dict[str, str]) -> None:
    assert plan(range(cpus), rows) == expected


def test_the_plan_uses_only_the_cpus_given_in_their_order() -> None:
    assert plan({7, 3, 5}, ONE) == {"store": "3", "broker": "5", "scheduler": "7", "txcheck": "7"}
    assert plan({2, 3, 5, 9}, ONE) == {"store": "2", "broker": "3", "scheduler": "5,9", "txcheck": "5,9"}


def test_off_places_nothing() -> None:
    assert plan(range(16), THREE, mode="off") == {label: "" for label, _ in THREE}
    with pytest.raises(ValueError, match="cpu placement"):
        plan(range(2), ONE, mode="spread")


def test_explicit_settings_win_and_the_plan_avoids_their_cpus() -> None:
    # The store pinned by hand to CPU 1: the broker takes the other; the store row is not placed.
    assert plan(range(2), ONE, {"store": "1"}) == {"broker": "0", "scheduler": "", "txcheck": ""}
    assert plan(range(4), ONE, {"broker": "0-1"}) == {"store": "2", "scheduler": "3", "txcheck": "3"}
    # An explicit "any" is a setting too (the broker is left out, its CPU goes to the helpers); a
    # helper pinned by hand takes nothing from the hot ones.
    assert plan(range(2), ONE, {"broker": ""}) == {"store": "0", "scheduler": "1", "txcheck": "1"}
    assert plan(range(2), ONE, {"scheduler": "0"}) == {"store": "0", "broker": "1", "txcheck": ""}
    # Every CPU claimed: the others are placed over all of them rather than nowhere.
    assert plan(range(2), ONE, {"store": "0-1"}) == {"broker": "0", "scheduler": "1", "txcheck": "1"}


def test_explicit_settings_come_from_the_file_and_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "pyrmq.toml"
    config.write_text('[store]\ncpu_affinity = "1"\n[broker]\ncpu_affinity = "0"\n[scheduler]\nport = 0\n')
    environ = {"PYRMQ_CONFIG": str(config), "PYRMQ_BROKER_CPU_AFFINITY": "1", "PYRMQ_TXCHECK_CPU_AFFINITY": ""}
    services = ("store", "broker", "scheduler", "txcheck")
    assert explicit_affinities(services, environ) == {"store": "1", "broker": "1", "txcheck": ""}
    assert explicit_affinities(services, {}) == {}
    with pytest.raises(ValueError, match="broker.cpu_affinity"):
        plan_for_up(ONE, {"PYRMQ_BROKER_CPU_AFFINITY": "x"}, "auto")


def test_cpu_lists_and_environment() -> None:
    assert format_cpu_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert parse_cpu_list(format_cpu_list({0, 1, 2, 5, 7, 8})) == {0, 1, 2, 5, 7, 8}
    assert format_cpu_list(()) == ""
    assert affinity_environment("scheduler", "2-3") == {"PYRMQ_SCHEDULER_CPU_AFFINITY": "2-3"}
    assert affinity_environment("store", "") == {} and affinity_environment("store", None) == {}
    assert describe({0, 1}, {0, 1}) == "any" and describe({1}, {0, 1}) == "1"


def test_every_service_up_starts_has_a_cpu_affinity_setting(tmp_path: Path) -> None:
    for make in (
        lambda cpus: SchedulerConfig(root=tmp_path, cpu_affinity=cpus),
        lambda cpus: TxCheckConfig(cpu_affinity=cpus),
        lambda cpus: EtcdLocalConfig(cpu_affinity=cpus),
    ):
        assert make("0-1").cpu_affinity == "0-1"
        with pytest.raises(ValueError, match="bad CPU list"):
            make("2-1")


def _cpus_of_every_thread(pid: int) -> set[str]:
    """Cpus_allowed_list of each thread of ``pid`` (/proc, Linux)."""
    out = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        status = (task / "status").read_text()
        out.add(re.search(r"^Cpus_allowed_list:\s*(\S+)$", status, re.M)[1])
    return out


def test_pyrmq_up_children_run_on_the_planned_cpus(
    tmp_path: Path, processes: list[Process], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [name for name in os.environ if name.startswith("PYRMQ_")]:
        monkeypatch.delenv(name)  # no explicit cpu_affinity, no config file
    up = Process(pyrmq_up_command(tmp_path / "data", metrics_port=-1), tmp_path)
    processes.append(up)
    expected = plan_for_up(ONE, os.environ, "auto")  # what `up` plans here (2 cores: store 0, broker 1)
    ready = up.wait_line(UP_READY)
    available = os.sched_getaffinity(0)
    children = child_pids(up.popen.pid)
    assert set(children) == {"store", "broker", "scheduler", "txcheck"}
    shown = dict(item.split(":", 1) for item in ready["cpus"].split(";"))
    for service, pid in children.items():
        planned = parse_cpu_list(expected[service]) or available
        assert _cpus_of_every_thread(pid) == {format_cpu_list(planned)}, service
        assert shown[service] == describe(planned, available)
    if expected["store"]:  # the store's own log line
        assert f"running on CPUs {expected['store']}" in up.wait_log(f"running on CPUs {expected['store']}")
    up.wait_line(re.compile(r"^\s+service\s+gRPC\s+metrics\s+cpus\s+data\s+log$"))  # the table's header
    assert up.stop(signal.SIGTERM) == 0, up.log()
