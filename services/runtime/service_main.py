"""How every pyrmq service process starts, reports ready and stops: ``run_service``.

Each ``services/<name>/__main__.py`` gives three things: how it reads its config, how it starts
(``start``: builds its parts, registers each part's teardown on an ``ExitStack``, returns the
fields of its ready line, or None when a stop signal came before it was ready), and which
errors are expected failures (logged in one line, not with a traceback). ``run_service`` does
the rest, the same way for all:

1. logging on stderr with defaults; the config (a ``ValueError`` there: exit code 2); logging
   with the service's own level and format; its ``cpu_affinity`` if it has one;
2. SIGTERM and SIGINT recorded (``StopSignals``), then ``start``;
3. exactly one line on stdout once it serves: ``pyrmq-<name> ready key=value ...``;
4. on a stop signal, the teardowns in reverse order of set-up; exit code 0, or 1 on a failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import Protocol, TypeVar

from services.runtime.clock import Clock, SystemClock
from services.runtime.process import StopSignals, apply_cpu_affinity, configure_logging

LOCK_RETRY_INTERVAL_S = 0.2


class ServiceConfig(Protocol):
    @property
    def log_level(self) -> str: ...

    @property
    def log_format(self) -> str: ...


C = TypeVar("C", bound=ServiceConfig)
StartFn = Callable[[C, ExitStack, StopSignals], "Mapping[str, object] | None"]


def ready_line(name: str, fields: Mapping[str, object]) -> str:
    """``pyrmq-<name> ready grpc=... metrics=...``: what ``pyrmq up`` and the tests wait for."""
    return f"pyrmq-{name} ready " + " ".join(f"{key}={value}" for key, value in fields.items())


def run_service(
    name: str,
    argv: list[str] | None,
    load_config: Callable[[list[str] | None], C],
    start: StartFn[C],
    *,
    label: str | None = None,
    expected_errors: tuple[type[BaseException], ...] = (),
) -> int:
    """Run service ``name`` until a stop signal; returns the process exit code. ``label`` names
    it in the log lines (``<label> failed: ...``, ``<label> stopped``; default ``name``)."""
    log = logging.getLogger(f"services.{name}")
    label = label or name
    configure_logging()
    try:
        config = load_config(argv)
        configure_logging(name, config.log_level, config.log_format)
        cpus = apply_cpu_affinity(getattr(config, "cpu_affinity", ""))
        if cpus:
            log.info("running on CPUs %s", ",".join(map(str, sorted(cpus))))
    except ValueError as exc:
        log.error("bad configuration: %s", exc)
        return 2

    received = StopSignals()
    failures: tuple[type[BaseException], ...] = (OSError, *expected_errors)  # OSError: a port that cannot be bound
    stack = ExitStack()
    try:
        fields = start(config, stack, received)
        if fields is None:
            log.info("stopped before the store was ready")
            return 0
        print(ready_line(name, fields), flush=True)
        log.info("received %s, stopping", received.wait())
    except failures as exc:
        log.error("%s failed: %s", label, exc)
        return 1
    except Exception:
        log.exception("%s failed", label)
        return 1
    finally:
        stack.close()
        log.info("%s stopped", label)
    return 0


def retry_while_locked(
    open_fn: Callable[[], None],
    locked: type[BaseException],
    wait_s: float,
    received: StopSignals,
    clock: Clock | None = None,
    on_wait: Callable[[], None] = lambda: None,
) -> None:
    """``open_fn()``, retried while it raises ``locked`` (a process killed a moment ago, by a
    kill -9 of ``pyrmq up`` or a container restart, may not have exited and released its data
    directory's lock yet), for up to ``wait_s``; a stop signal ends the wait (``locked`` is
    raised again). ``on_wait`` runs before each retry (to log it)."""
    clock = clock or SystemClock()
    deadline_s = clock.monotonic_s() + wait_s
    while True:
        try:
            open_fn()
            return
        except locked:
            if clock.monotonic_s() >= deadline_s or received:
                raise
            on_wait()
            received.sleep(LOCK_RETRY_INTERVAL_S)
