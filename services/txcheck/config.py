"""TxCheckConfig: every setting of the transaction checker, units in the names, RocketMQ 5's
defaults (``BrokerConfig.transactionTimeOut`` / ``transactionCheckInterval`` /
``transactionCheckMax``: 6 s, 30 s, 15; docs/store-files.md, section 9). Built from the command
line only in ``__main__.py``."""

from __future__ import annotations

from dataclasses import dataclass

from services.runtime.process import parse_cpu_list
from services.runtime.settings import settings_of


# A settings table: each field's aligned comment is its documentation (services/runtime/settings.py).
# fmt: off
@dataclass(frozen=True)
class TxCheckConfig:
    store_address: str = "127.0.0.1:10911"              # the store service, HOST:PORT
    etcd_endpoints: str = ""                            # etcd, comma-separated host:port; set: store calls go to the master of broker_name's replica set as etcd says (store_address unused)
    broker_name: str = "broker-a"                       # with etcd_endpoints: the store replica set (broker group) followed
    store_failover_timeout_ms: int = 5_000              # with etcd_endpoints: how long a store call a failover interrupted is retried on the new master
    broker_addresses: tuple[str, ...] = ("127.0.0.1:8081",)  # brokers that relay checks to producers, comma-separated
    host: str = "127.0.0.1"                             # gRPC health listen address
    port: int = 10914                                   # gRPC health port; 0: any free one
    metrics_host: str = "127.0.0.1"                     # Prometheus /metrics listen address (unauthenticated: loopback by default)
    metrics_port: int = 9104                            # Prometheus /metrics port; 0: any free one, -1: off
    log_level: str = "INFO"                             # DEBUG, INFO, WARNING or ERROR
    log_format: str = "text"                            # text: one line per event for people; json: one JSON object per line
    cpu_affinity: str = ""                              # CPUs the txcheck process runs on, as in taskset -c ("2", "2-3"); empty: any
    transaction_timeout_ms: int = 6_000                 # transactionTimeOut: a half younger than this is not checked
    check_interval_ms: int = 30_000                     # transactionCheckInterval (5.x): one pass per interval
    check_max: int = 15                                 # transactionCheckMax: checks before TRANS_CHECK_MAX_TIME_TOPIC
    half_retention_ms: int = 72 * 3_600_000             # fileReservedTime: an older half is discarded, not checked
    pass_duration_max_ms: int = 60_000                  # MAX_PROCESS_TIME_LIMIT: one pass stops after this long
    pass_halves_max: int = 100_000                      # half records examined per pass (then the pass continues)
    read_batch_max: int = 32                            # records per GetMessages (RocketMQ pulls 32)
    tracked_copies_max: int = 100_000                   # check copies remembered for results / no-producer refunds
    store_rpc_timeout_ms: int = 5_000                   # per store call
    broker_rpc_timeout_ms: int = 3_000                  # per CheckTransaction call
    store_connect_timeout_ms: int = 30_000              # give up if the store does not serve within this time
    store_tls_ca_path: str = ""                         # TLS to the store: the CA its certificate chains to (off when empty)
    store_tls_cert_path: str = ""                       # client certificate for a store that requires one (mutual TLS)
    store_tls_key_path: str = ""                        # its private key
    broker_tls_ca_path: str = ""                        # TLS to the brokers (their tls_cert_path is set): the CA their certificates chain to
    retry_after_failure_ms: int = 1_000                 # wait after a pass failed (store unreachable)
    # fmt: on

    def __post_init__(self) -> None:
        positive = ("transaction_timeout_ms", "check_interval_ms", "check_max", "half_retention_ms",
                    "pass_duration_max_ms", "pass_halves_max", "read_batch_max", "tracked_copies_max",
                    "store_rpc_timeout_ms", "broker_rpc_timeout_ms", "store_connect_timeout_ms",
                    "retry_after_failure_ms")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")
        parse_cpu_list(self.cpu_affinity)  # ValueError if malformed
        if not self.store_address:
            raise ValueError("store_address must not be empty")
        if not self.broker_addresses or not all(self.broker_addresses):
            raise ValueError("at least one broker address is required")
        if self.read_batch_max > 1024:
            raise ValueError("read_batch_max must be at most 1024 (the store caps reads)")
        # A half is discarded before its first check if retention is not longer than the timeout.
        if self.half_retention_ms <= self.transaction_timeout_ms:
            raise ValueError("half_retention_ms must exceed transaction_timeout_ms")


# The settings of ``python -m services.txcheck`` (services/runtime/settings.py): every TxCheckConfig field.
SETTINGS = settings_of(TxCheckConfig, flags={
    **{name: "--" + name.replace("_", "-") for name in (
        "store_address", "etcd_endpoints", "broker_name", "host", "port", "metrics_host", "metrics_port", "transaction_timeout_ms",
        "check_interval_ms", "check_max", "store_connect_timeout_ms")},
    "broker_addresses": "--broker-address"})
