"""cpu_affinity (store and broker settings): taskset-style CPU lists, applied at process start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.broker.config import BrokerConfig
from services.runtime.process import parse_cpu_list
from services.store.config import StoreConfig

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "text, cpus", [("", set()), ("0", {0}), ("0,2", {0, 2}), ("0-3,6", {0, 1, 2, 3, 6}), (" 1 , 3-4 ", {1, 3, 4})]
)
def test_cpu_lists_read_like_taskset(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["a", "2-1", "-1", "0-x", "1.5"])
def test_bad_cpu_lists_are_refused_by_both_configs(text: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="bad CPU list"):
        StoreConfig(store_root=tmp_path, cpu_affinity=text)
    with pytest.raises(ValueError, match="bad CPU list"):
        BrokerConfig(cpu_affinity=text)


def _affinity_after(text: str) -> subprocess.CompletedProcess:
    code = (
        "import os; from services.runtime.process import apply_cpu_affinity; "
        f"print(apply_cpu_affinity({text!r}), sorted(os.sched_getaffinity(0)))"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_a_process_is_pinned_to_the_cpus_named_and_left_alone_without() -> None:
    first = min(os.sched_getaffinity(0))
    pinned = _affinity_after(str(first))
    assert pinned.returncode == 0, pinned.stderr
    assert pinned.stdout.split(" ", 1)[1].strip() == f"[{first}]"
    untouched = _affinity_after("")
    assert untouched.stdout.startswith("None ") and untouched.stdout.split(" ", 1)[1].strip() == str(
        sorted(os.sched_getaffinity(0))
    )


def test_cpus_the_process_may_not_use_are_a_clear_error() -> None:
    result = _affinity_after("4095")
    assert result.returncode != 0 and "names CPUs this process may not use" in result.stderr
