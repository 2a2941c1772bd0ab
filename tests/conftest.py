from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.components import require
from tests.support.processes import Process


def pytest_runtest_setup(item: pytest.Item) -> None:
    """``@pytest.mark.needs("<component>", ...)``: skip the test when a component is missing, or fail
    it under PYRMQ_REQUIRE_COMPONENTS=1 (`make test`); tests/support/components.py."""
    for mark in item.iter_markers("needs"):
        require(*mark.args)


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    """Processes a test started; each is killed at the end if still running."""
    started: list[Process] = []
    yield started
    for process in started:
        process.kill()
