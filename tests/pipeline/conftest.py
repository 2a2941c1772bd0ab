"""Pipeline test fixtures: one session-scoped local[2] SparkSession (Spark's rules for a Python data
source, cited below by number: pipeline/README.md).

Tests that need Spark take the ``spark`` fixture and are marked ``spark``; without pyspark or
without Java >= 17 (`make setup` installs both) they skip with the reason, and under
PYRMQ_REQUIRE_COMPONENTS=1 (`make test`, so CI) they fail with it (tests/support/components.py).
Everything the Python workers touch must be a real file or a real server on 127.0.0.1 (they
cannot see this process's memory), and the project must be importable in them: PYTHONPATH is
set to the repository root.

``cluster`` is a store and a broker as subprocesses (``start_cluster``,
tests/support/processes.py); the tests without Spark take the in-process store and broker
servers of tests/support/broker_servers.py (``store_address``, ``store_stub``, ``broker``, ``topics``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.support.broker_servers import broker, make_broker, store_address, store_stub, topics  # noqa: F401 - fixtures
from tests.support.components import require
from tests.support.processes import start_cluster
from tests.support.spark_gateway import gateway_without_preexec

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    require("spark")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # rule 2: the workers' interpreter
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))  # rule 3: importable in workers
    from pyspark.sql import SparkSession

    tmp = tmp_path_factory.mktemp("spark")
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("pyrmq-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp / "local"))
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.python.worker.faulthandler.enabled", "true")
        .config("spark.sql.execution.pyspark.udf.faulthandler.enabled", "true")
    )
    # This process runs gRPC servers and channels by now: start the JVM without PySpark's
    # preexec_fn fork, which gRPC's fork handler can abort ("Java gateway exited", grpc#43055).
    with gateway_without_preexec():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    import pipeline

    pipeline.register(session)
    yield session
    for query in session.streams.active:  # a failed streaming test must not hang the session
        query.stop()
    session.stop()


@pytest.fixture(scope="module")
def cluster(spark, tmp_path_factory):
    """A store + broker for one test module (after the SparkSession: the JVM is up first)."""
    started: list = []
    try:
        yield start_cluster(tmp_path_factory.mktemp("cluster"), started)
    finally:
        for process in started:
            process.kill()
