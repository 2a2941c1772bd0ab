from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import PurePosixPath

import pytest

from tests.support.components import require
from tests.support.processes import Process


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.needs("<component>", ...)``: skip the test when a component is missing, or fail
    it under PYRMQ_REQUIRE_COMPONENTS=1 (`make test`); tests/support/components.py."""
    for mark in item.iter_markers("needs"):
        require(*mark.args)


# Fault tests whose claims are timing bounds (a master keeps its lease through an etcd leader
# change with every put answered within 1 s; failover and restart times): they run after the
# two-worker part of `make test`, alone on the machine, as they would on a quiet production host.
# Under the other worker's load a lease renewal can lag into the master's fencing window and a
# put is (rightly) refused: a run of the whole suite on two workers failed that way once in two.
SERIAL_PATHS = ("tests/faults/", "tests/store/ha/test_faults.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SERIAL_PATHS):
            item.add_marker(pytest.mark.serial)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without it installed, never called
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under pytest-xdist (`make test`: -n 2) a worker takes whole modules, so a module's shared
    cluster or client starts once, and the whole of tests/pipeline, so its session's SparkSession
    (tests/pipeline/conftest.py) is one JVM. (Scopes with the most tests go first: xdist's
    loadscope reordering.) ``--dist loadgroup`` would do it by marks, but pytest 9 ignores the
    node ids pytest-xdist 3.8 rewrites for it."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/pipeline" if path.startswith("tests/pipeline/") else path

    return ModuleScheduling(config, log)


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    """Processes a test started; each is killed at the end if still running."""
    started: list[Process] = []
    yield started
    for process in started:
        process.kill()


def folder_of(nodeid: str) -> str:
    """The top folder under tests/ of a test id ("tests/store" for tests/store/ha/test_x.py::t;
    "tests/*.py" for a module directly under tests/)."""
    parts = PurePosixPath(nodeid.split("::", 1)[0]).parts
    return "/".join(parts[:2]) if len(parts) > 2 else f"{parts[0]}/*.py"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """After the run: the time each top folder of tests/ took (every test's setup, call and
    teardown summed), the slowest first, so the suite's growth shows the day it happens."""
    seconds: dict[str, float] = defaultdict(float)
    tests: dict[str, set[str]] = defaultdict(set)
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                folder = folder_of(report.nodeid)
                seconds[folder] += report.duration
                tests[folder].add(report.nodeid)
    if not seconds:
        return
    terminalreporter.write_sep("=", f"time per test folder: {sum(seconds.values()):.0f} s in all")
    for folder, spent in sorted(seconds.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"{spent:8.1f} s  {folder:<20} {len(tests[folder]):5d} tests")
