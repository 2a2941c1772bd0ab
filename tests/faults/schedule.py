"""A seeded, randomized nemesis schedule (issue 30): quiet and fault windows taking turns.

Given faults (anything with ``name``, ``apply()`` and ``heal()``: ``Fault`` below, the interface
of tests/faults/process_faults.py and tests/faults/nemesis.py), a duration and a seed, a
``Schedule`` runs::

    quiet | fault window | quiet | fault window | ... | (heal everything) end

* Each quiet window lasts ``quiet_s`` (drawn uniformly), each fault window ``fault_s``. A fault
  window applies one fault dealt from a shuffled deck (each fault once per round, so a short run
  meets every kind) and, with probability ``combine_ratio``, more compatible ones drawn at random
  (``combine_max`` in all), and heals them (in reverse order) when it ends. The schedule ends at
  ``duration_s``, or after ``fault_windows_max`` fault windows when that is set.
* Two faults are compatible when their ``targets`` (an optional attribute, a frozenset of the
  things they act on: "master", "broker", "etcd-leader" ...; by default the fault's own name)
  do not overlap: a kill and a pause of "the master" are never combined, a kill of the master and
  a pause of the broker may be.
* Every random choice comes from ``random.Random(f"{seed}/schedule")`` and none depends on timing,
  so a seed replays the same windows with the same faults and durations (what the faults then
  meet still varies with thread timing). ``chaos_seed()`` reads ``PYRMQ_CHAOS_SEED``.
* Each fault is recorded in the ``History`` from when its ``apply()`` began (``fault_t``: a
  partition takes hold host pair by host pair while apply runs, a master's lease may be lost
  before apply returns), with when it returned (``in_force_t``) and when its ``heal()``
  returned (``heal_t``): the checker measures failover from ``fault_t``.
* Before a fault window, ``ready()`` (optional, blocking) may wait for the cluster to be whole
  again (every replica in sync), so each fault meets a healthy cluster; the wait lengthens the
  quiet window and draws nothing, and a wait that ends past the duration ends the schedule.
* Everything applied is healed: at the end of the duration, and by ``heal_all()`` (idempotent,
  ``run()`` calls it in a ``finally``) whatever stopped the run. A fault whose ``apply()`` raises
  is healed at once and noted in ``errors``, and the schedule goes on; so is a failed heal.

A small class with ``run_once()`` and an injected clock (services/runtime/clock.py): tests drive
it with a ``ManualClock`` and never sleep; ``run()`` is the thread's loop around it.
"""

from __future__ import annotations

import enum
import logging
import os
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from services.runtime.clock import Clock, SystemClock
from tests.faults.checker import Fault as FaultRecord
from tests.faults.checker import History

log = logging.getLogger(__name__)


class Fault(Protocol):
    """A reversible fault (tests/faults/nemesis.py's interface)."""

    name: str

    def apply(self) -> None: ...  # inject; returns once in force

    def heal(self) -> None: ...  # undo; idempotent


def targets(fault: Fault) -> frozenset[str]:
    """What a fault acts on: its ``targets`` attribute, else its name alone."""
    found = getattr(fault, "targets", None)
    return frozenset(found) if found else frozenset({fault.name})


def compatible(a: Fault, b: Fault) -> bool:
    return a is not b and not (targets(a) & targets(b))


@dataclass(frozen=True)
class ScheduleConfig:
    duration_s: float  # the whole schedule; the last window is cut short to end in time, healed
    quiet_s: tuple[float, float] = (5.0, 15.0)  # a quiet window's length, drawn uniformly
    fault_s: tuple[float, float] = (3.0, 10.0)  # a fault window's; above the 2 s lease, so a pause outlives it
    combine_ratio: float = 0.25  # the chance a fault window combines compatible faults
    combine_max: int = 2  # faults in force at once, at most
    fault_windows_max: int | None = None  # end after this many fault windows (healed) instead of at duration_s

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise ValueError(f"duration_s {self.duration_s}: must be positive")
        for name, (low, high) in (("quiet_s", self.quiet_s), ("fault_s", self.fault_s)):
            if not 0 < low <= high:
                raise ValueError(f"{name} {(low, high)}: needs 0 < low <= high")
        if not 0 <= self.combine_ratio <= 1 or self.combine_max < 1:
            raise ValueError("combine_ratio must be in [0, 1] and combine_max at least 1")
        if self.fault_windows_max is not None and self.fault_windows_max < 1:
            raise ValueError("fault_windows_max must be at least 1 (None: no limit)")


@dataclass(frozen=True)
class Event:
    """One thing the schedule did, at ``t_s`` seconds from its start."""

    t_s: float
    action: str  # "apply", "heal", "error"
    faults: tuple[str, ...]
    detail: str = ""


class Phase(enum.Enum):
    NOT_STARTED = "not started"
    QUIET = "quiet"
    FAULT = "fault"
    DONE = "done"


@dataclass
class Schedule:
    faults: Sequence[Fault]
    config: ScheduleConfig
    seed: int
    history: History
    clock: Clock = field(default_factory=SystemClock)
    ready: Callable[[], object] | None = None  # blocks until the cluster may take the next fault
    events: list[Event] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    phase: Phase = Phase.NOT_STARTED
    _rng: random.Random = field(init=False)
    _start_t: float = 0.0
    _next_t: float = 0.0
    _active: list[tuple[Fault, FaultRecord | None]] = field(default_factory=list)
    _deck: list[Fault] = field(default_factory=list)  # the faults not dealt yet in this round
    fault_windows: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)  # run_once against heal_all from another thread

    def __post_init__(self) -> None:
        if not self.faults:
            raise ValueError("a schedule needs at least one fault")
        names = [f.name for f in self.faults]
        if len(set(names)) != len(names):
            raise ValueError(f"fault names must be unique: {names}")
        self._rng = random.Random(f"{self.seed}/schedule")

    @property
    def end_t(self) -> float:
        return self._start_t + self.config.duration_s

    def run_once(self) -> float | None:
        """The next step if it is due; seconds until the step after, None once done (all healed)."""
        with self._lock:
            now = self.clock.monotonic_s()
            if self.phase is Phase.NOT_STARTED:
                self._start_t = now
                log.info("chaos schedule: seed %d, %.0f s, faults %s", self.seed, self.config.duration_s, self._names())
                self._enter_quiet(now)
                return self._next_t - now
            if self.phase is Phase.DONE:
                return None
            if now < self._next_t:
                return self._next_t - now
            if self.phase is Phase.FAULT:
                self._heal_active_locked()
                if self.clock.monotonic_s() >= self.end_t or self.fault_windows == self.config.fault_windows_max:
                    self.phase = Phase.DONE
                    return None
                self._enter_quiet(self.clock.monotonic_s())
            elif now >= self.end_t:
                self.phase = Phase.DONE
                return None
            else:
                self._fault_window_locked()
                if self.phase is Phase.DONE:
                    return None
            return max(0.0, self._next_t - self.clock.monotonic_s())

    def run(self, stop: threading.Event | None = None) -> None:
        """run_once() until done (or ``stop`` is set), waiting between steps; heals everything at the end."""
        stop = stop or threading.Event()
        try:
            while not stop.is_set():
                delay = self.run_once()
                if delay is None:
                    break
                stop.wait(delay)  # the real clock's wait; a ManualClock's tests call run_once() instead
        finally:
            self.heal_all()

    def heal_all(self) -> None:
        """Heal whatever is in force (idempotent); the schedule is then done."""
        with self._lock:
            self._heal_active_locked()
            self.phase = Phase.DONE

    # -- windows
    def _enter_quiet(self, now: float) -> None:
        self.phase = Phase.QUIET
        self._next_t = min(self.end_t, now + self._rng.uniform(*self.config.quiet_s))

    def _fault_window_locked(self) -> None:
        chosen = self._choose()
        duration_s = self._rng.uniform(*self.config.fault_s)  # drawn before ready(): the plan ignores timing
        if self.ready is not None:
            self.ready()
            if self.clock.monotonic_s() >= self.end_t:  # the wait ran past the end: no window
                self.phase = Phase.DONE
                return
        for fault in chosen:
            began_t = self.clock.monotonic_s()
            try:
                fault.apply()
            except Exception as exc:  # the fault is healed and reported; the schedule goes on
                log.exception("chaos: apply %s failed", fault.name)
                self._error(f"apply {fault.name}: {exc!r}", fault)
                self._heal_one(fault, None)
                continue
            record = self.history.fault(fault.name, t=began_t)
            record.in_force_t = self.clock.monotonic_s()
            self._active.append((fault, record))
            self._event("apply", (fault.name,))
        self.phase = Phase.FAULT
        self.fault_windows += 1
        self._next_t = min(self.end_t, self.clock.monotonic_s() + duration_s)

    def _choose(self) -> list[Fault]:
        """One fault dealt from a shuffled deck (every fault once before any comes again, so a
        short run still meets each kind), or with ``combine_ratio`` up to ``combine_max``
        pairwise compatible ones, the others drawn at random."""
        if not self._deck:
            self._deck = list(self.faults)
            self._rng.shuffle(self._deck)
        chosen = [self._deck.pop()]
        if self.config.combine_max > 1 and self._rng.random() < self.config.combine_ratio:
            while len(chosen) < self.config.combine_max:
                more = [f for f in self.faults if all(compatible(f, c) for c in chosen)]
                if not more:
                    break
                chosen.append(self._rng.choice(more))
        return chosen

    def _heal_active_locked(self) -> None:
        while self._active:
            fault, record = self._active.pop()
            self._heal_one(fault, record)

    def _heal_one(self, fault: Fault, record: FaultRecord | None) -> None:
        try:
            fault.heal()
        except Exception as exc:
            log.exception("chaos: heal %s failed", fault.name)
            self._error(f"heal {fault.name}: {exc!r}", fault)
            return
        if record is not None:
            self.history.healed(record, t=self.clock.monotonic_s())
            self._event("heal", (fault.name,))

    def _event(self, action: str, faults: tuple[str, ...], detail: str = "") -> None:
        event = Event(round(self.clock.monotonic_s() - self._start_t, 3), action, faults, detail)
        self.events.append(event)
        log.info("chaos t=+%.1f s: %s %s %s", event.t_s, action, ",".join(faults), detail)

    def _error(self, message: str, fault: Fault) -> None:
        self.errors.append(message)
        self._event("error", (fault.name,), message)

    def _names(self) -> str:
        return ", ".join(f.name for f in self.faults)


def chaos_seed(given: int | None = None) -> int:
    """``given`` if set, else PYRMQ_CHAOS_SEED (a replay), else a fresh random seed."""
    if given is not None:
        return given
    value = os.environ.get("PYRMQ_CHAOS_SEED")
    return int(value) if value else int.from_bytes(os.urandom(4), "big")
