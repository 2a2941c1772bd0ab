"""The SparkSession fixture starts the JVM without PySpark's preexec_fn (tests/support/spark_gateway.py)."""

from __future__ import annotations

import subprocess

import pytest
from pyspark import java_gateway

from tests.support.spark_gateway import gateway_without_preexec


def _fail_in_child() -> None:
    raise RuntimeError("the preexec_fn ran in the child")


def test_the_gateway_popen_drops_the_preexec_fn_and_is_restored_after():
    with gateway_without_preexec():
        # With the preexec_fn, Popen would raise SubprocessError ("Exception occurred in preexec_fn").
        process = java_gateway.Popen(["true"], preexec_fn=_fail_in_child)
        assert process.wait(timeout=30) == 0
    assert java_gateway.Popen is subprocess.Popen
    with pytest.raises(subprocess.SubprocessError, match="preexec_fn"):  # outside it, it runs again
        java_gateway.Popen(["true"], preexec_fn=_fail_in_child)
