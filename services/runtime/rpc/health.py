"""gRPC health: waiting for a service to report SERVING (how every caller of the store waits for
it at start-up, through the store client's ``wait_ready``), and the health-only server of the
services that serve no API of their own."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.runtime.process import format_address
from services.runtime.rpc.decode_guard import DecodeGuardInterceptor

POLL_INTERVAL_S = 0.2
CHECK_TIMEOUT_S = 0.5  # per attempt, so a stop request (give_up) is noticed quickly
_IDLE = threading.Event()  # never set: an interruptible sleep


class NotServingError(Exception):
    """The service did not report SERVING in time; the message says what it last answered."""


def wait_serving(
    channel: grpc.Channel,
    service: str,
    timeout_s: float,
    monotonic_s: Callable[[], float],
    give_up: Callable[[], bool] = lambda: False,
) -> bool:
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
            response = health.Check(
                health_pb2.HealthCheckRequest(service=service),
                timeout=min(remaining_s, CHECK_TIMEOUT_S),
                wait_for_ready=True,
            )
            if response.status == health_pb2.HealthCheckResponse.SERVING:
                return True
            last_error = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        except grpc.RpcError as exc:
            last_error = f"{exc.code().name} {exc.details()}"
        _IDLE.wait(min(POLL_INTERVAL_S, max(0.0, deadline_s - monotonic_s())))
    return False


class HealthServer:
    """A gRPC server with only the standard health service and server reflection, for a service
    that serves no API of its own (scheduler, txcheck) so that ``pyrmq up`` and orchestrators can
    probe it. Service names ``""`` and ``service_name`` report SERVING (``set_serving`` changes
    that); ``stop`` reports NOT_SERVING before stopping."""

    def __init__(self, host: str, port: int, service_name: str, workers: int = 4) -> None:
        self.service_name = service_name
        what = service_name.rpartition(".")[2]
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"{what}-rpc"),
            options=[("grpc.so_reuseport", 0)],
            interceptors=[DecodeGuardInterceptor()],
        )
        address = format_address(host, port)
        try:
            self.port = self.server.add_insecure_port(address)
        except RuntimeError:  # grpc's "Failed to bind"
            self.port = 0
        if self.port == 0:
            raise OSError(f"cannot bind the {what} gRPC port at {address} (in use?)")
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        self.set_serving(True)

    def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in ("", self.service_name):
            self.health.set(service, status)

    def start(self) -> None:
        self.server.start()

    def stop(self, grace_s: float = 2.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace_s).wait()
