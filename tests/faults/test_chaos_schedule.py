"""The chaos schedule (tests/faults/schedule.py) driven by a ManualClock with fake faults, then
for real: ~25 s on one host's replica cluster (3 etcd members, 3 store replicas, a broker and
the scheduler) with a kill -9 of the master and a SIGSTOP of the master past its 2 s lease
(tests/faults/process_faults.py) under the chaos workload (tests/faults/chaos.py), checked as
``make chaos`` checks its run."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.runtime.clock import ManualClock
from tests.faults.chaos import ChaosOptions, local_chaos_cluster, report_table, run_chaos
from tests.faults.checker import History
from tests.faults.schedule import Phase, Schedule, ScheduleConfig, chaos_seed, compatible


class FakeFault:
    def __init__(self, name: str, clock: ManualClock, journal: list[str], targets: tuple[str, ...] = ()) -> None:
        self.name = name
        if targets:
            self.targets = frozenset(targets)
        self.clock = clock
        self.journal = journal
        self.in_force = False
        self.fail_apply = False

    def apply(self) -> None:
        if self.fail_apply:
            raise RuntimeError("no master to fault")
        self.in_force = True
        self.journal.append(f"apply {self.name}")

    def heal(self) -> None:
        if self.in_force:
            self.journal.append(f"heal {self.name}")
        self.in_force = False


def drive(schedule: Schedule, clock: ManualClock, steps_max: int = 1000) -> None:
    """run_once() until done, moving the clock by each answer instead of sleeping."""
    for _ in range(steps_max):
        delay = schedule.run_once()
        if delay is None:
            return
        clock.advance_ms(max(1, round(delay * 1000)))
    raise AssertionError("the schedule did not end")


def make(
    names: tuple[str, ...] = ("kill-master", "pause-master"),
    seed: int = 1,
    **config: object,
) -> tuple[Schedule, ManualClock, list[str], History, list[FakeFault]]:
    clock = ManualClock()
    journal: list[str] = []
    faults = [FakeFault(n, clock, journal, ("master",) if n.endswith("master") else ()) for n in names]
    history = History(seed)
    settings = {"duration_s": 60.0, "quiet_s": (5.0, 5.0), "fault_s": (3.0, 3.0), **config}
    schedule = Schedule(faults, ScheduleConfig(**settings), seed, history, clock)  # type: ignore[arg-type]
    return schedule, clock, journal, history, faults


def test_quiet_and_fault_windows_alternate_and_each_fault_is_recorded() -> None:
    schedule, clock, journal, history, faults = make()
    start_s = clock.monotonic_s()
    drive(schedule, clock)
    # 60 s: quiet 5, fault 3, ... -> 8 windows of 8 s, then 4 s quiet to the end
    assert len(history.faults) == 7 and schedule.fault_windows == 7 and schedule.phase is Phase.DONE
    for i, record in enumerate(history.faults):
        assert record.fault_t - start_s == pytest.approx(5 + 8 * i)
        assert record.heal_t is not None and record.heal_t - record.fault_t == pytest.approx(3)
        assert record.in_force_t == record.fault_t  # the fake applies at once
    assert journal[::2] == [f"apply {r.name}" for r in history.faults] and all(
        j.startswith("heal") for j in journal[1::2]
    )
    assert not any(f.in_force for f in faults) and not schedule.errors
    assert [e.action for e in schedule.events] == ["apply", "heal"] * 7


def test_a_seed_replays_the_same_plan_and_the_deck_deals_every_fault_before_repeating() -> None:
    names = ("kill-master", "pause-master", "kill-broker", "pause-broker")
    config = {"quiet_s": (1.0, 9.0), "fault_s": (2.0, 7.0), "duration_s": 200.0, "combine_ratio": 0.5}
    plans = []
    for seed in (5, 5, 6):
        schedule, clock, journal, history, _ = make(names, seed, **config)
        drive(schedule, clock)
        plans.append([(e.t_s, e.action, e.faults) for e in schedule.events])
    assert plans[0] == plans[1] and plans[0] != plans[2]
    applied_at = [t for t, action, _ in plans[0] if action == "apply"]
    assert len(set(applied_at)) < len(applied_at)  # some windows combined two faults
    schedule, clock, journal, history, _ = make(names, 5, **{**config, "combine_ratio": 0.0})
    drive(schedule, clock)
    applied = [r.name for r in history.faults]
    assert len(applied) >= 8
    for start in range(0, len(applied) - 3, 4):
        assert sorted(applied[start : start + 4]) == sorted(names), applied


def test_the_last_window_is_cut_short_and_healed_at_the_end() -> None:
    schedule, clock, journal, history, faults = make(duration_s=10.0, fault_s=(8.0, 8.0))
    drive(schedule, clock)
    [record] = history.faults
    assert record.heal_t is not None and record.heal_t - record.fault_t == pytest.approx(5)
    assert journal == [f"apply {record.name}", f"heal {record.name}"] and not any(f.in_force for f in faults)


def test_combinations_join_only_faults_with_disjoint_targets() -> None:
    names = ("kill-master", "pause-master", "pause-broker", "clock-jump")
    schedule, clock, journal, history, faults = make(names, combine_ratio=1.0, combine_max=3, duration_s=100.0)
    by_name = {f.name: f for f in faults}
    assert not compatible(by_name["kill-master"], by_name["pause-master"])  # both act on "master"
    assert compatible(by_name["kill-master"], by_name["pause-broker"])  # no targets: its own name
    drive(schedule, clock)
    windows: dict[float, list[str]] = {}
    for record in history.faults:
        windows.setdefault(record.fault_t, []).append(record.name)
    assert len(windows) > 3 and all(len(w) == 3 for w in windows.values())
    assert all(sum(n.endswith("master") for n in w) == 1 for w in windows.values()), windows
    # healed in reverse order of application, each window before the next
    assert all(j.startswith("heal") for j in journal[3::6]) and not any(f.in_force for f in faults)


def test_a_failed_apply_is_healed_noted_and_the_schedule_goes_on() -> None:
    schedule, clock, journal, history, faults = make(fault_windows_max=2)
    faults[0].fail_apply = faults[1].fail_apply = True
    assert schedule.run_once() is not None  # started: a quiet window
    clock.advance_ms(5_000)
    schedule.run_once()  # the first fault window: its apply raises
    assert len(schedule.errors) == 1 and "no master to fault" in schedule.errors[0] and not history.faults
    faults[0].fail_apply = faults[1].fail_apply = False
    drive(schedule, clock)
    assert len(history.faults) == 1 and schedule.fault_windows == 2 and schedule.phase is Phase.DONE


def test_heal_all_ends_a_fault_window_at_once_and_is_idempotent() -> None:
    schedule, clock, journal, history, faults = make()
    schedule.run_once()
    clock.advance_ms(5_000)
    schedule.run_once()
    assert schedule.phase is Phase.FAULT and sum(f.in_force for f in faults) == 1
    schedule.heal_all()
    schedule.heal_all()
    assert not any(f.in_force for f in faults) and schedule.run_once() is None
    assert len(journal) == 2 and history.faults[0].heal_t is not None


def test_ready_is_awaited_before_each_fault_window_and_windows_max_ends_the_run() -> None:
    schedule, clock, journal, history, _ = make(fault_windows_max=3)
    readiness: list[int] = []
    schedule.ready = lambda: readiness.append(len(journal))
    drive(schedule, clock)
    assert readiness == [0, 2, 4] and schedule.fault_windows == 3 and len(history.faults) == 3


def test_a_ready_wait_past_the_end_applies_nothing() -> None:
    schedule, clock, journal, history, _ = make(duration_s=20.0)
    schedule.ready = lambda: clock.advance_ms(30_000)  # the cluster took 30 s to be whole again
    drive(schedule, clock)
    assert journal == [] and not history.faults and schedule.phase is Phase.DONE


def test_bad_configurations_and_the_seed_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ({"duration_s": 0}, {"duration_s": 1, "quiet_s": (2, 1)}, {"duration_s": 1, "combine_ratio": 2}):
        with pytest.raises(ValueError):
            ScheduleConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unique"):
        make(("kill-master", "kill-master"))
    monkeypatch.setenv("PYRMQ_CHAOS_SEED", "1234")
    assert chaos_seed() == 1234 and chaos_seed(7) == 7


# `make soak` (slow): ~30 s, and its faults (a master kill, a master pause past its lease) are in
# `make test` already (test_kill_master.py, test_hosts_faults.py); `make chaos` runs chaos.py whole.
# It keeps `make test` near its 10 minutes.
@pytest.mark.slow
@pytest.mark.needs("etcd")
def test_chaos_schedule_on_the_local_replica_cluster(tmp_path: Path) -> None:
    """A kill -9 of the master and a SIGSTOP of the master past its 2 s lease (the deck deals each
    once in two windows), under v2 NORMAL + FIFO + DELAY load and the official Python client:
    0 lost, 0 acknowledged by a fenced master, no other violation, drained."""
    seed = chaos_seed()
    print(f"repro: PYRMQ_CHAOS_SEED={seed} .venv/bin/python -m pytest -q '{TEST_ID}'")
    options = ChaosOptions(
        duration_s=60.0,  # a cap: the two windows end it
        seed=seed,
        faults=("kill-master", "pause-master"),
        quiet_s=(2.0, 3.0),
        fault_s=(3.5, 4.5),  # a pause outlives the 2 s lease: the group elects another master
        combine_ratio=0.0,
        fault_windows_max=2,
        drain_timeout_s=60.0,
        progress_every_s=30.0,
    )
    with local_chaos_cluster(tmp_path) as cluster:
        outcome = run_chaos(cluster, options, tmp_path / "clients")
        print(f"timeline:\n{outcome.timeline()}\n{report_table(outcome.report)}")
        report = outcome.report
        assert report.faults_applied == {"kill-master": 1, "pause-master": 1}, outcome.timeline()
        assert report.roles_recorded >= 5, outcome.timeline()  # two elections: each a loss, then a new master
        assert report.acked > 0 and report.delay_acked > 0 and any(k.startswith("o0-") for k in outcome.history.sends)
        assert not report.lost and not report.fenced_acks, f"seed {seed}\n{report.describe()}\n{cluster.logs()}"
        assert not outcome.failures, f"seed {seed}: {outcome.failures}\n{report.describe()}"


TEST_ID = "tests/faults/test_chaos_schedule.py::test_chaos_schedule_on_the_local_replica_cluster"
