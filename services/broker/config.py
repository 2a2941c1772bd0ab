"""BrokerConfig: every setting of the broker service, with its default, in one frozen class.

Units are in the names (docs/conventions.md, rule 6). Defaults are the RocketMQ 5 proxy's where it has one
(``ProxyConfig``: maxMessageSize, userPropertyMaxNum, maxUserPropertySize,
maxMessageGroupSize, maxDelayTimeMills, maxTransactionRecoverySecond, the settings it replies
on Telemetry). Built from the command line only in ``__main__``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from services.domain.retry_policy import CUSTOMIZED_NEXT_MS_DEFAULT
from services.domain.topic_types import TOPIC_MESSAGE_TYPES
from services.runtime.process import parse_cpu_list
from services.runtime.settings import settings_of

WILDCARD_HOSTS = ("", "0.0.0.0", "::")
MIB = 1 << 20
# Customized backoff of a consumer group with the default retry policy (RocketMQ's
# messageDelayLevel from level 3 on: 1s 5s 10s 30s 1m ... 2h): CustomizedRetryPolicy's default.
CONSUMER_RETRY_DELAYS_MS_DEFAULT = CUSTOMIZED_NEXT_MS_DEFAULT
# RocketMQ's RenewStrategyPolicy: the invisible time each renewal of a push consumer's message sets.
RENEW_SLICES_MS_DEFAULT = (60_000, 180_000, 300_000, 600_000, 1_800_000, 3_600_000)
MESSAGE_TYPES = TOPIC_MESSAGE_TYPES
TLS_MODES = ("both", "tls", "plaintext")


# A settings table: each field's aligned comment is its documentation (services/runtime/settings.py).
# fmt: off
@dataclass(frozen=True)
class BrokerConfig:
    # -- network ---------------------------------------------------------------------------
    host: str = "127.0.0.1"                   # gRPC listen address
    port: int = 8081                          # gRPC port for RocketMQ v2 clients; 0: any free one
    advertised_host: str = ""                 # host routes tell clients to connect to; "": host (127.0.0.1 for a wildcard)
    advertised_port: int = 0                  # port routes tell clients to connect to; 0: the bound port
    reuse_port: bool = False                  # several broker processes on the one client port (SO_REUSEPORT: the kernel spreads connections over them; pyrmq up --brokers B); each also serves a loopback port of its own (ready line: local=)
    remoting_port: int = 9876                 # RocketMQ remoting port (name server and broker at once, as RocketMQ 5's proxy); 0: any free one, -1: off
    remoting_advertised_port: int = 0         # port remoting routes name; 0: the bound remoting port
    remoting_group_ports: str = ""            # GROUP=PORT,...: a remoting port of its own per broker group, for 4.x clients (they name no bname: the port says the group); pyrmq up --groups sets it; unlisted groups: the main port with bname (5.x clients)
    remoting_workers: int = 64                # remoting door threads for requests that call the store (pulls waiting for messages hold none)
    store_address: str = "127.0.0.1:10911"    # the store service, host:port
    broker_name: str = "broker-a"             # Broker.name in routes and recall handles; with etcd_endpoints, the store replica set (broker group) followed
    etcd_endpoints: str = ""                  # etcd, comma-separated host:port; set: store calls go to the master of broker_name's replica set as etcd says (store_address unused)
    store_failover_timeout_ms: int = 5_000    # with etcd_endpoints: how long a store call a failover interrupted is retried on the new master
    cluster_name: str = "DefaultCluster"      # CLUSTER property written on every message
    grpc_workers_max: int = 128               # gRPC server threads (unary calls + open streams)
    grpc_max_concurrent_streams: int = 128    # calls one client connection may have open; beyond, refused at once (UNAVAILABLE, not processed); 0: no limit
    cpu_affinity: str = ""                    # CPUs the broker process runs on, as in taskset -c ("1", "0-1"); empty: any
    # Python's collector settings by default: a gRPC call that ends through an exception path
    # stays alive in a reference cycle (traceback -> frames -> the call) until a collection, and
    # holds its HTTP/2 stream meanwhile; with rare collections the grpc_max_concurrent_streams
    # cap wedged a client's connection while the store was down (tests/faults/test_kill_store.py).
    gc_gen0_threshold: int = 0                # net allocations between young garbage collections (Python: 700); start-up objects are frozen; 0: Python's defaults
    grpc_message_size_max_bytes: int = 16 * MIB  # inbound/outbound gRPC message limit (a 4 MiB body fits)
    telemetry_streams_max: int = 64           # open Telemetry streams (each holds a worker thread)
    store_connect_timeout_ms: int = 30_000    # at start-up, wait this long for the store to serve
    store_tls_ca_path: str = ""               # TLS to the store: the CA its certificate chains to (off when empty)
    store_tls_cert_path: str = ""             # client certificate for a store that requires one (mutual TLS)
    store_tls_key_path: str = ""              # its private key
    metrics_host: str = "127.0.0.1"           # Prometheus /metrics listen address (unauthenticated: loopback by default)
    metrics_port: int = 9102                  # Prometheus /metrics port; 0: any free one, -1: off
    log_level: str = "INFO"                   # DEBUG, INFO, WARNING or ERROR
    log_format: str = "text"                  # text: one line per event for people; json: one JSON object per line
    # -- security (ACL 2.0 users and policies, TLS; README.md, "Security") -----------------
    authentication_enabled: bool = False      # every client request must be signed by a user the store knows (authenticationEnabled)
    authorization_enabled: bool = False       # and its ACL must allow it; needs authentication (authorizationEnabled)
    init_authentication_user: str = ""        # USER:SECRET, created as a Super user at start if the store has no users (initAuthenticationUser)
    auth_max_clock_skew_s: int = 0            # replay window: refuse a signed date-time this far from the broker's clock; 0: not checked, as upstream
    auth_local_time_tolerant: bool = True     # measure that skew from the nearest time-zone offset (Java/Python clients send local time marked Z)
    auth_cache_ttl_ms: int = 3_000            # how long the store's users and ACLs are reused (another broker's change applies within it)
    tls_mode: str = "both"                    # client port: both (TLS and plaintext on the one port, as RocketMQ 5's proxy; HAProxy in front), tls or plaintext
    tls_cert_path: str = ""                   # PEM certificate chain for TLS connections (with tls_key_path); empty: a self-signed one pyrmq makes
    tls_key_path: str = ""                    # PEM private key of tls_cert_path
    data_dir: str = ""                        # the broker's own files: the self-signed certificate (tls/broker.crt, 0600), reused after restarts; empty: a new one in memory at each start
    front_binary: str = "haproxy"             # tls_mode both: the HAProxy executable (name on PATH or path)
    client_hello_timeout_ms: int = 10_000     # tls_mode both: a connection that has not begun TLS or HTTP/2 within this long is closed
    front_idle_timeout_ms: int = 3_600_000    # tls_mode both: a connection idle this long is closed (clients reconnect)
    # -- topics ----------------------------------------------------------------------------
    auto_create_topic_enable: bool = False    # QueryRoute and SendMessage create an unknown topic (autoCreateTopicEnable; --auto-create-topic); off: TOPIC_NOT_FOUND
    auto_create_topic_queue_nums: int = 8     # read and write queues of an auto-created topic
    auto_create_topic_message_type: str = "MIXED"  # message type of an auto-created topic (MIXED: any, so FIFO/DELAY/TRANSACTION sends work out of the box)
    topic_cache_ttl_ms: int = 3_000           # how long a topic config read from the store is reused
    topic_cache_miss_ttl_ms: int = 1_000      # how long "no such topic" is remembered (auto-create off)
    # -- send limits (ProxyConfig defaults) --------------------------------------------------
    body_size_max_bytes: int = 4 * MIB        # largest message body a producer may send (maxMessageSize; told to clients)
    user_property_count_max: int = 128        # user properties per message at most (userPropertyMaxNum)
    user_properties_size_max_bytes: int = 16 * 1024  # bytes of user property keys and values, tag and keys (maxUserPropertySize)
    message_group_size_max_bytes: int = 64    # a message group must be shorter than this (maxMessageGroupSize)
    # The proxy's maxDelayTimeMills. The scheduler's timer wheel rolls, so it takes any delay up to
    # its own timer_max_delay_ms (30 days): raise this one (at most that far) to let clients use more.
    delivery_delay_max_ms: int = 24 * 3_600_000  # how far ahead a delivery time may be (maxDelayTimeMills); farther: ILLEGAL_DELIVERY_TIME
    transaction_recovery_max_s: int = 3_600   # longest transaction recovery time a producer may ask for (maxTransactionRecoverySecond)
    timer_precision_ms: int = 1_000           # delivery times are rounded to this (timerPrecisionMs); must equal the scheduler's
    # -- the send path ---------------------------------------------------------------------
    send_timeout_ms: int = 3_000              # a SendMessage waits at most this long for its put
    store_rpc_timeout_ms: int = 5_000         # deadline of one PutMessages (or other) store call
    put_coalescing_enable: bool = True        # one PutMessages per batch of concurrent sends
    put_stream_enable: bool = True            # send those batches over one long-lived PutMessagesStream, not a unary call each
    put_batch_messages_max: int = 256         # messages per coalesced PutMessages
    put_batch_bytes_max: int = 16 * MIB       # body bytes per coalesced PutMessages
    put_queue_messages_max: int = 16_384      # sends waiting for the dispatcher; beyond: TOO_MANY_REQUESTS
    put_queue_bytes_max: int = 256 * MIB      # body bytes waiting for the dispatcher
    put_queue_wait_max_ms: int = 200          # a send waiting longer for a gRPC worker or for the store is refused TOO_MANY_REQUESTS, unsent (waitTimeMillsInSendQueue); 0: off
    # -- settings replied on Telemetry (GrpcClientSettingsManager) --------------------------
    producer_max_attempts: int = 3            # producers: attempts per send (told to clients)
    producer_backoff_initial_ms: int = 10     # producers: first retry backoff
    producer_backoff_max_ms: int = 1_000      # producers: longest retry backoff
    producer_backoff_multiplier: float = 2.0  # producers: backoff growth per attempt
    validate_message_type: bool = True        # refuse a message whose type the topic does not accept (enableTopicMessageTypeCheck)
    consumer_receive_batch_size: int = 32     # consumers: messages per receive at most (grpcClientConsumerMaxBatchSize)
    consumer_long_polling_timeout_ms: int = 20_000  # consumers: long-polling timeout told to clients
    consumer_retry_delays_ms: tuple[int, ...] = CONSUMER_RETRY_DELAYS_MS_DEFAULT  # consumers: redelivery backoff per attempt (1s,5s,10s,30s,1m ... 2h)
    lite_subscription_quota: int = 2_000      # lite consumers: lite topics one client may subscribe (told to clients; more: 42902)
    lite_subscription_expire_ms: int = 180_000  # lite consumers: a client's lite subscriptions end this long after its last sync
    # -- consumer limits (used by the consumer step) ----------------------------------------
    long_polling_timeout_ms_min: int = 5_000   # a receive's long-polling timeout is raised to at least this
    long_polling_timeout_ms_max: int = 20_000  # and cut to at most this
    invisible_duration_ms_min: int = 10_000    # shortest invisible duration a consumer may ask for
    invisible_duration_ms_max: int = 12 * 3_600_000  # longest invisible duration a consumer may ask for
    # -- push consumers: receipt-handle renewal and release (renewal.py; ProxyConfig) --------
    auto_renew_enable: bool = True            # renew the invisible time of messages received by push consumers (enableProxyAutoRenew)
    auto_renew_invisible_ms: int = 60_000     # invisible time of a receive with auto_renew and no invisible_duration (defaultInvisibleTimeMills)
    renew_ahead_ms: int = 10_000              # renew a handle this long before its invisible time ends (renewAheadTimeMillis)
    renew_slices_ms: tuple[int, ...] = RENEW_SLICES_MS_DEFAULT  # invisible time set by the 1st, 2nd ... renewal, the last repeated (RenewStrategyPolicy: 1m 3m 5m 10m 30m 1h)
    renew_max_ms: int = 3 * 3_600_000         # stop renewing this long after the receive, nacking with the retry delay (renewMaxTimeMillis)
    renew_scan_interval_ms: int = 5_000       # how often the renewer looks for handles to renew (renewSchedulePeriodMillis)
    renew_retry_max: int = 3                  # a renewal that cannot reach the store this many times in a row is abandoned (maxRenewRetryTimes)
    renew_handles_max: int = 1_000_000        # in-flight push deliveries tracked at most; beyond, a message is not renewed
    invisible_ms_when_clear: int = 1_000      # invisible time left to a departed client's in-flight messages (invisibleTimeMillisWhenClear)
    client_gone_grace_ms: int = 10_000        # a client without a Telemetry stream this long is gone: its messages are released
    client_silent_max_ms: int = 120_000       # so is a client whose stream sent no heartbeat or settings this long (channelExpiredTimeout)
    # fmt: on

    def __post_init__(self) -> None:
        if not -1 <= self.remoting_port <= 0xFFFF or not 0 <= self.remoting_advertised_port <= 0xFFFF:
            raise ValueError("remoting ports must be in [0, 65535] (remoting_port -1: off)")
        for name, port in self.remoting_group_port_map().items():
            if not name or not 0 <= port <= 0xFFFF:
                raise ValueError(f"remoting_group_ports: {name}={port} is not GROUP=PORT with a port in [0, 65535]")
        if self.remoting_workers < 1:
            raise ValueError("remoting_workers must be at least 1")
        if not 0 <= self.port <= 0xFFFF or not 0 <= self.advertised_port <= 0xFFFF:
            raise ValueError("ports must be in [0, 65535]")
        split_host_port(self.store_address)
        if self.auto_create_topic_message_type not in MESSAGE_TYPES:
            raise ValueError(f"auto_create_topic_message_type must be one of {MESSAGE_TYPES}")
        positive = ("grpc_workers_max", "telemetry_streams_max", "auto_create_topic_queue_nums",
                    "body_size_max_bytes", "send_timeout_ms", "store_rpc_timeout_ms",
                    "put_batch_messages_max", "put_batch_bytes_max", "put_queue_messages_max",
                    "put_queue_bytes_max", "timer_precision_ms", "producer_max_attempts",
                    "lite_subscription_quota", "lite_subscription_expire_ms")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.grpc_max_concurrent_streams < 0:
            raise ValueError("grpc_max_concurrent_streams must not be negative (0: no limit)")
        parse_cpu_list(self.cpu_affinity)  # ValueError if malformed
        if self.gc_gen0_threshold < 0:
            raise ValueError("gc_gen0_threshold must not be negative")
        # Streams hold a worker thread for their lifetime: leave workers for unary calls.
        if self.telemetry_streams_max > self.grpc_workers_max // 2:
            raise ValueError("telemetry_streams_max must be at most half of grpc_workers_max")
        # A message of the largest body must fit one gRPC message and one store batch.
        if self.grpc_message_size_max_bytes < self.body_size_max_bytes + MIB:
            raise ValueError("grpc_message_size_max_bytes must exceed body_size_max_bytes by 1 MiB")
        if self.authorization_enabled and not self.authentication_enabled:
            raise ValueError("authorization_enabled needs authentication_enabled (an unverified user could be anyone)")
        if self.init_authentication_user and ":" not in self.init_authentication_user:
            raise ValueError("init_authentication_user must be USER:SECRET")
        if bool(self.tls_cert_path) != bool(self.tls_key_path):
            raise ValueError("tls_cert_path and tls_key_path go together")
        if self.tls_mode not in TLS_MODES:
            raise ValueError(f"tls_mode must be one of {TLS_MODES}")
        if self.client_hello_timeout_ms <= 0 or self.front_idle_timeout_ms <= 0:
            raise ValueError("client_hello_timeout_ms and front_idle_timeout_ms must be positive")
        self._check_renewal()
        if self.put_batch_bytes_max < self.body_size_max_bytes:
            raise ValueError("put_batch_bytes_max must hold one message of the largest body")

    def _check_renewal(self) -> None:
        positive = ("auto_renew_invisible_ms", "renew_ahead_ms", "renew_max_ms", "renew_scan_interval_ms",
                    "renew_retry_max", "renew_handles_max", "client_gone_grace_ms", "client_silent_max_ms")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if not self.renew_slices_ms or min(self.renew_slices_ms) <= 0:
            raise ValueError("renew_slices_ms must be positive durations")
        if self.invisible_ms_when_clear < 0:
            raise ValueError("invisible_ms_when_clear must not be negative")
        # A scan must come round while a handle is in its renew-ahead window, and a renewal must
        # leave the handle outside that window, or every scan would renew it again.
        if self.renew_scan_interval_ms >= self.renew_ahead_ms:
            raise ValueError("renew_scan_interval_ms must be shorter than renew_ahead_ms")
        if min(self.renew_slices_ms + (self.auto_renew_invisible_ms,)) <= self.renew_ahead_ms:
            raise ValueError("renew_slices_ms and auto_renew_invisible_ms must exceed renew_ahead_ms")
        if max(self.renew_slices_ms + (self.auto_renew_invisible_ms,)) > self.invisible_duration_ms_max:
            raise ValueError("renew_slices_ms and auto_renew_invisible_ms must not exceed invisible_duration_ms_max")

    def remoting_group_port_map(self) -> dict[str, int]:
        """``remoting_group_ports`` as {broker group: port}; ValueError if malformed."""
        ports = {}
        for item in filter(None, (part.strip() for part in self.remoting_group_ports.split(","))):
            name, sep, port = item.partition("=")
            if not sep or not port.strip().isdigit():
                raise ValueError(f"remoting_group_ports: {item!r} is not GROUP=PORT")
            ports[name.strip()] = int(port)
        return ports

    def advertised_endpoint(self, bound_port: int) -> tuple[str, int]:
        """(host, port) that routes tell clients to connect to."""
        host = self.advertised_host or ("127.0.0.1" if self.host in WILDCARD_HOSTS else self.host)
        return host, self.advertised_port or bound_port


def split_host_port(address: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> (host, port); ValueError if malformed."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) <= 0xFFFF:
        raise ValueError(f"address must be host:port, got {address!r}")
    return host.strip("[]"), int(port_text)


def address_scheme(host: str) -> str:
    """"IPv4", "IPv6" or "DOMAIN_NAME": the v2 AddressScheme of a route endpoint host."""
    try:
        return "IPv4" if ipaddress.ip_address(host).version == 4 else "IPv6"
    except ValueError:
        return "DOMAIN_NAME"


# The settings of ``python -m services.broker`` (services/runtime/settings.py): every BrokerConfig field.
SETTINGS = settings_of(BrokerConfig, flags={
    **{name: "--" + name.replace("_", "-") for name in (
        "host", "port", "store_address", "metrics_host", "metrics_port", "advertised_host", "broker_name", "tls_mode", "data_dir",
        "store_connect_timeout_ms", "etcd_endpoints", "remoting_port")},
    "auto_create_topic_message_type": "--auto-create-topic-type"})
