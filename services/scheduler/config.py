"""SchedulerConfig: every setting of the scheduler service, with its default, in one frozen class.

Units are in the names (docs/conventions.md, rule 6). RocketMQ 5's defaults where it has one
(``MessageStoreConfig``: timerPrecisionMs 1000, mappedFileSizeTimerLog 100 MiB,
timerRollWindowSlots 172800, timerFlushIntervalMs 1000, messageDelayLevel; ``TimerWheel``:
7 days x 86400 slots). Built from the command line only in ``__main__``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.domain.delay_levels import DELAY_LEVELS_DEFAULT, parse_delay_levels
from services.domain.format.delaycheck_format import LEVELS_MAX
from services.domain.format.timerlog_format import BLANK_SIZE_BYTES, UNIT_SIZE_BYTES
from services.domain.format.timerwheel_format import SLOTS_TOTAL_DEFAULT
from services.runtime.process import parse_cpu_list
from services.runtime.settings import REQUIRED, Setting, settings_of

DAY_MS = 86_400_000
MIB = 1 << 20


# A settings table: each field's aligned comment is its documentation (services/runtime/settings.py).
# fmt: off
@dataclass(frozen=True)
class SchedulerConfig:
    root: Path                                    # <data-dir>/scheduler: timerlog/, timerwheel, config/
    store_address: str = "127.0.0.1:10911"        # the store service, host:port
    etcd_endpoints: str = ""                      # etcd, comma-separated host:port; set: store calls go to the master of broker_name's replica set as etcd says (store_address unused)
    broker_name: str = "broker-a"                 # with etcd_endpoints: the store replica set (broker group) followed
    store_failover_timeout_ms: int = 5_000        # with etcd_endpoints: how long a store call a failover interrupted is retried on the new master
    host: str = "127.0.0.1"                       # gRPC (health) listen address
    port: int = 10915                             # gRPC (health) port; 0: any free one
    metrics_host: str = "127.0.0.1"               # Prometheus /metrics listen address (unauthenticated: loopback by default)
    metrics_port: int = 9103                      # Prometheus /metrics port; 0: any free one, -1: off
    log_level: str = "INFO"                       # DEBUG, INFO, WARNING or ERROR
    log_format: str = "text"                      # text: one line per event for people; json: one JSON object per line
    cpu_affinity: str = ""                        # CPUs the scheduler process runs on, as in taskset -c ("2", "2-3"); empty: any
    store_connect_timeout_ms: int = 30_000        # at start-up, give up if the store does not serve within this time
    store_tls_ca_path: str = ""                   # TLS to the store: the CA its certificate chains to (off when empty)
    store_tls_cert_path: str = ""                 # client certificate for a store that requires one (mutual TLS)
    store_tls_key_path: str = ""                  # its private key
    lock_wait_ms: int = 10_000                    # at start-up, wait this long for a scheduler that still holds the directory
    store_rpc_timeout_ms: int = 10_000            # deadline of one store call
    store_retry_backoff_ms: int = 500             # wait after a failed store call
    # -- timer wheel (RocketMQ 5 timer messages) --------------------------------------------
    timer_precision_ms: int = 1_000               # timerPrecisionMs: one wheel slot; equal to the broker's
    timer_wheel_slots: int = SLOTS_TOTAL_DEFAULT  # slots per window; the file holds two windows
    timer_roll_window_slots: int = 172_800        # timerRollWindowSlots: farther timers are rolled
    timer_max_delay_ms: int = 30 * DAY_MS         # timers farther ahead at enqueue are dropped (counted)
    timerlog_file_size_bytes: int = 100 * MIB     # mappedFileSizeTimerLog
    timer_flush_interval_ms: int = 1_000          # timerFlushIntervalMs: fdatasync + checkpoint
    timer_lookahead_ms: int = 200                 # read a slot's units this long before it starts
    timer_recall_guard_ms: int = 50               # deliver a slot's units only once every recall put
    #                                               accepted before the slot began (+ this) is enqueued
    store_dispatch_margin_ms: int = 20            # a message appended this long ago is in its ConsumeQueue
    timer_enqueue_batch_messages: int = 1_024     # rmq_sys_wheel_timer messages per GetMessages
    timer_delivery_batch_messages: int = 256      # units per LookMessages + PutMessages
    timer_delivery_interval_ms: int = 10          # due units are put at most this often (batches; lateness)
    timer_active_units_max: int = 200_000         # units held in memory for the slots being delivered
    timerlog_cleanup_interval_ms: int = 60_000    # how often fully delivered TimerLog segments are deleted
    timer_snapshot_interval_ms: int = 5_000       # how often the wheel's per-bucket counts (rocketmq_timer_message_snapshot) are taken
    # -- delay levels (SCHEDULE_TOPIC_XXXX) ----------------------------------------------------
    delay_levels: str = DELAY_LEVELS_DEFAULT      # messageDelayLevel; must match the store's
    delay_batch_messages: int = 64                # due messages of one level per PutMessages
    # -- loops ---------------------------------------------------------------------------------
    poll_interval_ms: int = 10                    # while units wait for the enqueue to catch up
    idle_poll_interval_ms: int = 500              # with nothing to do (store arrivals wake it earlier)
    # fmt: on

    def __post_init__(self) -> None:
        positive = ("store_rpc_timeout_ms", "store_retry_backoff_ms", "timer_precision_ms", "timer_wheel_slots",
                    "timer_roll_window_slots", "timer_max_delay_ms", "timerlog_file_size_bytes",
                    "timer_flush_interval_ms", "timer_enqueue_batch_messages", "timer_delivery_batch_messages",
                    "timer_active_units_max", "timerlog_cleanup_interval_ms", "timer_snapshot_interval_ms",
                    "delay_batch_messages",
                    "poll_interval_ms", "idle_poll_interval_ms")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        for name in ("timer_lookahead_ms", "timer_recall_guard_ms", "store_dispatch_margin_ms",
                     "timer_delivery_interval_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")
        parse_cpu_list(self.cpu_affinity)  # ValueError if malformed
        # A rolled unit is parked at most one roll window ahead; the ring must hold that plus
        # the slots still being delivered, or a new unit would overwrite an undelivered slot.
        if self.timer_roll_window_slots * 2 > self.timer_wheel_slots:
            raise ValueError("timer_roll_window_slots must be at most half of timer_wheel_slots")
        # The unit's delay field is an int32 of ms: a roll window must fit.
        if self.timer_roll_window_slots * self.timer_precision_ms >= 1 << 31:
            raise ValueError("timer_roll_window_slots x timer_precision_ms must stay below 2^31 ms")
        if self.timerlog_file_size_bytes < 16 * (UNIT_SIZE_BYTES + BLANK_SIZE_BYTES):
            raise ValueError("timerlog_file_size_bytes is too small")
        if self.timer_lookahead_ms >= self.timer_precision_ms:
            raise ValueError("timer_lookahead_ms must be below timer_precision_ms")
        levels = self.delay_level_ms
        if not levels or len(levels) > LEVELS_MAX or any(ms <= 0 for ms in levels):
            raise ValueError(f"delay_levels must name 1..{LEVELS_MAX} positive delays")

    @property
    def delay_level_ms(self) -> tuple[int, ...]:
        try:
            return parse_delay_levels(self.delay_levels)
        except (KeyError, ValueError, IndexError) as exc:
            raise ValueError(f"bad delay_levels {self.delay_levels!r}") from exc

    @property
    def timerlog_dir(self) -> Path:
        return self.root / "timerlog"

    @property
    def timerwheel_path(self) -> Path:
        return self.root / "timerwheel"

    @property
    def timercheck_path(self) -> Path:
        return self.root / "config" / "timercheck"

    @property
    def timermetrics_path(self) -> Path:
        return self.root / "config" / "timermetrics"

    @property
    def delaycheck_path(self) -> Path:
        return self.root / "config" / "delaycheck"

    @property
    def lock_path(self) -> Path:
        return self.root / "lock"

    @property
    def roll_window_ms(self) -> int:
        return self.timer_roll_window_slots * self.timer_precision_ms

    @property
    def wheel_span_ms(self) -> int:
        """Time the whole ring covers (two windows)."""
        return 2 * self.timer_wheel_slots * self.timer_precision_ms


# The settings of ``python -m services.scheduler`` (services/runtime/settings.py): SchedulerConfig's
# fields with data_dir in place of root (DATA_DIR/scheduler).
SETTINGS = settings_of(
    SchedulerConfig, exclude=("root",),
    extra=(Setting("data_dir", Path, REQUIRED,
                   "data directory shared with the store; the scheduler's files are in DATA_DIR/scheduler"),),
    flags={name: "--" + name.replace("_", "-") for name in (
        "data_dir", "store_address", "etcd_endpoints", "broker_name", "host", "port", "metrics_host", "metrics_port", "store_connect_timeout_ms",
        "lock_wait_ms", "timer_precision_ms", "timer_max_delay_ms", "timerlog_file_size_bytes", "delay_levels")})


def config_from_settings(values: dict[str, Any]) -> SchedulerConfig:
    """SchedulerConfig from resolved SETTINGS values."""
    values = dict(values)
    return SchedulerConfig(root=Path(values.pop("data_dir")).resolve() / "scheduler", **values)
