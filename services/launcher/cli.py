"""``pyrmq``: the command line. ``pyrmq up`` runs every pyrmq service as a child process;
``pyrmq topic|group|consumer|message ...`` are the admin commands (``services/admin/cli.py``;
``pyrmq client list|stack`` and ``message verify``: ``services/admin/clients_cli.py``),
``pyrmq status`` the cluster at a glance (``services/admin/status.py``), ``pyrmq send|consume|
bench`` try a topic by hand (``services/admin/client_cli.py``) and ``pyrmq config`` shows the
settings (``services/launcher/config_cli.py``).

``pyrmq compose`` prints deploy/docker-compose.yml and ``pyrmq health HOST:PORT`` checks one
service's gRPC health (the containers' HEALTHCHECK).

``pyrmq up`` (services/launcher/up.py) runs every pyrmq service as a child process.
"""

from __future__ import annotations

import argparse
import logging
import sys

from services.admin.acl_cli import add_commands as add_acl_commands
from services.admin.cli import add_commands as add_admin_commands
from services.admin.client_cli import add_commands as add_client_commands
from services.admin.clients_cli import add_commands as add_clients_commands
from services.admin.replica_cli import add_commands as add_replica_commands
from services.admin.status import add_commands as add_status_commands
from services.admin.topic_cli import add_commands as add_topic_commands
from services.launcher.compose import render_compose
from services.launcher.config_cli import add_commands as add_config_commands
from services.launcher.up import add_commands as add_up_commands
from services.runtime.rpc.tls import TlsFileError, TlsFiles, open_channel

log = logging.getLogger("pyrmq")


def _print(text: str) -> int:
    sys.stdout.write(text)
    return 0


def _health(ns: argparse.Namespace) -> int:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        tls = TlsFiles(ns.ca_file or "", ns.cert_file or "", ns.key_file or "")
        channel = (
            grpc.secure_channel(ns.address, grpc.ssl_channel_credentials())
            if ns.tls and not ns.ca_file
            else open_channel(ns.address, tls)
        )
        with channel:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=ns.timeout
            )
    except grpc.RpcError as exc:
        print(f"{ns.address}: {exc.code().name}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    print(f"{ns.address}: {status}")
    return 0 if reply.status == health_pb2.HealthCheckResponse.SERVING else 1


def _pipeline(ns: argparse.Namespace) -> int:
    """``pyrmq pipeline JOB ...`` is ``python -m pipeline.jobs JOB ...`` (pyspark is imported
    only here, so the services never need it)."""
    try:
        from pipeline.jobs.cli import main as pipeline_main
    except ImportError as exc:
        log.error("the Spark pipeline is not installed (pip install -e '.[spark]'): %s", exc)
        return 2
    return int(pipeline_main(ns.job_args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pyrmq", description="pyrmq: a RocketMQ-compatible message broker.")
    commands = parser.add_subparsers(dest="command", required=True)
    add_up_commands(commands)
    compose_parser = commands.add_parser("compose", help="print deploy/docker-compose.yml (from the service table)")
    compose_parser.set_defaults(run=lambda ns: _print(render_compose()))
    health_parser = commands.add_parser("health", help="exit 0 if the gRPC service at HOST:PORT is SERVING")
    health_parser.add_argument("address", metavar="HOST:PORT")
    health_parser.add_argument("--timeout", type=float, default=3.0, metavar="SECONDS")
    health_parser.add_argument("--tls", action="store_true", help="connect with TLS (trusting the system's roots)")
    health_parser.add_argument("--ca-file", metavar="PEM", help="connect with TLS, trusting this CA or certificate")
    health_parser.add_argument("--cert-file", metavar="PEM", help="client certificate (a store with mutual TLS)")
    health_parser.add_argument("--key-file", metavar="PEM", help="its private key")
    health_parser.set_defaults(run=_health)
    add_config_commands(commands)
    add_topic_commands(commands)
    add_admin_commands(commands)
    add_clients_commands(commands)
    add_acl_commands(commands)
    add_status_commands(commands)
    add_replica_commands(commands)
    add_client_commands(commands)
    pipeline_parser = commands.add_parser(
        "pipeline",
        help="Spark jobs over a store's files: export, rebuild, audit, stats (needs the spark extra)",
        add_help=False,
    )
    pipeline_parser.add_argument("job_args", nargs=argparse.REMAINDER)
    pipeline_parser.set_defaults(run=_pipeline)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pipeline"]:  # every later argument is the job's, --help included
        return _pipeline(argparse.Namespace(job_args=argv[1:]))
    ns = build_parser().parse_args(argv)
    try:
        return int(ns.run(ns))
    except TlsFileError as exc:
        print(f"pyrmq: {exc.strerror}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
