"""StoreConfig: every setting of the store service, with its default, in one frozen class."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.domain.delay_levels import DELAY_LEVELS_DEFAULT, parse_delay_levels
from services.domain.format.commitlog_format import BLANK_RECORD_SIZE_BYTES, BODY_SIZE_MAX_BYTES
from services.domain.format.consume_queue_format import CQ_UNITS_PER_FILE
from services.runtime.process import parse_cpu_list
from services.runtime.settings import REQUIRED, Setting, settings_of


class FlushMode(enum.Enum):
    ASYNC = "ASYNC_FLUSH"  # flush every flush_interval_ms; a put returns once in the page cache
    SYNC = "SYNC_FLUSH"  # a put returns only after an fdatasync that covers it (group commit)


class BrokerRole(enum.Enum):
    """The replica's role (RocketMQ's brokerRole; services/store/ha/)."""

    ASYNC_MASTER = "ASYNC_MASTER"  # takes writes; a put returns without waiting for slaves
    SYNC_MASTER = "SYNC_MASTER"  # takes writes; a put returns once in_sync_replicas - 1 slaves confirmed it
    SLAVE = "SLAVE"  # refuses writes; copies the master at ha_master_address


class ConsumeInitMode(enum.Enum):
    """Where a consumer group new to a queue starts (RocketMQ's ConsumeInitMode; pop/consume_init.py)."""

    MIN = 0  # the queue's min offset: everything retention left
    MAX = 1  # the queue's last message, or offset 0 if the queue's first message is still in memory


# A settings table: each field's aligned comment is its documentation (services/runtime/settings.py).
# fmt: off
@dataclass(frozen=True)
class StoreConfig:
    store_root: Path                                  # RocketMQ's storePathRootDir (…/store)
    # -- the process -------------------------------------------------------------------------
    host: str = "127.0.0.1"                           # gRPC listen address
    port: int = 10911                                 # gRPC port; 0: any free one
    metrics_host: str = "127.0.0.1"                   # Prometheus /metrics listen address (unauthenticated: loopback by default)
    metrics_port: int = 9101                          # Prometheus /metrics port; 0: any free one, -1: off
    tls_cert_path: str = ""                           # PEM certificate: the store port serves TLS only (with tls_key_path)
    tls_key_path: str = ""                            # PEM private key of tls_cert_path
    tls_client_ca_path: str = ""                      # with TLS: require client certificates signed by this CA (mutual TLS)
    lock_wait_ms: int = 10_000                        # at start-up, wait this long for a store that still holds the directory's lock (one killed a moment ago)
    log_level: str = "INFO"                           # DEBUG, INFO, WARNING or ERROR
    log_format: str = "text"                          # text: one line per event for people; json: one JSON object per line
    # -- files -------------------------------------------------------------------------------
    commitlog_file_size_bytes: int = 1 << 30          # size of one CommitLog segment file (mappedFileSizeCommitLog)
    consume_queue_units_per_file: int = CQ_UNITS_PER_FILE  # 20-byte units per ConsumeQueue file (300,000)
    flush_mode: FlushMode = FlushMode.ASYNC           # ASYNC: flush every interval, a put returns from the page cache; SYNC: a put returns after fdatasync (flushDiskType)
    flush_interval_ms: int = 500                      # ASYNC: how often the CommitLog is flushed (flushIntervalCommitLog)
    flush_least_pages: int = 4                        # ASYNC: flush only once this many 4 KiB pages are dirty (flushCommitLogLeastPages)
    flush_thorough_interval_ms: int = 10_000          # ASYNC: flush whatever is dirty at least this often (flushCommitLogThoroughInterval)
    sync_flush_timeout_ms: int = 5_000                # SYNC: a put whose flush takes longer answers FLUSH_DISK_TIMEOUT (syncFlushTimeout)
    flush_consume_queue_interval_ms: int = 1_000      # how often ConsumeQueue and IndexFile are flushed (flushIntervalConsumeQueue)
    checkpoint_interval_ms: int = 1_000               # how often the checkpoint file is written
    flush_consumer_offset_interval_ms: int = 5_000    # how often consumer offsets are written to consumerOffset.json (flushConsumerOffsetInterval)
    transaction_metric_flush_interval_ms: int = 10_000  # how often the open-transaction counts are written to config/transactionMetrics (transactionMetricFlushInterval)
    body_size_max_bytes: int = BODY_SIZE_MAX_BYTES    # largest message body the store accepts (maxMessageSize)
    check_crc_on_recover: bool = True                 # recovery checks each record's body CRC (checkCRCOnRecover)
    append_prop_crc: bool = True                      # append a whole-record CRC property to every record (enabledAppendPropCRC)
    allow_truncate_corrupt: bool = False              # recovery may drop a damaged record that valid ones follow (else it refuses to start)
    message_index_enable: bool = True                 # build the IndexFile (lookups by key and id) (messageIndexEnable)
    index_hash_slot_num: int = 5_000_000              # hash slots per IndexFile (maxHashSlotNum)
    index_num_max: int = 20_000_000                   # entries per IndexFile (maxIndexNum)
    lite_expiry_interval_ms: int = 120_000            # how often idle lite topics past their parent's lite.topic.expiration are removed
    lite_index_map_size_bytes: int = 1 << 40          # the lite index's LMDB map: address space reserved, not disk (lite/data.mdb grows as used)
    lite_topics_max: int = 0                          # lite topics the store holds at most: a message starting another is refused (LITE_TOPIC_QUOTA_EXCEEDED); 0: no limit (RocketMQ's maxLmqConsumeQueueNum with enableLmqQuota)
    file_reserved_time_hours: float = 72.0            # CommitLog segments older than this are deleted (fileReservedTime)
    disk_max_used_space_ratio: float = 0.75           # above this disk use, expired files are deleted early (diskMaxUsedSpaceRatio)
    disk_space_clean_forcibly_ratio: float = 0.85     # above this disk use, even unexpired files are deleted (oldest first)
    disk_space_warning_level_ratio: float = 0.90      # above this disk use, puts are refused
    clean_resource_interval_ms: int = 10_000          # how often retention runs (cleanResourceInterval)
    delete_file_batch_max: int = 10                   # segments deleted per retention pass at most (deleteFileBatchMax)
    delay_levels: str = DELAY_LEVELS_DEFAULT          # the delay levels, level N is the Nth (messageDelayLevel); must match the scheduler's
    auto_create_topic_enable: bool = True             # a put to an unknown topic creates it (autoCreateTopicEnable)
    default_topic_queue_nums: int = 8                 # queues of an auto-created topic (defaultTopicQueueNums)
    consume_init_mode: ConsumeInitMode = ConsumeInitMode.MAX  # where a group new to a queue starts: MAX its last message (its first if still in memory), MIN its min offset (ConsumeInitMode; RocketMQ's proxy pops with MAX)
    init_pop_offset_by_check_msg_in_mem: bool = True  # MAX: a queue whose first message (offset 0) is still in memory starts at 0 instead (initPopOffsetByCheckMsgInMem)
    pop_journal_enable: bool = True                   # record the pop engine's state (in-flight deliveries, acks, offsets) in the CommitLog (rmq_sys_POP_JOURNAL), so a failover or restart keeps it: services/store/pop/journal.py
    access_message_in_memory_max_ratio: float = 0.40  # "in memory": within this fraction of physical memory of the CommitLog's end (accessMessageInMemoryMaxRatio, 40 %)
    store_host: str = "127.0.0.1:10911"               # host:port written into every record (offset message ids)
    broker_name: str = "broker-a"                     # the broker name (brokerName) in routes, metrics and message ids
    cluster_name: str = "DefaultCluster"              # the cluster name (brokerClusterName), a label of every metric
    # Pre-fault new segments through the mapping (RocketMQ's warmMappedFile). Off by default:
    # measured here, warming a 1 GiB segment takes 1.7 s of page faults under the GIL, stalling
    # puts; segments are fallocate'd instead (1 ms), which already avoids SIGBUS on a full disk.
    warm_mapped_files: bool = False                   # pre-fault each new CommitLog segment (warmMappedFile); off: fallocate only
    # A thread keeps the CommitLog's pages populated this far ahead of the writer, off the GIL
    # (measured here: 1-6 ms per 4 MiB, ~1.5 us per 1 KiB message the writer no longer spends).
    warm_ahead_bytes: int = 16 << 20                  # CommitLog pages populated ahead of the write position by the warm-ahead thread; 0: the writer populates
    cpu_affinity: str = ""                            # CPUs the store process runs on, as in taskset -c ("0", "0-1"); empty: any
    # -- replication (services/store/ha/; static roles until the controller assigns them) -----
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER  # ASYNC_MASTER, SYNC_MASTER or SLAVE (brokerRole)
    replica_id: int = 0                               # this replica's id within its broker group (brokerId)
    ha_master_address: str = ""                       # SLAVE: the master's store gRPC address, host:port (haMasterAddress)
    ha_send_heartbeat_interval_ms: int = 1_000        # SLAVE: report its offsets at least this often; master: send a heartbeat this often when idle (haSendHeartbeatInterval)
    ha_housekeeping_interval_ms: int = 20_000         # either end drops a replication stream silent this long (a stopped or cut peer) (haHousekeepingInterval)
    ha_reconnect_interval_max_ms: int = 5_000         # SLAVE: longest pause between reconnections to the master (the backoff doubles from 100 ms)
    ha_tls_ca_path: str = ""                          # SLAVE: reach the master over TLS, trusting this CA (the group's stores serve TLS: tls_cert_path), presenting this store's tls_cert_path as client certificate (a master with tls_client_ca_path needs it); empty: plaintext
    ha_transfer_batch_size_bytes: int = 1 << 20       # master: CommitLog bytes per chunk sent to a slave, at most (haTransferBatchSize)
    ha_config_sync_interval_ms: int = 200             # master: how often each slave's stream checks the config/ tables (topics, groups, consumer and delay offsets, users) and sends those changed (RocketMQ's slaves pull them every 10 s: SlaveSynchronize)
    in_sync_replicas: int = 2                         # SYNC_MASTER: replicas, the master included, that must hold a put before it is acknowledged (inSyncReplicas)
    sync_replicas_timeout_ms: int = 5_000             # SYNC_MASTER: a put the slaves do not confirm in time answers FLUSH_SLAVE_TIMEOUT (RocketMQ uses syncFlushTimeout)
    # -- controller mode (enableControllerMode): roles from etcd; broker_role then only says ASYNC or SYNC as master --
    etcd_endpoints: str = ""                          # etcd endpoints, comma-separated host:port; set: controller mode (roles elected through etcd), empty: static broker_role (controllerAddr)
    advertised_host: str = ""                         # controller mode: the host other replicas, brokers and helpers reach this store at, registered in etcd with port (a name such as a compose service's is allowed); "": store_host's
    lease_ttl_ms: int = 2_000                         # controller mode: TTL of this replica's etcd lease; a dead master is replaced about this long after its last keepalive
    min_in_sync_replicas: int = 1                     # controller mode: a master refuses puts with HA_NOT_AVAILABLE while its SyncStateSet is smaller (minInSyncReplicas)
    all_ack_in_sync_state_set: bool = True            # controller mode, SYNC_MASTER: a put waits for every member of the SyncStateSet instead of in_sync_replicas - 1 slaves (allAckInSyncStateSet; RocketMQ's default is false)
    ha_max_time_slave_not_catchup_ms: int = 15_000    # controller mode: a slave not caught up this long leaves the SyncStateSet (haMaxTimeSlaveNotCatchup)
    unclean_election_enable: bool = False             # controller mode: elect a replica outside the SyncStateSet when none in it is alive (may lose acknowledged messages) (enableElectUncleanMaster)
    gc_gen0_threshold: int = 10_000                   # net allocations between young garbage collections (Python: 700); start-up objects are frozen; 0: Python's defaults
    # fmt: on

    def __post_init__(self) -> None:
        object.__setattr__(self, "store_root", Path(self.store_root))
        # A segment must hold the largest record plus the blank end-of-file record.
        if self.commitlog_file_size_bytes < 4096:
            raise ValueError("commitlog_file_size_bytes must be at least 4096")
        if self.consume_queue_units_per_file <= 0:
            raise ValueError("consume_queue_units_per_file must be positive")
        if self.lite_topics_max < 0:
            raise ValueError("lite_topics_max must not be negative (0: no limit)")
        if not 0 < self.disk_max_used_space_ratio <= 1:
            raise ValueError("disk_max_used_space_ratio must be in (0, 1]")
        if min(
            self.flush_interval_ms,
            self.sync_flush_timeout_ms,
            self.flush_consumer_offset_interval_ms,
            self.transaction_metric_flush_interval_ms,
        ) <= 0:
            raise ValueError("flush intervals and timeouts must be positive")
        parse_cpu_list(self.cpu_affinity)  # ValueError if malformed
        if not 0 <= self.access_message_in_memory_max_ratio <= 1:
            raise ValueError("access_message_in_memory_max_ratio must be in [0, 1]")
        if self.broker_role is BrokerRole.SLAVE and not self.ha_master_address:
            raise ValueError("broker_role SLAVE needs ha_master_address")
        if min(
            self.ha_send_heartbeat_interval_ms,
            self.ha_reconnect_interval_max_ms,
            self.sync_replicas_timeout_ms,
            self.ha_config_sync_interval_ms,
        ) <= 0:
            raise ValueError("ha intervals and timeouts must be positive")
        if self.ha_housekeeping_interval_ms <= self.ha_send_heartbeat_interval_ms:
            raise ValueError("ha_housekeeping_interval_ms must exceed ha_send_heartbeat_interval_ms")
        if self.ha_transfer_batch_size_bytes < 4096 or self.in_sync_replicas < 1:
            raise ValueError("ha_transfer_batch_size_bytes must be at least 4096 and in_sync_replicas at least 1")
        if self.etcd_endpoints and self.broker_role is BrokerRole.SLAVE:
            raise ValueError("with etcd_endpoints the controller assigns roles: broker_role is ASYNC_MASTER or SYNC_MASTER")
        if self.etcd_endpoints and (self.port == 0 or self.registered_address.endswith(":0")):
            raise ValueError(
                "with etcd_endpoints the replica registers its address before it binds: give it a fixed port "
                "(pyrmq up --store-port 0 picks free ones itself)"
            )
        if self.lease_ttl_ms < 1000 or self.min_in_sync_replicas < 1:
            raise ValueError("lease_ttl_ms must be at least 1000 and min_in_sync_replicas at least 1")
        if self.gc_gen0_threshold < 0 or self.warm_ahead_bytes < 0:
            raise ValueError("gc_gen0_threshold and warm_ahead_bytes must not be negative")

    @property
    def registered_address(self) -> str:
        """The address this replica registers in etcd (what the group's master is reached at):
        ``advertised_host:port``, else store_host, which must be an IP (it is in every record)."""
        if not self.advertised_host:
            return self.store_host
        host = f"[{self.advertised_host}]" if ":" in self.advertised_host else self.advertised_host
        return f"{host}:{self.port}"

    @property
    def record_size_max_bytes(self) -> int:
        """A whole record may be at most the body limit plus 64 KiB (RocketMQ's rule)."""
        return self.body_size_max_bytes + 64 * 1024

    @property
    def delay_level_millis(self) -> tuple[int, ...]:
        return parse_delay_levels(self.delay_levels)

    # Store-root layout, identical to RocketMQ's.
    @property
    def commitlog_dir(self) -> Path:
        return self.store_root / "commitlog"

    @property
    def consume_queue_dir(self) -> Path:
        return self.store_root / "consumequeue"

    @property
    def index_dir(self) -> Path:
        return self.store_root / "index"

    @property
    def lite_index_dir(self) -> Path:
        return self.store_root / "lite"

    @property
    def config_dir(self) -> Path:
        return self.store_root / "config"

    @property
    def checkpoint_path(self) -> Path:
        return self.store_root / "checkpoint"

    @property
    def abort_path(self) -> Path:
        return self.store_root / "abort"

    @property
    def lock_path(self) -> Path:
        return self.store_root / "lock"


assert BLANK_RECORD_SIZE_BYTES == 8

WILDCARD_HOSTS = ("", "0.0.0.0", "::")
# The settings of ``python -m services.store`` (services/runtime/settings.py): StoreConfig's fields, with
# data_dir in place of store_root (DATA_DIR/store) and store_host derived from host and port.
SETTINGS = settings_of(
    StoreConfig, exclude=("store_root", "store_host"),
    extra=(Setting("data_dir", Path, REQUIRED,
                   "data directory shared by the store and the scheduler; the store's files are in DATA_DIR/store"),),
    flags={name: "--" + name.replace("_", "-") for name in (
        "data_dir", "host", "port", "metrics_host", "metrics_port", "lock_wait_ms", "flush_mode",
        "commitlog_file_size_bytes")})


def config_from_settings(values: dict[str, Any]) -> StoreConfig:
    """StoreConfig from resolved SETTINGS values."""
    values = dict(values)
    data_dir = Path(values.pop("data_dir")).resolve()
    advertised = "127.0.0.1" if values["host"] in WILDCARD_HOSTS else values["host"]
    store_host = f"[{advertised}]:{values['port']}" if ":" in advertised else f"{advertised}:{values['port']}"
    return StoreConfig(store_root=data_dir / "store", store_host=store_host, **values)
