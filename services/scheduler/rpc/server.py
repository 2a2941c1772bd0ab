"""The scheduler's gRPC server: the grpc health service and server reflection only.

The scheduler serves no API of its own (it only calls the store); the server lets ``pyrmq up``
and orchestrators probe it. Health is SERVING while the scheduler runs; ``stop`` reports
NOT_SERVING before stopping.
"""
from __future__ import annotations

from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.process import format_address
from services.rpc.decode import DecodeGuardInterceptor

SERVICE_NAME = "pyrmq.scheduler"   # the health service name probes ask for ("" works too)


class HealthServer:
    def __init__(self, host: str, port: int) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="scheduler-rpc"),
                                  options=[("grpc.so_reuseport", 0)],
                                  interceptors=[DecodeGuardInterceptor()])
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        try:
            self.port = self.server.add_insecure_port(format_address(host, port))
        except RuntimeError:  # grpc's "Failed to bind"
            self.port = 0
        if self.port == 0:
            raise OSError(f"cannot bind the scheduler's gRPC port at {format_address(host, port)} (in use?)")

    def start(self) -> None:
        self.server.start()
        for service in ("", SERVICE_NAME):
            self.health.set(service, health_pb2.HealthCheckResponse.SERVING)

    def stop(self, grace_s: float = 2.0) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace_s).wait()
