"""The client port's front for ``tls_mode = both``: TLS and plaintext gRPC on one port.

grpcio serves a port as plaintext or TLS, never both, and cannot be handed an accepted socket.
RocketMQ 5's proxy serves both on 8081 by looking at a connection's first bytes. pyrmq puts
HAProxy (a C event loop, in TCP mode: bytes pass through untouched, spliced by the kernel) on
the client port and lets the broker's gRPC server listen on two loopback ports behind it::

    client ──► host:port (HAProxy, inherits the socket the broker bound)
                 first bytes a TLS ClientHello (req.ssl_hello_type 1) ─► 127.0.0.1:tls_port   (gRPC, TLS)
                 first bytes the HTTP/2 preface ("PRI")               ─► 127.0.0.1:plain_port (gRPC, plaintext)
                 anything else                                        ─► closed at once
                 nothing, or half a ClientHello, for client_hello_timeout_ms ─► closed

Measured against gRPC on the port itself (bench/front_bench.py, bench/RESULTS.md): send1 p50
latency +7 % with store and broker pinned apart, +10 % not pinned (one loopback hop each way);
send32 and consume throughput within 3.3 %. HAProxy in HTTP/2 mode (which could add an
X-Forwarded-For header) cost send32 12 % in a first A/B and was not taken.

**The client's address.** Behind the front, gRPC sees every connection come from 127.0.0.1.
HAProxy knows both ends of each session: ``show sess all`` on its admin socket lists the
client's ``source`` and the ``addr`` its backend connection was made from, which is the peer
gRPC reports. ``FrontPeers`` maps one to the other (refreshing the whole table on a miss, and
re-checking an entry after ``ttl_s``), so ``born_host``, ACL source-IP conditions and client
listings see the real client. A peer HAProxy does not know is a direct local connection to a
backend port and keeps its own address.

The HAProxy process gets SIGKILL when the broker's thread that started it ends (``setpriv
--pdeathsig``), so it never outlives a killed broker; ``FrontWatchdog`` restarts it if it dies
(the listening socket stays open in the broker meanwhile: connections wait in its backlog).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

FRONTEND = "client"
START_TIMEOUT_S = 10.0
ADMIN_TIMEOUT_S = 2.0
MISSES_MAX = 10_000  # remembered peers that are not the front's (direct local connections)


@dataclass(frozen=True)
class FrontPlan:
    listen_fd: int  # the client port's listening socket, inherited by HAProxy
    plain_port: int  # gRPC plaintext on 127.0.0.1
    tls_port: int  # gRPC TLS on 127.0.0.1
    admin_socket: str  # HAProxy's admin (stats) socket, a Unix socket only the broker's user reaches
    client_hello_timeout_ms: int
    idle_timeout_ms: int


def haproxy_config(plan: FrontPlan) -> str:
    """HAProxy's configuration for ``plan`` (TCP mode; no logging: errors go to its stderr)."""
    return f"""\
global
  nbthread 1
  stats socket {plan.admin_socket} mode 600 level admin
defaults
  mode tcp
  timeout connect 5s
  timeout client {plan.idle_timeout_ms}ms
  timeout server {plan.idle_timeout_ms}ms
  option clitcpka
  option srvtcpka
frontend {FRONTEND}
  bind fd@{plan.listen_fd}
  tcp-request inspect-delay {plan.client_hello_timeout_ms}ms
  tcp-request content accept if {{ req.ssl_hello_type 1 }}
  tcp-request content accept if {{ req.payload(0,3) -m str PRI }}
  tcp-request content reject
  use_backend tls if {{ req.ssl_hello_type 1 }}
  default_backend plain
backend plain
  server grpc 127.0.0.1:{plan.plain_port}
backend tls
  server grpc 127.0.0.1:{plan.tls_port}
"""


def listen_socket(host: str, port: int, backlog: int = 1024, reuse_port: bool = False) -> socket.socket:
    """The client port's listening socket (OSError if it cannot bind); ``reuse_port``: shared
    with other processes that set it too (SO_REUSEPORT)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        if family == socket.AF_INET6 and host == "::":
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((host.strip("[]") or "0.0.0.0", port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def admin_command(path: str, command: str, timeout_s: float = ADMIN_TIMEOUT_S) -> str:
    """One command on HAProxy's admin socket; its whole answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(path)
        sock.sendall(command.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")


def _grpc_peer(address: str) -> str:
    """HAProxy's ``1.2.3.4:5`` / ``::1:5`` -> grpc's ``ipv4:1.2.3.4:5`` / ``ipv6:[::1]:5``."""
    host, _, port = address.rpartition(":")
    if ":" in host:
        return f"ipv6:[{host.strip('[]')}]:{port}"
    return f"ipv4:{host}:{port}"


def parse_sessions(text: str) -> dict[str, str]:
    """``show sess all`` -> {grpc peer of the backend connection: grpc peer of the client} for
    the client frontend's sessions that reached a backend."""
    peers: dict[str, str] = {}
    source = frontend = ""
    for line in text.splitlines():
        if not line.startswith(" ") and " source=" in line:
            source = line.split(" source=", 1)[1].split()[0]
            frontend = ""
        elif line.startswith("  frontend="):
            frontend = line[len("  frontend=") :].split()[0]
        elif line.startswith("  backend=") and frontend == FRONTEND and source and " addr=" in line:
            peers[_grpc_peer(line.split(" addr=", 1)[1].split()[0])] = _grpc_peer(source)
            source = ""
    return peers


def parse_backend_totals(csv_text: str) -> dict[str, int]:
    """``show stat`` (CSV, header ``# pxname,svname,...,stot,...``) -> {backend: total sessions}."""
    lines = csv_text.splitlines()
    if not lines or not lines[0].startswith("# "):
        return {}
    header = lines[0][2:].split(",")
    name, kind, total = header.index("pxname"), header.index("svname"), header.index("stot")
    totals: dict[str, int] = {}
    for line in lines[1:]:
        fields = line.split(",")
        if len(fields) > total and fields[kind] == "BACKEND":
            totals[fields[name]] = int(fields[total] or 0)
    return totals


class FrontPeers:
    """gRPC peer (the front's backend connection) -> the client's peer, through HAProxy's admin socket."""

    def __init__(
        self,
        sessions: Callable[[], dict[str, str]],
        monotonic_s: Callable[[], float],
        ttl_s: float = 10.0,
        refresh_min_interval_s: float = 0.05,
    ) -> None:
        self._sessions = sessions
        self._monotonic_s = monotonic_s
        self._ttl_s = ttl_s
        self._min_interval_s = refresh_min_interval_s
        self._lock = threading.Lock()
        self._map: dict[str, str] = {}
        self._misses: dict[str, float] = {}  # peers the front did not know -> when that was seen
        self._refreshed_at = float("-inf")

    def resolve(self, peer: str) -> str:
        if not peer.startswith(("ipv4:127.", "ipv6:[::1]")):
            return peer  # not through the front (it connects from loopback)
        now = self._monotonic_s()
        if now - self._refreshed_at <= self._ttl_s:
            client = self._map.get(peer)
            if client is not None:
                return client
            missed = self._misses.get(peer)
            if missed is not None and now - missed <= self._ttl_s:
                return peer  # a direct local connection, known not to be the front's
        with self._lock:
            if now - self._refreshed_at > self._min_interval_s:
                self._refresh()
            client = self._map.get(peer)
            if client is not None:
                return client
            if len(self._misses) >= MISSES_MAX:
                self._misses.clear()
            self._misses[peer] = now
            return peer

    def _refresh(self) -> None:
        try:
            self._map = self._sessions()
        except OSError as exc:  # the front is restarting: keep the last table
            log.warning("cannot read the front's sessions: %s", exc)
        self._refreshed_at = self._monotonic_s()


class HaproxyFront:
    """HAProxy on the client port, started and stopped with the broker."""

    def __init__(
        self,
        binary: str,
        listen: socket.socket,
        monotonic_s: Callable[[], float],
        plan_of: Callable[[int, str], FrontPlan],
    ) -> None:
        path = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/local/sbin")
        if path is None:
            raise OSError(
                f"tls_mode both needs HAProxy ({binary!r} not found: `make setup` installs it, or apt-get install "
                "haproxy); or set tls_mode to plaintext or tls"
            )
        self._binary = path
        self._listen = listen
        self._dir = tempfile.mkdtemp(prefix="pyrmq-front-")
        self.plan = plan_of(listen.fileno(), os.path.join(self._dir, "admin.sock"))
        self._config = Path(self._dir) / "haproxy.cfg"
        self._config.write_text(haproxy_config(self.plan))
        self._process: subprocess.Popen[bytes] | None = None
        self._stopping = False
        self._monotonic_s = monotonic_s
        self.peers = FrontPeers(self.sessions, monotonic_s)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start HAProxy and wait until its admin socket answers (OSError if it exits or hangs)."""
        command = [self._binary, "-f", str(self._config), "-db"]
        setpriv = shutil.which("setpriv")
        if setpriv is not None:  # util-linux: HAProxy dies with the thread that started it
            command = [setpriv, "--pdeathsig", "KILL", *command]
        with contextlib.suppress(FileNotFoundError):  # a restart: the dead one's socket
            os.unlink(self.plan.admin_socket)
        self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, pass_fds=(self.plan.listen_fd,))
        unpin(self._process.pid)
        deadline = self._monotonic_s() + START_TIMEOUT_S
        while True:
            if self._process.poll() is not None:
                raise OSError(f"HAProxy exited with code {self._process.returncode} at start (its stderr says why)")
            try:
                admin_command(self.plan.admin_socket, "show info")
                return
            except OSError:
                if self._monotonic_s() > deadline:
                    self._process.kill()
                    raise OSError(
                        f"HAProxy did not answer on {self.plan.admin_socket} within {START_TIMEOUT_S:.0f} s"
                    ) from None
                time.sleep(0.02)

    def exited(self) -> bool:
        return self._process is not None and self._process.poll() is not None

    def sessions(self) -> dict[str, str]:
        return parse_sessions(admin_command(self.plan.admin_socket, "show sess all"))

    def connections_by_backend(self) -> dict[str, int]:
        """Connections HAProxy has handed to each backend ("plain", "tls") since it started."""
        return parse_backend_totals(admin_command(self.plan.admin_socket, "show stat"))

    def stop(self, grace_s: float = 5.0) -> None:
        """Stop accepting, then end HAProxy (open connections are cut after ``grace_s``)."""
        self._stopping = True
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()  # HAProxy's hard stop; the broker's gRPC grace period runs behind it
            try:
                process.wait(grace_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._listen.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    @property
    def stopping(self) -> bool:
        return self._stopping


def unpin(pid: int) -> None:
    """Let HAProxy run on any CPU: it inherits the broker's ``cpu_affinity``, and sharing the
    broker's one core cost send32 17 % (bench/RESULTS.md) where any free core costs ~3 %."""
    try:
        os.sched_setaffinity(pid, range(os.cpu_count() or 1))
    except OSError as exc:  # a cpuset narrower than the machine: keep what it inherited
        log.debug("HAProxy keeps the broker's CPU affinity: %s", exc)


class FrontWatchdog:
    """Restarts HAProxy when it dies while the broker runs (checked every ``interval_s``)."""

    def __init__(self, front: HaproxyFront, interval_s: float = 1.0) -> None:
        self._front = front
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="front-watchdog", daemon=True)
        self.restarts = 0

    def run_once(self) -> None:
        if self._front.exited() and not self._front.stopping:
            log.error("HAProxy (the client port's front) exited; restarting it")
            try:
                self._front.start()
                self.restarts += 1
            except OSError as exc:
                log.error("cannot restart HAProxy: %s", exc)

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self.run_once()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
