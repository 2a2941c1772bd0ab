"""The end-to-end checker (docs/durability.md, section 4) as a plain library: a ``History`` of every send
(invoke -> ok | fail | info) and every delivery, and ``check()`` -> a ``Report``.

Values. A send's value is ``writer-counter`` (``key``): the body is ``b"<writer>-<counter>|"``
followed by seeded pseudo-random bytes (``make_body``), and the history keeps the body's CRC32,
so any delivery can be traced back to its send and checked byte for byte.

Outcomes of a send (``classify_code`` / ``classify_rpc_error``):

* ``ok``   the v2 code is OK: the message is stored (acked).
* ``fail`` a definite rejection before the write: every 4xxxx code (``BAD_REQUEST``,
  ``ILLEGAL_*``, ``UNAUTHORIZED``, ``FORBIDDEN``, ``*_NOT_FOUND``, ``MESSAGE_BODY_*``,
  ``MESSAGE_PROPERTIES_TOO_LARGE``, ``TOO_MANY_REQUESTS`` - our broker sheds before the put,
  "refused, unsent") and ``NOT_IMPLEMENTED``.
* ``info`` indeterminate: everything else. ``MASTER_PERSISTENCE_TIMEOUT`` /
  ``SLAVE_PERSISTENCE_TIMEOUT`` / ``HA_NOT_AVAILABLE`` (appended, not yet durable),
  ``PROXY_TIMEOUT`` (the store did not answer in time), ``INTERNAL_SERVER_ERROR`` (our broker maps
  both definite store refusals, e.g. SERVICE_NOT_AVAILABLE, and UNKNOWN_ERROR / an unreachable
  store to it, so it cannot count as a definite failure), and *every* gRPC transport error
  (``DEADLINE_EXCEEDED``, ``UNAVAILABLE``, ``CANCELLED`` ...): gRPC does not say whether the
  request left the client, so a refused connection is counted as ``info`` too (conservative: an
  ``info`` send may be read or not, both are legal).

A send still ``invoked`` at check time (its thread died) is treated as ``info``.

Report (``Report``; ``Report.violations()`` lists the ones that are always bugs):

* ``lost``       acked, never delivered; per writer, split by where it lies in the writer's counter
  order among its *delivered* sends: ``prefix`` (nothing of that writer delivered before it),
  ``suffix`` (nothing delivered after it), ``middle`` (between delivered ones). A kill -9
  may legally lose nothing acked, so any of them is a violation; the split tells a torn tail
  (suffix) from a hole (middle) from a lost head (prefix). With ``split_at_faults``, each
  writer's sends are split at the faults (by completion time: an ack before the kill came from
  the old master) and each part is judged alone: what an ASYNC replica set loses at a master
  kill is then the ``suffix`` of the part before it (the writer goes on after the failover,
  which would make that tail a ``middle``).
* ``unexpected`` delivered, but the body names no send of the history (never attempted).
* ``corrupt``    delivered, the send exists, but the body's CRC (or length) differs.
* ``aborted``    delivered although its send failed definitely.
* ``recovered``  ``info`` sends that were delivered (legal; counted).
* ``duplicates_by_id``   message ids delivered more than once (count of extra deliveries), and
  ``redeliveries`` the subset with a delivery attempt > 1 (a redelivery the broker announced);
  ``duplicates_by_body`` values (writer-counter) delivered under more than one message id.
* ``order_violations``   per message group: a message delivered (first time) before an
  earlier-acked message of the same group, in the producer's send order (counter order of the
  group's single writer). Only pairs where both were delivered count (a lost one is ``lost``).
* ``inconsistent_offsets`` the same (topic, queue, offset) delivered with two different ids (first
  attempts only: a redelivery of a non-FIFO group comes from the retry topic, whose offsets
  the v2 message reports under the original topic).
* ``early``      a delivery before its send's delivery time (delay/timer messages).
* ``unconsumed`` delivered message ids never acked by a consumer (after a drain: the broker did
  not redeliver a message whose receipt was lost). An ack whose call failed in transport
  (``History.consumer_ack_unknown``) may have reached the store: such a message is not counted.
* ``fail_details``: how many definite failures of each code (for the summary).
* ``rto``        per fault: time from the fault (kill) and from the restart to the first ``ok``
  send completed after the restart (``fault_to_first_ok_s`` is the issue's "failover", its
  quantiles ``Report.failover``; a schedule's fault counts from when its apply began), and
  ``longest_gap_s``, the longest stretch without an ``ok`` completion from the fault until the
  first ``ok`` after its heal (an outage the first figure misses when a deposed master keeps
  acking for the rest of its lease).

The chaos categories (issue 30; ``tests/faults/schedule.py`` and ``chaos.py`` feed them):

* ``fenced_acks`` "acknowledged by a master that had lost its role". The client cannot see which
  replica acknowledged a send, so this is judged from three things: the send's invoke and
  completion times, the final log (what a drain delivered), and the group's election history
  recorded from an etcd watch during the run (``History.role``: the live master and its
  masterEpoch each time they change, ``None`` when the group has no live master). An acked send
  whose message is **missing from the final log** and whose ack **completed under another term
  than the one it was invoked in** (a new master or epoch, or no live master at all) counts. What
  it proves: such an ack came after the role it was sent to had ended per etcd, and it was not
  kept: a zombie or deposed master acknowledged what the group did not keep. What it cannot
  prove: (1) an ack that *was* kept is harmless and is not told apart from a legitimate one (the
  new master may have stored it); only ``acked_across_role_change`` counts them; (2) the watch
  sees a change a few milliseconds after etcd made it, and etcd deletes an expired lease after
  the master's own clock ended it, so an ack in that gap is judged as within the old term
  (under-reported, never over-reported); (3) a loss within one term is reported as ``lost`` only
  (truncation, a torn tail). Without a recorded history (``roles`` empty) nothing is classified.
* ``duplicate_deliveries`` every extra delivery: a message id delivered again (``duplicates_by_id``)
  plus each extra message id of one value (``duplicates_by_body``, a send stored twice). Judged
  against ``Bounds.duplicates_allowed`` when ``bounds`` are given.
* ``delay_*`` delay and timer messages (a ``deliver_at_ms``): acked, delivered, lost (also in
  ``lost``), early (also in ``early``) and how late the first delivery was (p99).
* ``acked_redelivered`` deliveries of a message after the consumer's ack of it was answered OK
  (``History.consumer_acked`` keeps the order), and ``offset_rewinds``: for those delivered as a
  first attempt from their own queue, how far behind the queue's highest delivered offset they
  were: how far the group's consume offset moved back. A rewind beyond
  ``Bounds.offset_rewind_max`` is a violation (services/store/README.md "What a failover keeps":
  a failover repeats what was in flight and the last ``ha_config_sync_interval_ms`` of commits).
"""

from __future__ import annotations

import bisect
import random
import statistics
import threading
import time
import zlib
from collections import defaultdict
from dataclasses import dataclass, field

import grpc
from apache.rocketmq.v2 import definition_pb2 as d

OK, FAIL, INFO, INVOKED = "ok", "fail", "info", "invoked"

# v2 codes that are definite, pre-write rejections besides the 4xxxx range.
_DEFINITE_5XX = frozenset({d.NOT_IMPLEMENTED})


def classify_code(code: int) -> str:
    """ok | fail | info for a v2 ``Code`` answered to a send (see the module docstring)."""
    if code in (d.OK, d.MULTIPLE_RESULTS):
        return OK
    if 40000 <= code < 50000 or code in _DEFINITE_5XX:
        return FAIL
    return INFO


def classify_rpc_error(_error: grpc.RpcError) -> str:
    """Every transport-level error of a send is indeterminate (gRPC cannot tell whether the
    request reached the broker)."""
    return INFO


def make_body(key: str, seed: int, size_min: int = 64, size_max: int = 512) -> bytes:
    """``key|`` then pseudo-random hex text seeded by (seed, key): reproducible from the seed, and
    text, so the official clients can send it too."""
    rng = random.Random(f"{seed}/{key}")
    size = rng.randint(size_min, size_max)
    return key.encode() + b"|" + rng.randbytes((size + 1) // 2).hex()[:size].encode()


def key_of_body(body: bytes) -> str | None:
    head, sep, _ = body[:200].partition(b"|")
    if not sep:
        return None
    try:
        return head.decode("ascii")
    except UnicodeDecodeError:
        return None


@dataclass
class Send:
    writer: str
    counter: int
    topic: str
    crc: int
    size: int
    message_group: str | None = None
    deliver_at_ms: int | None = None
    outcome: str = INVOKED
    detail: str = ""
    message_id: str = ""
    invoke_t: float = 0.0  # time.monotonic()
    complete_t: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.writer}-{self.counter}"


@dataclass
class Delivery:
    message_id: str
    topic: str
    queue_id: int
    offset: int
    body: bytes
    message_group: str | None = None
    attempt: int = 1
    t: float = 0.0  # time.monotonic() when received
    wall_ms: int = 0  # time.time() in ms when received
    seq: int = 0  # global receive order (set by History)


@dataclass
class Fault:
    name: str
    fault_t: float  # monotonic time of the kill (a schedule's fault: when its apply() began)
    restart_t: float | None = None  # monotonic time the replacement was spawned
    heal_t: float | None = None  # monotonic time heal() returned (a schedule's fault)
    in_force_t: float | None = None  # a schedule's fault: apply() returned (fault_t: it began)


@dataclass
class Rto:
    fault: str
    fault_to_first_ok_s: float | None
    restart_to_first_ok_s: float | None
    longest_gap_s: float | None = None  # the longest stretch without an ok, fault -> first ok after its heal


@dataclass(frozen=True)
class RoleChange:
    """The group's live master as an etcd watch saw it at monotonic time ``t``: ``master_id``
    None when the group has no live master (its lease expired, nobody elected yet)."""

    t: float
    master_id: int | None
    epoch: int

    @property
    def term(self) -> tuple[int | None, int]:
        return (self.master_id, self.epoch) if self.master_id is not None else (None, 0)


@dataclass(frozen=True)
class Bounds:
    """What a chaos run may repeat (the rest of the checker's categories are always bugs).

    Duplicates: at most ``duplicates_per_fault_max`` per fault applied plus
    ``duplicates_ratio_max`` of the acked sends (docs/durability.md's soak goal: under 0.5 %).
    A failover delivers again every message in flight (services/store/README.md "What a
    failover keeps"): the workload holds at most its consumers' receive batches, well under
    256. Offsets: a group's consume offset moves back at most ``offset_rewind_max`` messages of
    a queue (what was in flight plus the commits of the last config sync interval)."""

    duplicates_per_fault_max: int = 256
    duplicates_ratio_max: float = 0.005
    offset_rewind_max: int = 256

    def duplicates_allowed(self, acked: int, faults: int) -> int:
        return self.duplicates_per_fault_max * faults + int(self.duplicates_ratio_max * acked)


class History:
    """Thread-safe record of sends, deliveries, consumer acks and faults."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._lock = threading.Lock()
        self.sends: dict[str, Send] = {}
        self.deliveries: list[Delivery] = []
        self.acked_ids: set[str] = set()
        self.ack_seq: dict[str, int] = {}  # message id -> deliveries recorded when its ack was answered
        self.ack_unknown_ids: set[str] = set()  # the ack call failed in transport: maybe acked
        self.faults: list[Fault] = []
        self.roles: list[RoleChange] = []  # the group's election history (an etcd watch)

    # -- sends
    def invoke(
        self,
        writer: str,
        counter: int,
        topic: str,
        body: bytes,
        message_group: str | None = None,
        deliver_at_ms: int | None = None,
    ) -> Send:
        send = Send(
            writer, counter, topic, zlib.crc32(body), len(body), message_group, deliver_at_ms, invoke_t=time.monotonic()
        )
        with self._lock:
            assert send.key not in self.sends, f"value {send.key} sent twice"
            self.sends[send.key] = send
        return send

    def complete(self, send: Send, outcome: str, detail: str = "", message_id: str = "") -> None:
        assert outcome in (OK, FAIL, INFO), outcome
        with self._lock:
            send.outcome, send.detail, send.complete_t = outcome, detail, time.monotonic()
            if message_id:
                send.message_id = message_id

    # -- consumption
    def deliver(self, delivery: Delivery) -> None:
        with self._lock:
            delivery.seq = len(self.deliveries)
            if not delivery.t:
                delivery.t = time.monotonic()
            if not delivery.wall_ms:
                delivery.wall_ms = time.time_ns() // 1_000_000
            self.deliveries.append(delivery)

    def consumer_acked(self, message_ids: list[str]) -> None:
        with self._lock:
            self.acked_ids.update(message_ids)
            for message_id in message_ids:
                self.ack_seq.setdefault(message_id, len(self.deliveries))

    def consumer_ack_unknown(self, message_ids: list[str]) -> None:
        """The ack's outcome is unknown (the broker died or timed out under it): the store may
        have it, so the message need not come back."""
        with self._lock:
            self.ack_unknown_ids.update(message_ids)

    # -- faults
    def fault(self, name: str, t: float | None = None) -> Fault:
        fault = Fault(name, time.monotonic() if t is None else t)
        with self._lock:
            self.faults.append(fault)
        return fault

    def restarted(self, fault: Fault) -> None:
        with self._lock:
            fault.restart_t = time.monotonic()

    def healed(self, fault: Fault, t: float | None = None) -> None:
        with self._lock:
            fault.heal_t = time.monotonic() if t is None else t

    def role(self, master_id: int | None, epoch: int, t: float | None = None) -> None:
        """The group's live master (None: none) as the etcd watch saw it; repeats are dropped."""
        change = RoleChange(time.monotonic() if t is None else t, master_id, epoch)
        with self._lock:
            if not self.roles or self.roles[-1].term != change.term:
                self.roles.append(change)

    # -- summaries
    def count(self, outcome: str) -> int:
        with self._lock:
            return sum(s.outcome == outcome for s in self.sends.values())

    def delivered_ids(self) -> set[str]:
        with self._lock:
            return {dl.message_id for dl in self.deliveries}

    def check(self, split_at_faults: bool = False, bounds: Bounds | None = None) -> Report:
        with self._lock:
            return check(
                list(self.sends.values()),
                list(self.deliveries),
                set(self.acked_ids),
                list(self.faults),
                seed=self.seed,
                ack_unknown_ids=set(self.ack_unknown_ids),
                split_at_faults=split_at_faults,
                roles=list(self.roles),
                ack_seq=dict(self.ack_seq),
                bounds=bounds,
            )


@dataclass
class Report:
    seed: int = 0
    acked: int = 0
    failed: int = 0
    indeterminate: int = 0
    delivered: int = 0
    lost_prefix: list[str] = field(default_factory=list)
    lost_middle: list[str] = field(default_factory=list)
    lost_suffix: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    recovered: list[str] = field(default_factory=list)
    duplicates_by_id: dict[str, int] = field(default_factory=dict)
    redeliveries: dict[str, int] = field(default_factory=dict)
    duplicates_by_body: dict[str, list[str]] = field(default_factory=dict)
    order_violations: list[str] = field(default_factory=list)
    inconsistent_offsets: list[str] = field(default_factory=list)
    early: list[str] = field(default_factory=list)
    unconsumed: list[str] = field(default_factory=list)
    rto: list[Rto] = field(default_factory=list)
    fail_details: dict[str, int] = field(default_factory=dict)
    # the chaos categories (module docstring)
    operations: int = 0  # sends invoked
    consumer_acks: int = 0
    consumer_acks_unknown: int = 0  # acks that failed in a way that may have taken effect
    faults_applied: dict[str, int] = field(default_factory=dict)
    roles_recorded: int = 0
    fenced_acks: list[str] = field(default_factory=list)
    acked_across_role_change: int = 0
    duplicate_deliveries: int = 0
    duplicates_allowed: int | None = None  # None: no bound given
    delay_acked: int = 0
    delay_delivered: int = 0
    delay_lost: list[str] = field(default_factory=list)
    delay_late_p99_ms: int | None = None
    acked_redelivered: list[str] = field(default_factory=list)
    offset_rewinds: list[int] = field(default_factory=list)  # how far back, in messages of the queue
    offset_rewind_over: list[str] = field(default_factory=list)
    offset_rewind_max: int | None = None  # the bound; None: none given

    @property
    def lost(self) -> list[str]:
        return self.lost_prefix + self.lost_middle + self.lost_suffix

    def failover(self, q: float, what: str = "failover", fault: str | None = None) -> float | None:
        """The ``q`` quantile (nearest rank) over the faults (named ``fault``, or all) of fault ->
        first ok (``failover``) or of the longest stretch without an ok (``gap``); None when no
        fault has one."""
        values = sorted(
            v
            for r in self.rto
            if (fault is None or r.fault == fault)
            and (v := (r.fault_to_first_ok_s if what == "failover" else r.longest_gap_s)) is not None
        )
        return values[min(len(values) - 1, int(len(values) * q))] if values else None

    def violations(self) -> dict[str, list[str]]:
        """Categories that are bugs in any run (duplicates, unconsumed and RTO are judged by the
        test, since what is allowed depends on the fault)."""
        found = {
            "lost-prefix": self.lost_prefix,
            "lost-middle": self.lost_middle,
            "lost-suffix": self.lost_suffix,
            "unexpected": self.unexpected,
            "corrupt": self.corrupt,
            "aborted": self.aborted,
            "order": self.order_violations,
            "inconsistent-offsets": self.inconsistent_offsets,
            "early": self.early,
            "fenced-ack": self.fenced_acks,
            "offset-rewind": self.offset_rewind_over,
        }
        if self.duplicates_allowed is not None and self.duplicate_deliveries > self.duplicates_allowed:
            found["duplicates-over-bound"] = [f"{self.duplicate_deliveries} > {self.duplicates_allowed}"]
        return {k: v for k, v in found.items() if v}

    def rto_p99(self, since: str = "restart") -> float | None:
        values = sorted(
            v
            for r in self.rto
            if (v := (r.restart_to_first_ok_s if since == "restart" else r.fault_to_first_ok_s)) is not None
        )
        if not values:
            return None
        return values[min(len(values) - 1, int(len(values) * 0.99))]

    def summary(self) -> str:
        rto = [r.restart_to_first_ok_s for r in self.rto if r.restart_to_first_ok_s is not None]
        return (
            f"seed {self.seed}: acked {self.acked}, failed {self.failed} {self.fail_details or ''}, info {self.indeterminate} "
            f"(recovered {len(self.recovered)}), delivered {self.delivered}; lost {len(self.lost)} "
            f"(prefix {len(self.lost_prefix)}, middle {len(self.lost_middle)}, suffix {len(self.lost_suffix)}), "
            f"unexpected {len(self.unexpected)}, corrupt {len(self.corrupt)}, aborted {len(self.aborted)}, "
            f"duplicate ids {len(self.duplicates_by_id)} (redelivered {len(self.redeliveries)}), duplicate bodies "
            f"{len(self.duplicates_by_body)}, order violations {len(self.order_violations)}, inconsistent offsets "
            f"{len(self.inconsistent_offsets)}, early {len(self.early)}, unconsumed {len(self.unconsumed)}, "
            f"RTO restart->first OK "
            + (f"median {statistics.median(rto):.3f} s max {max(rto):.3f} s" if rto else "n/a")
        )

    def describe(self, limit: int = 20) -> str:
        lines = [self.summary()]
        for name, items in self.violations().items():
            lines.append(f"  {name} ({len(items)}): " + ", ".join(items[:limit]))
        return "\n".join(lines)


def check(
    sends: list[Send],
    deliveries: list[Delivery],
    acked_ids: set[str] = frozenset(),  # type: ignore[assignment]
    faults: list[Fault] = (),
    seed: int = 0,  # type: ignore[assignment]
    ack_unknown_ids: set[str] = frozenset(),
    split_at_faults: bool = False,
    roles: list[RoleChange] = (),  # type: ignore[assignment]
    ack_seq: dict[str, int] | None = None,
    bounds: Bounds | None = None,
) -> Report:  # type: ignore[assignment]
    """The analysis of one history (see the module docstring)."""
    report = Report(seed=seed)
    report.operations = len(sends)
    report.consumer_acks = len(acked_ids)
    report.consumer_acks_unknown = len(ack_unknown_ids)
    for f in faults:
        report.faults_applied[f.name] = report.faults_applied.get(f.name, 0) + 1
    by_key = {s.key: s for s in sends}
    report.acked = sum(s.outcome == OK for s in sends)
    report.failed = sum(s.outcome == FAIL for s in sends)
    report.indeterminate = sum(s.outcome in (INFO, INVOKED) for s in sends)
    report.delivered = len(deliveries)
    for s in sends:
        if s.outcome == FAIL:
            report.fail_details[s.detail] = report.fail_details.get(s.detail, 0) + 1

    delivered_keys: dict[str, set[str]] = defaultdict(set)  # key -> message ids
    deliveries_of_id: dict[str, list[Delivery]] = defaultdict(list)
    first_seq: dict[str, int] = {}  # key -> first delivery seq
    at_offset: dict[tuple[str, int, int], str] = {}
    for dl in sorted(deliveries, key=lambda x: x.seq):
        where = f"{dl.topic}/{dl.queue_id}@{dl.offset}"
        key = key_of_body(dl.body)
        send = by_key.get(key) if key else None
        if send is None:
            if dl.message_id not in deliveries_of_id:
                report.unexpected.append(f"{dl.message_id} at {where} ({dl.body[:32]!r})")
            deliveries_of_id[dl.message_id].append(dl)
            continue
        deliveries_of_id[dl.message_id].append(dl)
        if zlib.crc32(dl.body) != send.crc or len(dl.body) != send.size:
            report.corrupt.append(f"{key} ({dl.message_id}) at {where}")
        if len(deliveries_of_id[dl.message_id]) == 1:
            if send.outcome == FAIL and key not in delivered_keys:
                report.aborted.append(f"{key} failed definitely ({send.detail}), read at {where}")
            if send.deliver_at_ms is not None and dl.wall_ms < send.deliver_at_ms:
                report.early.append(f"{key} delivered {send.deliver_at_ms - dl.wall_ms} ms before its time")
        delivered_keys[key].add(dl.message_id)
        first_seq.setdefault(key, dl.seq)
        if dl.offset >= 0 and dl.attempt == 1:  # retries come from the retry topic's offsets
            slot = (dl.topic, dl.queue_id, dl.offset)
            previous = at_offset.setdefault(slot, dl.message_id)
            if previous != dl.message_id:
                report.inconsistent_offsets.append(f"{where}: {previous} then {dl.message_id}")

    for message_id, dls in deliveries_of_id.items():
        if len(dls) > 1:
            report.duplicates_by_id[message_id] = len(dls) - 1
            if any(dl.attempt > 1 for dl in dls[1:]):
                report.redeliveries[message_id] = len(dls) - 1
    for key, ids in delivered_keys.items():
        if len(ids) > 1:
            report.duplicates_by_body[key] = sorted(ids)
    report.recovered = sorted(s.key for s in sends if s.outcome in (INFO, INVOKED) and s.key in delivered_keys)
    if acked_ids:
        report.unconsumed = sorted(
            mid for mid in deliveries_of_id if mid not in acked_ids and mid not in ack_unknown_ids
        )

    # lost, split per writer by counter order among that writer's delivered sends
    fault_times = sorted(f.fault_t for f in faults) if split_at_faults else []
    per_writer: dict[tuple[str, int], list[Send]] = defaultdict(list)
    for s in sends:
        per_writer[(s.writer, bisect.bisect_left(fault_times, s.complete_t or s.invoke_t))].append(s)
    for _writer, writer_sends in per_writer.items():
        writer_sends.sort(key=lambda s: s.counter)
        present = [s.counter for s in writer_sends if s.key in delivered_keys]
        first, last = (present[0], present[-1]) if present else (None, None)
        for s in writer_sends:
            if s.outcome != OK or s.key in delivered_keys:
                continue
            label = f"{s.key} ({s.message_id})"
            if first is None or s.counter < first:
                report.lost_prefix.append(label)
            elif s.counter > last:
                report.lost_suffix.append(label)
            else:
                report.lost_middle.append(label)

    # FIFO order per message group: in counter order, each first delivery must come after all
    # earlier ones of the group (only acked, delivered messages take part).
    groups: dict[tuple[str, str], list[Send]] = defaultdict(list)
    for s in sends:
        if s.message_group is not None and s.outcome == OK and s.key in first_seq:
            groups[(s.topic, s.message_group)].append(s)
    for (topic, group), members in groups.items():
        members.sort(key=lambda s: s.counter)
        latest: Send | None = None
        for s in members:
            if latest is not None and first_seq[s.key] < first_seq[latest.key]:
                report.order_violations.append(f"{topic}/{group}: {s.key} delivered before earlier {latest.key}")
            if latest is None or first_seq[s.key] > first_seq[latest.key]:
                latest = s

    # RTO: the first ok completed after each restart
    ok_times = sorted(s.complete_t for s in sends if s.outcome == OK)
    for f in faults:
        first_ok = next((t for t in ok_times if t > (f.restart_t if f.restart_t is not None else f.fault_t)), None)
        report.rto.append(
            Rto(
                f.name,
                None if first_ok is None else first_ok - f.fault_t,
                None if first_ok is None or f.restart_t is None else first_ok - f.restart_t,
                _longest_gap(ok_times, f),
            )
        )

    _check_roles(report, sends, roles)
    _check_delay(report, sends, deliveries, by_key)
    _check_offsets(report, deliveries, ack_seq or {}, bounds)
    report.duplicate_deliveries = sum(report.duplicates_by_id.values()) + sum(
        len(ids) - 1 for ids in report.duplicates_by_body.values()
    )
    if bounds is not None:
        report.duplicates_allowed = bounds.duplicates_allowed(report.acked, len(faults))
    return report


def _longest_gap(ok_times: list[float], fault: Fault) -> float | None:
    """The longest stretch without an ok completion from ``fault``'s start to the first ok after
    its heal (or after the fault when it has none); None when no ok came after."""
    end_after = max(t for t in (fault.fault_t, fault.heal_t, fault.restart_t) if t is not None)
    start = bisect.bisect_right(ok_times, fault.fault_t)
    end = bisect.bisect_right(ok_times, end_after)
    if end >= len(ok_times):
        return None
    points = [fault.fault_t, *ok_times[start : end + 1]]
    return max(b - a for a, b in zip(points, points[1:], strict=False))


def _check_roles(report: Report, sends: list[Send], roles: list[RoleChange]) -> None:
    """``fenced_acks``: lost acks completed under another term than their invoke's (docstring)."""
    report.roles_recorded = len(roles)
    if not roles:
        return
    ordered = sorted(roles, key=lambda r: r.t)
    times = [r.t for r in ordered]

    def at(t: float) -> RoleChange | None:
        i = bisect.bisect_right(times, t)
        return ordered[i - 1] if i else None

    lost = {label.split()[0] for label in report.lost}
    for s in sends:
        if s.outcome != OK:
            continue
        invoked, completed = at(s.invoke_t), at(s.complete_t)
        if invoked is None or completed is None or invoked.term == completed.term:
            continue
        report.acked_across_role_change += 1
        if s.key in lost:
            now = "no live master" if completed.master_id is None else f"master {completed.master_id}"
            report.fenced_acks.append(
                f"{s.key} ({s.message_id}) sent under master {invoked.master_id} epoch {invoked.epoch}, "
                f"acked {s.complete_t - completed.t:.3f} s after {now} (epoch {completed.epoch}), not kept"
            )


def _check_delay(report: Report, sends: list[Send], deliveries: list[Delivery], by_key: dict[str, Send]) -> None:
    """Delay and timer messages (a ``deliver_at_ms``): counts, lost and how late (``early`` is
    judged with every delivery above)."""
    timed = {s.key for s in sends if s.deliver_at_ms is not None}
    if not timed:
        return
    report.delay_acked = sum(by_key[k].outcome == OK for k in timed)
    report.delay_lost = [label for label in report.lost if label.split()[0] in timed]
    late_ms: dict[str, int] = {}
    for dl in sorted(deliveries, key=lambda x: x.seq):
        key = key_of_body(dl.body)
        if key in timed and key not in late_ms:
            late_ms[key] = dl.wall_ms - (by_key[key].deliver_at_ms or 0)
    report.delay_delivered = len(late_ms)
    if late_ms:
        ordered = sorted(late_ms.values())
        report.delay_late_p99_ms = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _check_offsets(report: Report, deliveries: list[Delivery], ack_seq: dict[str, int], bounds: Bounds | None) -> None:
    """``acked_redelivered`` and ``offset_rewinds`` (docstring)."""
    report.offset_rewind_max = bounds.offset_rewind_max if bounds is not None else None
    highest: dict[tuple[str, int], int] = {}
    for dl in sorted(deliveries, key=lambda x: x.seq):
        where = (dl.topic, dl.queue_id)
        if dl.message_id in ack_seq and dl.seq >= ack_seq[dl.message_id]:
            report.acked_redelivered.append(f"{dl.message_id} at {dl.topic}/{dl.queue_id}@{dl.offset}")
            if dl.attempt == 1 and dl.offset >= 0 and where in highest:
                back = max(0, highest[where] - dl.offset)
                report.offset_rewinds.append(back)
                if report.offset_rewind_max is not None and back > report.offset_rewind_max:
                    report.offset_rewind_over.append(
                        f"{dl.topic}/{dl.queue_id}: {dl.message_id} at offset {dl.offset}, acked, delivered "
                        f"again {back} behind {highest[where]}"
                    )
        if dl.attempt == 1 and dl.offset >= 0:
            highest[where] = max(highest.get(where, -1), dl.offset)
