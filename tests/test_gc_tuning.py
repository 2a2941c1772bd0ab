"""gc_gen0_threshold (store and broker settings): start-up objects frozen, young collections rarer.

Run in a child process so the test process keeps Python's collector settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from services.broker.config import BrokerConfig
from services.store.config import StoreConfig

ROOT = Path(__file__).resolve().parents[1]


def _gc_after(threshold: int) -> list[str]:
    code = (
        "import gc; from services.runtime.process import tune_gc; before = gc.get_freeze_count(); "
        "objs = [[i] for i in range(1000)]; "
        f"changed = tune_gc({threshold}); "
        "print(changed, gc.get_threshold(), gc.get_freeze_count() - before >= 1000)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().split(" ", 1)


def test_tuning_freezes_start_up_objects_and_raises_the_thresholds() -> None:
    changed, rest = _gc_after(10_000)
    assert changed == "True" and rest == "(10000, 20, 100) True"


def test_zero_keeps_pythons_defaults() -> None:
    changed, rest = _gc_after(0)
    assert changed == "False" and rest.startswith("(700, 10, 10)")


def test_negative_thresholds_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="gc_gen0_threshold"):
        StoreConfig(store_root=tmp_path, gc_gen0_threshold=-1)
    with pytest.raises(ValueError, match="gc_gen0_threshold"):
        BrokerConfig(gc_gen0_threshold=-1)
    assert StoreConfig(store_root=tmp_path).gc_gen0_threshold == 10_000
    assert BrokerConfig().gc_gen0_threshold == 0  # see BrokerConfig: streams held by calls in cycles
