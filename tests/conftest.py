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


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist with ``--dist loadgroup`` (`make test`: two workers), a worker runs whole
    modules, so a module's shared cluster or client starts once, and every test that takes the
    session's SparkSession (tests/pipeline/conftest.py), so there is one JVM."""
    if not config.pluginmanager.hasplugin("xdist") or config.getoption("dist", "no") != "loadgroup":
        return
    for item in items:
        group = "spark" if "spark" in item.fixturenames else item.nodeid.split("::", 1)[0].removeprefix("tests/")
        item.add_marker(pytest.mark.xdist_group(group))


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
