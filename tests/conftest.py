from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.processes import Process


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    """Processes a test started; each is killed at the end if still running."""
    started: list[Process] = []
    yield started
    for process in started:
        process.kill()
