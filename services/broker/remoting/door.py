"""The remoting door's construction point: ``build_remoting`` makes the dispatcher, the handlers
over the broker core (name server, sends, pulls, the other consumer codes) and the server on
``remoting_port``; ``RemotingDoor.start`` binds it and starts the client expiry.

The door advertises ``host:port`` in every route and cluster answer: the broker's advertised
host (as the v2 endpoint) and the bound remoting port (``remoting_advertised_port`` if set).
"""

from __future__ import annotations

import logging
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import Histogram

from services.broker.assembly import BrokerCore
from services.broker.classic_offsets import FLUSH_INTERVAL_S
from services.broker.config import BrokerConfig
from services.broker.remoting.acl import RemotingAccess
from services.broker.remoting.admin import Admin
from services.broker.remoting.consume import Consumers
from services.broker.remoting.context import RemotingContext
from services.broker.remoting.dispatch import Dispatcher, Observe
from services.broker.remoting.namesrv import NameServer
from services.broker.remoting.pop import Pops
from services.broker.remoting.pull import Pulls
from services.broker.remoting.send import Sends
from services.broker.remoting.server import RemotingServer, TlsConfig
from services.broker.tls_cert import ServerCertificate
from services.domain.remoting.codes import RequestCode
from services.runtime.process import format_address

log = logging.getLogger(__name__)

EXPIRE_SCAN_S = 10.0  # RocketMQ's ClientHousekeepingService scans every 10 s
OFFSETS_FLUSH_S = FLUSH_INTERVAL_S  # the pulls' commit offsets to the stores


@dataclass
class RemotingDoor:
    server: RemotingServer
    dispatcher: Dispatcher
    context: RemotingContext
    pulls: Pulls
    _stop: threading.Event
    _housekeeper: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.server.port

    def start(self) -> int:
        """Bind and serve; the bound port. Routes name ``context.address``, fixed here."""
        port = self.server.start()
        host = self.context.address.rpartition(":")[0] or "127.0.0.1"
        advertised = self.context.config.remoting_advertised_port or port
        self.context.address = format_address(host, advertised)
        self.context.group_addresses = {
            name: format_address(host, bound) for name, bound in self.server.group_ports.items()
        }
        self.server.advertised = {"": self.context.address, **self.context.group_addresses}
        self._housekeeper = threading.Thread(target=self._housekeeping, name="remoting-housekeeping", daemon=True)
        self._housekeeper.start()
        return port

    def _housekeeping(self) -> None:
        """Every 5 s the pulls' commit offsets to the stores; every 10 s silent clients out."""
        rounds = 0
        while not self._stop.wait(OFFSETS_FLUSH_S):
            self.context.core.classic_offsets.run_once()
            rounds += 1
            if rounds % round(EXPIRE_SCAN_S / OFFSETS_FLUSH_S) == 0:
                dropped = self.context.clients.expire()
                if dropped:
                    log.info("dropped %d remoting clients not heard from for 120 s", dropped)

    def stop(self) -> None:
        self._stop.set()
        self.pulls.close()
        self.server.stop()
        if self._housekeeper is not None:
            self._housekeeper.join(5.0)
        self.context.core.classic_offsets.run_once()  # what the pulls committed since the last round
        self.dispatcher.shutdown()


def build_remoting(
    core: BrokerCore,
    advertised_host: str,
    host: str,
    port: int,
    reuse_port: bool,
    latency: Histogram | None = None,
    certificate: ServerCertificate | None = None,
) -> RemotingDoor:
    """The door over ``core``, not started (``port`` 0: any free one). ``latency``: the broker's
    ``rocketmq_rpc_latency_seconds`` (``method`` = the request code's name, ``code`` = the
    response code). ``certificate``: TLS beside plaintext on the port (``tls_mode`` both; only
    TLS with ``tls``), the v2 port's certificate; None: plaintext only."""
    config = core.config
    observe = observe_latency(latency) if latency is not None else None
    dispatcher = Dispatcher(
        config.remoting_workers,
        RemotingAccess(core.guard) if core.guard is not None else None,
        observe,
        core.clock.monotonic_s,
    )
    server = RemotingServer(
        dispatcher, host, port, reuse_port, config.remoting_group_port_map(), tls_config(config, certificate)
    )

    context = RemotingContext(core, config, core.clock, format_address(advertised_host, port), core.classic_clients)
    NameServer(context).register(dispatcher)
    Sends(context).register(dispatcher)
    pulls = Pulls(context, server, dispatcher, observe)
    pulls.register(dispatcher)
    core.classic_clients.watch_members(pulls.members_changed)
    Consumers(context).register(dispatcher)
    Pops(context).register(dispatcher)
    Admin(context).register(dispatcher)
    return RemotingDoor(server, dispatcher, context, pulls, threading.Event())


def observe_latency(latency: Histogram) -> Observe:
    names = {code.value: code.name for code in RequestCode}
    children: dict[tuple[int, int], Histogram] = {}

    def observe(request_code: int, response_code: int, seconds: float) -> None:
        child = children.get((request_code, response_code))
        if child is None:
            child = latency.labels(names.get(request_code, str(request_code)), str(response_code))
            children[(request_code, response_code)] = child
        child.observe(seconds)

    return observe


def tls_config(config: BrokerConfig, certificate: ServerCertificate | None) -> TlsConfig | None:
    if certificate is None or config.tls_mode == "plaintext":
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory() as directory:  # load_cert_chain reads files only
        cert, key = Path(directory) / "cert.pem", Path(directory) / "key.pem"
        cert.write_bytes(certificate.cert_pem)
        key.write_bytes(certificate.key_pem)
        context.load_cert_chain(cert, key)
    return TlsConfig(context, required=config.tls_mode == "tls")
