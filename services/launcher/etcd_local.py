"""``python -m services.launcher.etcd_local``: one local etcd member for ``pyrmq up --replicas N`` (the
coordination store of the replica set when no ``--etcd-endpoints`` are given), run with the
same contract as every pyrmq service (services/runtime/service_main.py): settings from the
environment (``PYRMQ_ETCD_*``) or flags, one ready line once etcd answers, SIGTERM/SIGINT stop
it cleanly::

    pyrmq-etcd ready grpc=127.0.0.1:2379 metrics=off data=DIR/etcd

It runs Debian's ``etcd`` binary (installed by ``make setup``) as its child, on loopback by
default, with its data under ``<data_dir>/etcd``, and the child dies with it (PR_SET_PDEATHSIG
through ``setpriv``, as the broker's HAProxy). One member is a single point of failure for
elections (not for a healthy master, which keeps serving while its lease holds); a production
replica set uses three or five members given with ``--etcd-endpoints``, as the compose file does.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from services.runtime.clock import SystemClock
from services.runtime.etcd import EtcdError
from services.runtime.etcd.rpc.client import EtcdClient
from services.runtime.process import StopSignals, format_address, parse_cpu_list
from services.runtime.service_main import run_service
from services.runtime.settings import settings_from_args, settings_of, settings_parser

log = logging.getLogger("services.etcd")

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


# A settings table: each field's aligned comment is its documentation (services/runtime/settings.py).
# fmt: off
@dataclass(frozen=True)
class EtcdLocalConfig:
    data_dir: Path = Path("data")              # etcd keeps its member data under DATA_DIR/etcd
    host: str = "127.0.0.1"                    # client and peer listen address
    port: int = 2379                           # client port (gRPC), etcd's default
    peer_port: int = 2380                      # peer port (raft), etcd's default
    binary: str = "etcd"                       # the etcd server binary (Debian's etcd-server package)
    log_level: str = "INFO"                    # DEBUG, INFO, WARNING or ERROR
    log_format: str = "text"                   # text or json
    cpu_affinity: str = ""                     # CPUs etcd runs on (this process and the etcd it starts), as in taskset -c; empty: any
    # fmt: on

    def __post_init__(self) -> None:
        for name in ("port", "peer_port"):
            if not 0 < getattr(self, name) <= 65535:
                raise ValueError(f"{name} must be in [1, 65535], got {getattr(self, name)}")
        parse_cpu_list(self.cpu_affinity)  # ValueError if malformed

    @property
    def endpoint(self) -> str:
        return format_address(self.host, self.port)


SETTINGS = settings_of(
    EtcdLocalConfig, flags={name: "--" + name.replace("_", "-") for name in ("data_dir", "host", "port", "peer_port")}
)


def load_config(argv: list[str] | None, environ: dict[str, str] | None = None) -> EtcdLocalConfig:
    parser = settings_parser("etcd", SETTINGS, "python -m services.launcher.etcd_local", "Run one local etcd member.")
    return EtcdLocalConfig(**settings_from_args("etcd", SETTINGS, parser.parse_args(argv), environ))


def command(config: EtcdLocalConfig, binary: str) -> list[str]:
    """The etcd command line: one member named ``pyrmq`` on ``host``, its own cluster."""
    peer = f"http://{format_address(config.host, config.peer_port)}"
    client = f"http://{config.endpoint}"
    setpriv = shutil.which("setpriv")
    return [
        *([setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []),
        binary,
        "--name=pyrmq",
        f"--data-dir={config.data_dir.resolve() / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=pyrmq={peer}",
        "--initial-cluster-state=new",
        "--logger=zap",
        "--log-outputs=stderr",
    ]


def start(config: EtcdLocalConfig, stack: ExitStack, received: StopSignals) -> Mapping[str, object] | None:
    binary = shutil.which(config.binary)
    if binary is None:
        raise OSError(f"{config.binary} not found: install Debian's etcd-server (make setup does) or give --etcd-endpoints")
    (config.data_dir / "etcd").parent.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(command(config, binary), stdout=subprocess.DEVNULL, stderr=sys.stderr)
    stack.callback(_stop, process)
    client = EtcdClient([config.endpoint], timeout_s=1.0, attempt_timeout_s=0.5)
    stack.callback(client.close)
    clock = SystemClock()
    deadline = clock.monotonic_s() + READY_TIMEOUT_S
    while True:
        if received:
            return None
        if process.poll() is not None:
            raise OSError(f"etcd exited with code {process.returncode} before it served (its log is above)")
        try:
            client.status(0)
            break
        except EtcdError as exc:
            if clock.monotonic_s() > deadline:
                raise OSError(f"etcd did not serve on {config.endpoint} within {READY_TIMEOUT_S:.0f} s: {exc}") from None
            received.sleep(0.1)
    log.info("etcd serving on %s, data %s", config.endpoint, config.data_dir / "etcd")
    return {"grpc": config.endpoint, "metrics": "off", "data": config.data_dir.resolve() / "etcd"}


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main(argv: list[str] | None = None) -> int:
    return run_service("etcd", argv, load_config, start, label="local etcd")


if __name__ == "__main__":
    sys.exit(main())
