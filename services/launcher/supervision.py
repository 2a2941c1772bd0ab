"""How ``pyrmq up`` supervises its children once the cluster is up (issue 30): ``Supervisor``, a
loop body (``run_once``) over the children with an injected clock, so tests drive it without
processes or sleeps; services/launcher/up.py runs it every ``POLL_INTERVAL_S`` and does what it
decides.

The rules, per child (one row of services/launcher/topology.rows: ``store-b``, ``broker``, ...):

* A child that exits while ``up`` runs (any code: ``up`` signals its children only to stop
  them all) is restarted with the same settings after a backoff: ``backoff_initial_s`` (0.5 s),
  doubled after each exit up to ``backoff_max_s`` (30 s), and back to the first step once the
  child has been ready for ``backoff_reset_after_s`` (60 s). The other children keep serving
  meanwhile. A restarted child is ``running`` again once it prints its ready line.
* At most ``restarts_max`` (5) restarts per child within ``restart_window_s`` (60 s). A child
  that exits once more within that window is given up on; so is a restarted child that is not
  ready within ``ready_timeout_s`` (``READY_TIMEOUT_S`` of up.py), a service that cannot start
  any more. ``run_once`` then answers the reason, and ``up`` stops every service and exits 1:
  a cluster missing one of its rows for good is not left half running, silently.
  ``restarts_max`` 0 is no supervision: the first exit stops ``up`` (``--restart-limit 0``).

States (``ChildState``): ``running`` (ready), ``restarting`` (waiting out its backoff, or started
again and not ready yet), ``given-up``. ``stats()`` is what the state file and the metrics show
(services/launcher/supervisor_report.py).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from services.runtime.clock import Clock

log = logging.getLogger("pyrmq")


# fmt: off
@dataclass(frozen=True)
class RestartPolicy:
    backoff_initial_s: float = 0.5       # the wait before a child's first restart
    backoff_max_s: float = 30.0          # each later exit doubles the wait, up to this
    backoff_reset_after_s: float = 60.0  # a child ready this long restarts after backoff_initial_s again
    restarts_max: int = 5                # restarts per child within restart_window_s; one more exit: given up (0: none)
    restart_window_s: float = 60.0       # the window restarts_max counts in
    ready_timeout_s: float = 120.0       # a restarted child not ready by then is given up
    # fmt: on

    def __post_init__(self) -> None:
        if not 0 < self.backoff_initial_s <= self.backoff_max_s:
            raise ValueError(f"backoff_initial_s must be in (0, backoff_max_s], got {self.backoff_initial_s}")
        if self.restarts_max < 0:
            raise ValueError(f"restarts_max must be 0 or more, got {self.restarts_max}")
        for name in ("backoff_reset_after_s", "restart_window_s", "ready_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


class ChildState(enum.Enum):
    RUNNING = "running"
    RESTARTING = "restarting"
    GIVEN_UP = "given-up"


class SupervisedChild(Protocol):
    """A started child as the supervisor sees it (services/launcher/children.Child)."""

    @property
    def pid(self) -> int: ...

    def exit_code(self) -> int | None:
        """None while it runs."""

    def is_ready(self) -> bool:
        """Whether it printed its ready line."""

    def release(self) -> None:
        """Free what an exited child held (its log file)."""


@dataclass(frozen=True)
class ChildStats:
    """One child as the state file, the metrics and ``pyrmq status`` show it."""

    child: str  # the row's label: "store-b"
    pid: int  # the current process's (the exited one's while waiting to restart)
    state: ChildState
    restarts: int  # since ``up`` started
    last_exit_code: int | None  # of its last unexpected exit; None: it never exited
    last_restart_ms: int | None  # wall clock of its last restart; None: never restarted


C = TypeVar("C", bound=SupervisedChild)


class _Entry(Generic[C]):
    """The supervisor's record of one child (its current process and its history)."""

    def __init__(self, label: str, child: C, now_s: float, backoff_s: float) -> None:
        self.label = label
        self.child = child
        self.process_alive = True  # False: exited, waiting out its backoff (or given up)
        self.state = ChildState.RUNNING
        self.ready_since_s: float | None = now_s
        self.started_s = now_s
        self.restart_at_s = 0.0
        self.backoff_s = backoff_s
        self.recent_restarts_s: deque[float] = deque()  # restart times within the window
        self.restarts = 0
        self.last_exit_code: int | None = None
        self.last_restart_ms: int | None = None


class Supervisor(Generic[C]):
    """Restarts ``up``'s children that exit, with backoff and a limit (the module docstring)."""

    def __init__(
        self,
        children: dict[str, C],
        start: Callable[[str], C],
        clock: Clock,
        policy: RestartPolicy | None = None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        """``children``: label -> the child, each ready (the cluster is up); ``start(label)``
        starts the row again with its settings; ``on_change`` runs after any state change."""
        self.policy = policy or RestartPolicy()
        self._start = start
        self._clock = clock
        self._on_change = on_change
        now_s = clock.monotonic_s()
        self._entries = {
            label: _Entry(label, child, now_s, self.policy.backoff_initial_s) for label, child in children.items()
        }

    def run_once(self) -> str | None:
        """One look at every child: notice exits, restart those whose backoff is over, mark
        restarted ones ready. The reason ``up`` must stop (a child given up on), else None."""
        changed = False
        reason = None
        for entry in self._entries.values():
            step_changed, step_reason = self._step(entry)
            changed = changed or step_changed
            reason = reason or step_reason
        if changed:
            self._on_change()
        return reason

    def _step(self, entry: _Entry[C]) -> tuple[bool, str | None]:
        now_s = self._clock.monotonic_s()
        if entry.state is ChildState.GIVEN_UP:
            return False, None
        if entry.process_alive:
            code = entry.child.exit_code()
            if code is not None:
                return True, self._exited(entry, code, now_s)
            if entry.state is ChildState.RESTARTING:
                if entry.child.is_ready():
                    entry.state, entry.ready_since_s = ChildState.RUNNING, now_s
                    log.info("%s is ready again (pid %d, restart %d)", entry.label, entry.child.pid, entry.restarts)
                    return True, None
                if now_s - entry.started_s >= self.policy.ready_timeout_s:
                    entry.state = ChildState.GIVEN_UP
                    return True, (
                        f"{entry.label} was not ready within {self.policy.ready_timeout_s:g} s of its restart "
                        f"{entry.restarts}; giving up on it"
                    )
            return False, None
        if now_s < entry.restart_at_s:
            return False, None
        entry.child = self._start(entry.label)
        entry.process_alive = True
        entry.started_s = now_s
        entry.restarts += 1
        entry.recent_restarts_s.append(now_s)
        entry.last_restart_ms = self._clock.now_ms()
        log.info("%s restarted (pid %d, restart %d)", entry.label, entry.child.pid, entry.restarts)
        return True, None

    def _exited(self, entry: _Entry[C], code: int, now_s: float) -> str | None:
        """The child exited: schedule its restart, or give up on it (the reason)."""
        policy = self.policy
        entry.child.release()
        entry.process_alive = False
        entry.last_exit_code = code
        was_ready = entry.state is ChildState.RUNNING
        if was_ready and entry.ready_since_s is not None and now_s - entry.ready_since_s >= policy.backoff_reset_after_s:
            entry.backoff_s = policy.backoff_initial_s
        entry.ready_since_s = None
        while entry.recent_restarts_s and now_s - entry.recent_restarts_s[0] >= policy.restart_window_s:
            entry.recent_restarts_s.popleft()
        what = "exited unexpectedly" if was_ready else "exited before it was ready again"
        if len(entry.recent_restarts_s) >= policy.restarts_max:
            entry.state = ChildState.GIVEN_UP
            if policy.restarts_max == 0:
                return f"{entry.label} {what} with code {code}; not restarting it (restart limit 0)"
            return (
                f"{entry.label} {what} with code {code}; giving up on it: restarted "
                f"{len(entry.recent_restarts_s)} times within {policy.restart_window_s:g} s (the restart limit)"
            )
        delay_s = entry.backoff_s
        entry.backoff_s = min(entry.backoff_s * 2, policy.backoff_max_s)
        entry.restart_at_s = now_s + delay_s
        entry.state = ChildState.RESTARTING
        log.warning(
            "%s %s with code %d; restarting it in %g s (restart %d)", entry.label, what, code, delay_s, entry.restarts + 1
        )
        return None

    # -- what up and the reports read ----------------------------------------------------------
    def running(self) -> list[C]:
        """The children's processes that may still run (to stop them); not those waiting to restart."""
        return [entry.child for entry in self._entries.values() if entry.process_alive]

    def child(self, label: str) -> C:
        return self._entries[label].child

    def stats(self) -> list[ChildStats]:
        return [
            ChildStats(
                entry.label,
                entry.child.pid,
                entry.state,
                entry.restarts,
                entry.last_exit_code,
                entry.last_restart_ms,
            )
            for entry in self._entries.values()
        ]
