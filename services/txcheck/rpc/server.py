"""The transaction checker's gRPC server: the standard health service and server reflection.

Service names ``""`` and ``pyrmq.txcheck`` report SERVING while the last check pass succeeded,
NOT_SERVING while the store fails the passes (and from ``stop`` on).
"""
from __future__ import annotations

from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.process import format_address
from services.rpc.decode import DecodeGuardInterceptor

SERVICE_NAME = "pyrmq.txcheck"
GRPC_WORKERS = 4


class HealthServer:
    def __init__(self, host: str, port: int) -> None:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=GRPC_WORKERS,
                                                             thread_name_prefix="txcheck-rpc"),
                                  options=[("grpc.so_reuseport", 0)],
                                  interceptors=[DecodeGuardInterceptor()])
        address = format_address(host, port)
        try:
            self.port = self.server.add_insecure_port(address)
        except RuntimeError:  # grpc's "Failed to bind"
            self.port = 0
        if self.port == 0:
            raise OSError(f"cannot bind the txcheck gRPC port at {address} (in use?)")
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        self.set_serving(True)

    def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in ("", SERVICE_NAME):
            self.health.set(service, status)

    def start(self) -> None:
        self.server.start()

    def stop(self, grace_s: float) -> None:
        self.health.enter_graceful_shutdown()
        self.server.stop(grace_s).wait()
