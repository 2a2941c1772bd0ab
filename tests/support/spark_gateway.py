"""Start Spark's JVM from a process that already uses gRPC, without the fork that can kill it.

PySpark's ``launch_gateway`` starts the JVM with ``subprocess.Popen(..., preexec_fn=...)`` (to
ignore SIGINT in the JVM). A ``preexec_fn`` makes CPython fork() instead of vfork(), so gRPC's
pthread_atfork child handler runs in the child and restarts its poller there; after
``close_fds`` closed the poller's epoll fd the child aborts before exec ("Epoll1Poller ...
encountered epoll_wait error: Bad file descriptor", SIGABRT), and PySpark reports "Java gateway
exited". It is gRPC's open issue grpc/grpc#43055 (grpcio 1.80 and later). The test process has
gRPC servers and channels by the time the Spark tests run: about one such Popen in seven failed
here (44 of 300 with two threads of RPCs running; none without the ``preexec_fn``).

``gateway_without_preexec()`` drops the ``preexec_fn`` from PySpark's gateway Popen while a
SparkSession is built: the JVM then also gets a terminal's Ctrl-C, which does not matter in a
test run (PySpark still stops the JVM by closing its stdin).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def gateway_without_preexec() -> Iterator[None]:
    from pyspark import java_gateway

    real_popen = java_gateway.Popen

    def popen(command: Any, **kwargs: Any) -> Any:
        kwargs.pop("preexec_fn", None)
        return real_popen(command, **kwargs)

    java_gateway.Popen = popen  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        java_gateway.Popen = real_popen  # type: ignore[misc]
