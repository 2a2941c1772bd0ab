"""``make chaos`` (issue 30): a long, seeded, randomized fault schedule over a replica group under
load, ending with the checker's report.

    python -m tests.faults.chaos --minutes 20 --seed N [--cluster local|hosts] [--faults kill-master,...]

1. Builds the cluster (tests/faults/chaos_clusters.py): ``local`` is one host's processes (3 etcd
   members, 3 store replicas in controller mode with 2 s leases, SYNC_MASTER all-ack, a broker,
   the scheduler) with the faults of tests/faults/process_faults.py; ``hosts`` is the network
   namespace cluster of tests/faults/hosts_cluster.py (3 etcd members, 3 replicas, 2 brokers)
   with the nemesis of tests/faults/nemesis.py: the default when this machine can make
   namespaces (root, ip, nft).
2. Records the group's election history from an etcd watch (``RoleRecorder``: History.role).
3. Runs the load, every client in this (the root) namespace, all recording into one History
   (tests/faults/checker.py): tests/faults/workload.py's v2 producers (NORMAL, and FIFO over
   message groups) and consumers through services/v2client, a DELAY producer and consumer
   (messages 1-5 s ahead), and the
   official rocketmq-python-client, a producer and a SimpleConsumer (tests/faults/official_load.py).
4. Runs the schedule (tests/faults/schedule.py) for the duration: seeded (the seed is printed
   first; ``PYRMQ_CHAOS_SEED`` or ``--seed`` replays the plan), each fault window waiting until
   every replica is in sync, everything healed at the end.
5. Stops sending, drains (every acked message delivered, every delivered one acked), checks the
   History against ``Bounds`` and prints the report as a table. Exits 1 on any violation, a
   schedule or load error, or a drain that did not finish; the work directory (and the cluster's
   logs, in ``cluster.log``) is then kept and named.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from apache.rocketmq.v2 import definition_pb2 as d

from services.coordination.group_keys import GroupKeys
from services.coordination.group_state import GroupState
from services.coordination.role_view import RoleView
from services.runtime.etcd.rpc.client import EtcdClient
from services.v2client.client import BrokerCallError, V2Client
from tests.faults.chaos_clusters import (
    DELAY_GROUP,
    DELAY_TOPIC,
    ChaosCluster,
    hosts_chaos_cluster,
    hosts_missing,
    local_chaos_cluster,
)
from tests.faults.checker import INFO, Bounds, History, Report, classify_code
from tests.faults.official_load import OfficialConsumer, OfficialProducer
from tests.faults.replica_cluster import ReplicaCluster
from tests.faults.schedule import Schedule, ScheduleConfig, chaos_seed
from tests.faults.workload import Workload, WorkloadConfig
from tests.support.components import missing
from tests.support.fault_runs import wait_first_ok

log = logging.getLogger(__name__)

FIRST_OK_TIMEOUT_S = 60.0  # the first send acknowledged once the load starts, and again after the schedule
PROGRESS_EVERY_S = 60.0


@dataclass(frozen=True)
class ChaosOptions:
    duration_s: float = 1200.0  # the schedule's length (make chaos: CHAOS_MINUTES, 20)
    seed: int = 0
    faults: tuple[str, ...] = ()  # empty: the cluster's defaults
    quiet_s: tuple[float, float] = (5.0, 15.0)
    fault_s: tuple[float, float] = (3.0, 10.0)
    combine_ratio: float = 0.25
    fault_windows_max: int | None = None
    official_clients: bool = True  # a producer and a consumer through the official Python client
    delay_load: bool = True  # DELAY messages 1-5 s ahead
    ready_timeout_s: float = 40.0  # before a fault window: every replica in sync, at most this long
    drain_timeout_s: float = 90.0
    bounds: Bounds = field(default_factory=Bounds)
    progress_every_s: float = PROGRESS_EVERY_S


# -- the election history


class RoleRecorder:
    """The group's live master and masterEpoch, as an etcd watch sees them, into History.role."""

    def __init__(self, etcd_endpoints: list[str], group: str, history: History) -> None:
        self.history = history
        self.etcd = EtcdClient(etcd_endpoints, timeout_s=5.0, attempt_timeout_s=1.0)
        self.view = RoleView(self.etcd, GroupKeys(group))
        self.view.add_listener(lambda _old, new: self.record(new))
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self.view.follow, args=(self._stopping,), name="chaos-roles", daemon=True
        )

    def start(self, timeout_s: float = 10.0) -> RoleRecorder:
        self._thread.start()
        if not self.view.loaded.wait(timeout_s):
            raise AssertionError(f"the group's keys not read from etcd in {timeout_s} s")
        self.record(self.view.state)
        return self

    def record(self, state: GroupState) -> None:
        self.history.role(ReplicaCluster.live_master(state), state.master_epoch)

    def stop(self) -> None:
        self._stopping.set()
        self.view.stop()
        self._thread.join(5)
        self.etcd.close()


# -- the load


class AckRecordingClient(V2Client):
    """A V2Client whose refused acks that may have taken effect anyway are recorded as maybe acked
    (``History.consumer_ack_unknown``): the broker retries an ack on the new master when the old
    one failed under it (services/store/client/master.py ``_retry``), and the new master answers
    INVALID_RECEIPT_HANDLE for a handle of the old term, whether or not the first attempt was
    applied; such a message need not come back. So does every indeterminate code (``info``)."""

    history: History

    def ack(self, group: str, topic: str, messages: Sequence[d.Message]) -> None:
        try:
            super().ack(group, topic, messages)
        except BrokerCallError as exc:
            if exc.code == d.INVALID_RECEIPT_HANDLE or classify_code(exc.code) == INFO:
                self.history.consumer_ack_unknown([m.system_properties.message_id for m in messages])
            raise


@dataclass
class ChaosWorkload(Workload):
    """tests/faults/workload.py's load with threads (writers) named ``<prefix><name>``, so a
    second one (the DELAY load) shares the History, and consumers on ``AckRecordingClient``."""

    prefix: str = ""

    def start(self) -> ChaosWorkload:
        c = self.config
        for i in range(c.producers):
            self._producers.append(self._thread(self._produce, f"{self.prefix}p{i}", c.topic, None))
        for i in range(c.fifo_producers):
            groups = [f"{self.prefix}p{i}f-g{g}" for g in range(c.groups_per_fifo_producer)]
            self._producers.append(self._thread(self._produce, f"{self.prefix}p{i}f", c.fifo_topic, groups))
        for i in range(c.consumers):
            if c.producers:
                self._consumers.append(self._thread(self._consume, f"{self.prefix}c{i}", c.topic, c.group))
            if c.fifo_producers:
                self._consumers.append(self._thread(self._consume, f"{self.prefix}c{i}f", c.fifo_topic, c.fifo_group))
        return self

    def _consumer_client(self, name: str) -> V2Client | None:
        with self._consumer_clients_lock:
            if self._stop_consuming.is_set():
                return None
            client = AckRecordingClient(self.endpoint, timeout_s=5.0, client_id=f"faults@{name}")
            client.history = self.history
            self._consumer_clients[name] = client
            return client


@dataclass
class Load:
    workloads: list[Workload]
    producers: list[OfficialProducer]
    consumers: list[OfficialConsumer]

    @classmethod
    def start(cls, cluster: ChaosCluster, history: History, options: ChaosOptions, home: Path) -> Load:
        endpoint = cluster.endpoint
        main = WorkloadConfig(producers=2, fifo_producers=1, consumers=2)
        load = cls([ChaosWorkload(endpoint, history, main).start()], [], [])
        if options.delay_load and cluster.delay_load:
            delay = WorkloadConfig(
                topic=DELAY_TOPIC,
                group=DELAY_GROUP,
                producers=1,
                consumers=1,
                delay_s=(1.0, 5.0),
                send_pause_s=(0.01, 0.05),
            )
            load.workloads.append(ChaosWorkload(endpoint, history, delay, prefix="d").start())
        if options.official_clients:
            official = cluster.official_endpoint
            load.producers.append(OfficialProducer(home, official, main.topic, "o0", history))
            load.consumers.append(OfficialConsumer(home, official, main.topic, main.group, history))
        return load

    def errors(self) -> list[str]:
        return [e for w in self.workloads for e in w.errors] + [e for p in self.producers for e in p.errors]

    def stop_sending(self) -> None:
        for producer in self.producers:
            producer.stop_sending()
        for workload in self.workloads:
            workload.stop_sending()

    def stop(self) -> None:
        for consumer in self.consumers:
            consumer.stop()
        for workload in self.workloads:
            workload.stop()


# -- the run


@dataclass
class Outcome:
    report: Report
    history: History
    schedule: Schedule
    load_errors: list[str]
    drained: bool
    crashes: list[str] = field(default_factory=list)  # services that exited on their own

    def timeline(self) -> str:
        """Each fault (applied, healed, failover, longest gap) and each role change, in time order,
        in seconds from the first fault."""
        origin = min([f.fault_t for f in self.history.faults] + [r.t for r in self.history.roles], default=0.0)
        lines: list[tuple[float, str]] = []
        for fault, rto in zip(self.history.faults, self.report.rto, strict=True):
            healed = "not healed" if fault.heal_t is None else f"healed +{fault.heal_t - origin:.2f}"
            failover = "n/a" if rto.fault_to_first_ok_s is None else f"{rto.fault_to_first_ok_s:.2f} s"
            gap = "n/a" if rto.longest_gap_s is None else f"{rto.longest_gap_s:.2f} s"
            took = "" if fault.in_force_t is None else f" (in force after {fault.in_force_t - fault.fault_t:.2f} s)"
            lines.append((fault.fault_t, f"{fault.name}{took}: {healed}, failover {failover}, longest gap {gap}"))
        for role in self.history.roles:
            who = "no live master" if role.master_id is None else f"master {role.master_id}"
            lines.append((role.t, f"etcd: {who}, epoch {role.epoch}"))
        return "\n".join(f"  +{t - origin:8.2f} s  {text}" for t, text in sorted(lines))

    def dump(self, path: Path) -> None:
        """The History as JSON lines (sends, deliveries, consumer acks, faults, role changes) for a
        post-mortem of a failed run."""
        h = self.history
        with path.open("w") as f:
            for send in h.sends.values():
                f.write(json.dumps({"send": {**vars(send), "key": send.key}}) + "\n")
            for dl in h.deliveries:
                f.write(json.dumps({"delivery": {**vars(dl), "body": dl.body[:80].decode(errors="replace")}}) + "\n")
            for message_id, seq in h.ack_seq.items():
                f.write(json.dumps({"ack": message_id, "after_deliveries": seq}) + "\n")
            for message_id in h.ack_unknown_ids:
                f.write(json.dumps({"ack_unknown": message_id}) + "\n")
            for fault in h.faults:
                f.write(json.dumps({"fault": vars(fault)}) + "\n")
            for role in h.roles:
                f.write(json.dumps({"role": vars(role)}) + "\n")

    @property
    def failures(self) -> list[str]:
        found = [f"{name}: {len(items)}" for name, items in self.report.violations().items()]
        found += [f"schedule: {e}" for e in self.schedule.errors]
        found += [f"load: {e}" for e in self.load_errors]
        found += [f"crash: {c}" for c in self.crashes]
        if not self.drained:
            found.append(f"not drained: lost {len(self.report.lost)}, unconsumed {len(self.report.unconsumed)}")
        return found


def run_chaos(cluster: ChaosCluster, options: ChaosOptions, home: Path, out: Callable[[str], None] = print) -> Outcome:
    """The load, the schedule, the drain and the check over a running cluster (module docstring)."""
    history = History(options.seed)
    recorder = RoleRecorder(cluster.etcd_endpoints, cluster.group, history).start()
    faults = cluster.faults(options.faults or cluster.default_faults)
    schedule = Schedule(
        faults,
        ScheduleConfig(
            duration_s=options.duration_s,
            quiet_s=options.quiet_s,
            fault_s=options.fault_s,
            combine_ratio=options.combine_ratio,
            fault_windows_max=options.fault_windows_max,
        ),
        options.seed,
        history,
        ready=lambda: cluster.ready(options.ready_timeout_s),
    )
    cluster.ready(options.ready_timeout_s)
    load = Load.start(cluster, history, options, home)
    drained = False
    try:
        wait_first_ok(history, 0.0, FIRST_OK_TIMEOUT_S)
        out(f"chaos: load running; schedule of {options.duration_s:.0f} s over {', '.join(f.name for f in faults)}")
        stop = threading.Event()
        runner = threading.Thread(target=schedule.run, args=(stop,), name="chaos-schedule", daemon=True)
        runner.start()
        try:
            while runner.is_alive():
                runner.join(options.progress_every_s)
                out(progress(history, schedule))
        finally:
            stop.set()
            runner.join()
        cluster.ready(options.ready_timeout_s)
        wait_first_ok(history, time.monotonic(), FIRST_OK_TIMEOUT_S)  # serving again before the load stops
        load.stop_sending()
        drained = load.workloads[0].drain(options.drain_timeout_s)  # the whole History: every load's messages
    finally:
        load.stop()
        recorder.stop()
    return Outcome(
        history.check(bounds=options.bounds), history, schedule, load.errors(), drained, list(cluster.crashes)
    )


def progress(history: History, schedule: Schedule) -> str:
    sends = list(history.sends.values())
    return (
        f"chaos: {schedule.fault_windows} fault windows, {len(history.faults)} faults; "
        f"{sum(s.outcome == 'ok' for s in sends)} of {len(sends)} sends acked; "
        f"{len(history.deliveries)} deliveries; {len(history.roles)} role changes seen"
    )


def report_table(report: Report) -> str:
    """The per-run report (issue 30), one row per figure, then the verdict."""

    def seconds(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f} s"

    bound = "no bound" if report.duplicates_allowed is None else f"bound {report.duplicates_allowed}"
    rewind_bound = "no bound" if report.offset_rewind_max is None else f"bound {report.offset_rewind_max}"
    faults = ", ".join(f"{name} x{n}" for name, n in sorted(report.faults_applied.items())) or "none"
    late = "n/a" if report.delay_late_p99_ms is None else f"{report.delay_late_p99_ms} ms"
    rows = [
        ("seed", str(report.seed)),
        ("faults applied", f"{sum(report.faults_applied.values())} ({faults})"),
        (
            "operations",
            f"{report.operations} sends (ok {report.acked}, fail {report.failed}, info {report.indeterminate}), "
            f"{report.delivered} deliveries, {report.consumer_acks} consumer acks "
            f"(and {report.consumer_acks_unknown} that may have taken effect)",
        ),
        ("acknowledged", f"{report.acked} (info sends delivered anyway: {len(report.recovered)})"),
        (
            "lost",
            f"{len(report.lost)} (prefix {len(report.lost_prefix)}, middle {len(report.lost_middle)}, "
            f"suffix {len(report.lost_suffix)})",
        ),
        (
            "acked by a fenced master",
            f"{len(report.fenced_acks)} (acks across a role change {report.acked_across_role_change}; "
            f"role changes recorded {report.roles_recorded})",
        ),
        (
            "duplicated",
            f"{report.duplicate_deliveries} deliveries ({bound}; ids {len(report.duplicates_by_id)}, "
            f"redelivered {len(report.redeliveries)}, values stored twice {len(report.duplicates_by_body)})",
        ),
        ("out of order", f"{len(report.order_violations)} (FIFO per message group)"),
        (
            "delay/timer",
            f"acked {report.delay_acked}, delivered {report.delay_delivered}, lost {len(report.delay_lost)}, "
            f"early {len(report.early)}, late p99 {late}",
        ),
        (
            "consumer offsets",
            f"acked then delivered again {len(report.acked_redelivered)}, moved back at most "
            f"{max(report.offset_rewinds, default=0)} ({rewind_bound}), beyond it {len(report.offset_rewind_over)}",
        ),
        (
            "failover",
            f"p50 {seconds(report.failover(0.5))}, p99 {seconds(report.failover(0.99))} (fault -> first ok); "
            f"longest gap p50 {seconds(report.failover(0.5, 'gap'))}, p99 {seconds(report.failover(0.99, 'gap'))}",
        ),
        (
            "other",
            f"unexpected {len(report.unexpected)}, corrupt {len(report.corrupt)}, aborted {len(report.aborted)}, "
            f"inconsistent offsets {len(report.inconsistent_offsets)}, unconsumed {len(report.unconsumed)}",
        ),
    ]
    for name in sorted(report.faults_applied):
        rows.append(
            (
                f"  {name}",
                f"failover p50 {seconds(report.failover(0.5, fault=name))}, "
                f"p99 {seconds(report.failover(0.99, fault=name))}; "
                f"longest gap p99 {seconds(report.failover(0.99, 'gap', fault=name))}",
            )
        )
    violations = report.violations()
    rows.append(("verdict", "OK" if not violations else "VIOLATIONS: " + ", ".join(violations)))
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


# -- the command


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=20.0, help="the schedule's length (default 20)")
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: PYRMQ_CHAOS_SEED or random)")
    parser.add_argument("--cluster", choices=("hosts", "local"), default=None, help="default: hosts when it can run")
    parser.add_argument("--faults", default="", help="comma-separated fault names (default: the cluster's)")
    parser.add_argument("--no-official-clients", action="store_true", help="v2client load only")
    parser.add_argument("--work-dir", type=Path, default=None, help="default: a new temporary directory")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    seed = chaos_seed(args.seed)
    print(f"chaos seed {seed} (replay: PYRMQ_CHAOS_SEED={seed} or --seed {seed})", flush=True)
    why_not_hosts = hosts_missing()
    kind = args.cluster or ("local" if why_not_hosts else "hosts")
    if kind == "hosts" and why_not_hosts:
        print(f"chaos: --cluster hosts cannot run: {why_not_hosts}", file=sys.stderr)
        return 2
    if args.cluster is None and why_not_hosts:
        print(f"chaos: the local cluster ({why_not_hosts})", flush=True)
    options = ChaosOptions(
        duration_s=args.minutes * 60,
        seed=seed,
        faults=tuple(f for f in args.faults.split(",") if f),
        official_clients=not args.no_official_clients,
    )
    work_dir = args.work_dir or Path(tempfile.mkdtemp(prefix="pyrmq-chaos-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    if why := missing("etcd"):
        print(f"chaos: etcd is missing ({why}); `make setup` installs it", file=sys.stderr)
        return 2
    build = local_chaos_cluster if kind == "local" else hosts_chaos_cluster
    failures: list[str] = []
    with build(work_dir) as cluster:
        try:
            outcome = run_chaos(cluster, options, work_dir / "clients", lambda line: print(line, flush=True))
        finally:
            (work_dir / "cluster.log").write_text(cluster.logs())
        print(f"timeline:\n{outcome.timeline()}", flush=True)
        print(report_table(outcome.report), flush=True)
        failures = outcome.failures
        if failures:
            print(outcome.report.describe(), flush=True)
            if outcome.report.unconsumed:
                print(f"  unconsumed: {', '.join(outcome.report.unconsumed[:20])}", flush=True)
            outcome.dump(work_dir / "history.jsonl")
    if failures:
        print(f"chaos FAILED (seed {seed}): {'; '.join(failures)}\nwork directory kept: {work_dir}", flush=True)
        return 1
    if args.work_dir is None:
        shutil.rmtree(work_dir, ignore_errors=True)
    print(f"chaos OK (seed {seed})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
