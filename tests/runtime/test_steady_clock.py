"""services/runtime/clock.py SteadyClock: the wall clock at the monotonic clock's pace; a jump of
the system clock is taken in slowly, and the clock never goes back."""

from __future__ import annotations

from services.runtime.clock import SteadyClock


class HostClock:
    """A host's two clocks, moved apart by hand (a wall-clock jump leaves monotonic time alone)."""

    def __init__(self) -> None:
        self.wall_ms = 1_700_000_000_000
        self.mono_s = 100.0

    def now_ms(self) -> int:
        return self.wall_ms

    def monotonic_s(self) -> float:
        return self.mono_s

    def tick(self, ms: int) -> None:
        self.wall_ms += ms
        self.mono_s += ms / 1000


def test_it_follows_the_wall_clock_and_small_corrections():
    host = HostClock()
    clock = SteadyClock(host)
    host.tick(1_000)
    assert clock.now_ms() == host.wall_ms
    host.wall_ms += 200  # drift or an NTP slew: followed at once
    host.tick(10)
    assert clock.now_ms() == host.wall_ms


def test_a_forward_jump_is_taken_in_slowly_so_nothing_fires_early():
    host = HostClock()
    clock = SteadyClock(host, slew_ratio=0.05)
    start = clock.now_ms()
    host.wall_ms += 30_000  # the host's clock jumps 30 s ahead
    host.tick(1_000)
    assert clock.now_ms() == start + 1_000 + 50  # 1 s passed, plus 5 % of it
    for _ in range(700):
        host.tick(1_000)
    assert clock.now_ms() == host.wall_ms  # caught up after 600 s, then follows it


def test_a_backward_jump_never_turns_the_clock_back():
    host = HostClock()
    clock = SteadyClock(host, slew_ratio=0.05)
    start = clock.now_ms()
    host.wall_ms -= 30_000
    readings = []
    for _ in range(10):
        host.tick(100)
        readings.append(clock.now_ms())
    assert readings == sorted(readings) and readings[0] > start
    assert readings[-1] == start + 1_000 - 50  # 1 s passed, 5 % of it given back
