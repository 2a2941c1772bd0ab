"""The ``needs`` marker and ``require`` (tests/support/components.py, hook in tests/conftest.py): a
missing component skips a test, or fails it under PYRMQ_REQUIRE_COMPONENTS=1 with the reason and
`make setup`; a present one runs. Each case is an in-process pytest run (pytester) whose conftest
uses the real hook, over two made-up components, one present and one missing."""

from __future__ import annotations

import pytest

from tests.support import components

pytest_plugins = ["pytester"]

PRESENT, ABSENT = "pyrmq-test-present", "pyrmq-test-absent"
REASON = "not on this machine (made up by tests/test_components.py)"

CONFTEST = """
from tests.conftest import pytest_runtest_setup  # noqa: F401 - the hook under test


def pytest_configure(config):
    config.addinivalue_line("markers", "needs(*components): needs components")
"""

TESTS = f"""
import pytest
from tests.support.components import require


@pytest.mark.needs({PRESENT!r})
def test_marked_present():
    pass


@pytest.mark.needs({ABSENT!r})
def test_marked_absent():
    pass


@pytest.mark.needs({PRESENT!r}, {ABSENT!r})
def test_marked_both():
    pass


@pytest.fixture
def needs_absent():
    require({ABSENT!r})


def test_fixture_absent(needs_absent):
    pass


def test_unmarked():
    pass
"""

MODULE_LEVEL = f"""
from tests.support.components import require

require({ABSENT!r}, module_level=True)


def test_never_runs():
    pass
"""


@pytest.fixture(autouse=True)
def made_up_components(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(components.CHECKS, PRESENT, lambda: None)
    monkeypatch.setitem(components.CHECKS, ABSENT, lambda: REASON)
    monkeypatch.delenv(components.REQUIRE_ENV, raising=False)


def run(pytester: pytest.Pytester, source: str = TESTS) -> pytest.HookRecorder:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_made_up=source)
    return pytester.inline_run("-p", "no:cacheprovider")


def outcomes(recorder: pytest.HookRecorder) -> dict[str, tuple[str, str]]:
    """Test name -> (its outcome, the skip reason or failure text); a failed setup is "error"."""
    seen: dict[str, tuple[str, str]] = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        name = report.nodeid.rpartition("::")[2]
        if report.skipped:
            assert isinstance(report.longrepr, tuple)
            seen[name] = ("skipped", report.longrepr[2])
        elif report.failed:
            seen[name] = ("error" if report.when == "setup" else "failed", report.longreprtext)
        elif report.when == "call":
            seen[name] = ("passed", "")
    return seen


SKIPPED = ("skipped", f"Skipped: {ABSENT} is missing: {REASON}")
FAILED = ("error", f"{ABSENT} is missing: {REASON}; `make setup` installs it")


def test_missing_component_skips_with_the_reason(pytester: pytest.Pytester) -> None:
    assert outcomes(run(pytester)) == {
        "test_marked_present": ("passed", ""),
        "test_marked_absent": SKIPPED,
        "test_marked_both": SKIPPED,
        "test_fixture_absent": SKIPPED,
        "test_unmarked": ("passed", ""),
    }


def test_missing_component_fails_when_required(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(components.REQUIRE_ENV, "1")
    recorder = run(pytester)
    assert outcomes(recorder) == {
        "test_marked_present": ("passed", ""),
        "test_marked_absent": FAILED,
        "test_marked_both": FAILED,
        "test_fixture_absent": FAILED,
        "test_unmarked": ("passed", ""),
    }
    assert recorder.ret == pytest.ExitCode.TESTS_FAILED


def test_other_values_of_the_variable_do_not_require(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(components.REQUIRE_ENV, "0")
    assert outcomes(run(pytester))["test_marked_absent"] == SKIPPED


def test_module_level_require_skips_the_module_or_fails_its_collection(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    skipped = run(pytester, MODULE_LEVEL)
    [report] = [r for r in skipped.getreports("pytest_collectreport") if r.nodeid == "test_made_up.py"]
    assert report.skipped and isinstance(report.longrepr, tuple)
    assert report.longrepr[2] == SKIPPED[1]
    assert skipped.ret == pytest.ExitCode.NO_TESTS_COLLECTED

    monkeypatch.setenv(components.REQUIRE_ENV, "1")
    failed = run(pytester, MODULE_LEVEL)
    [report] = [r for r in failed.getreports("pytest_collectreport") if r.nodeid == "test_made_up.py"]
    assert report.failed and FAILED[1] in report.longreprtext
    assert failed.ret == pytest.ExitCode.INTERRUPTED  # a collection error stops the run


def test_unknown_component_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_typo="import pytest\n\n@pytest.mark.needs('no-such-thing')\ndef test_x():\n    pass\n")
    [(outcome, text)] = outcomes(pytester.inline_run("-p", "no:cacheprovider")).values()
    assert outcome == "error" and "unknown component 'no-such-thing'" in text


def test_checks_are_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setitem(components.CHECKS, "pyrmq-test-counted", lambda: calls.append("x") or None)
    assert components.missing("pyrmq-test-counted") is None
    assert components.missing("pyrmq-test-counted") is None
    assert calls == ["x"]
