"""Waiting for a gRPC service to report SERVING: how the broker, scheduler and txcheck wait for
the store at start-up (each through its own store client's ``wait_ready``)."""
from __future__ import annotations

import threading
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

POLL_INTERVAL_S = 0.2
CHECK_TIMEOUT_S = 0.5  # per attempt, so a stop request (give_up) is noticed quickly
_IDLE = threading.Event()  # never set: an interruptible sleep


class NotServingError(Exception):
    """The service did not report SERVING in time; the message says what it last answered."""


def wait_serving(channel: grpc.Channel, service: str, timeout_s: float, monotonic_s: Callable[[], float],
                 give_up: Callable[[], bool] = lambda: False) -> bool:
    """True once ``service`` on ``channel`` reports SERVING, False if ``give_up()`` first;
    NotServingError after ``timeout_s``."""
    health = health_pb2_grpc.HealthStub(channel)
    deadline_s = monotonic_s() + timeout_s
    last_error = "no answer"
    while not give_up():
        remaining_s = deadline_s - monotonic_s()
        if remaining_s <= 0:
            raise NotServingError(f"not serving after {timeout_s:.0f} s: {last_error}")
        try:
            response = health.Check(health_pb2.HealthCheckRequest(service=service),
                                    timeout=min(remaining_s, CHECK_TIMEOUT_S), wait_for_ready=True)
            if response.status == health_pb2.HealthCheckResponse.SERVING:
                return True
            last_error = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        except grpc.RpcError as exc:
            last_error = f"{exc.code().name} {exc.details()}"
        _IDLE.wait(min(POLL_INTERVAL_S, max(0.0, deadline_s - monotonic_s())))
    return False
