"""What every pyrmq service process shares: logging set-up, stop signals, address formatting.

Used by the ``__main__`` of each service (store, broker; later scheduler and txcheck).
"""
from __future__ import annotations

import logging
import signal
import sys
import threading

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
SIGNAL_POLL_INTERVAL_S = 0.2


def configure_logging() -> None:
    """One line per event on stderr (stdout carries only the ready line)."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=LOG_FORMAT)


def format_address(host: str, port: int) -> str:
    """``host:port``, with brackets around an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class StopSignals:
    """Records SIGTERM and SIGINT. The handler only appends to a list: taking a lock inside a
    signal handler (Event.set, logging) can deadlock the main thread it interrupted, so the main
    thread polls instead (``wait``)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.received.append(signum)

    def __bool__(self) -> bool:
        return bool(self.received)

    def wait(self) -> str:
        """Block until a stop signal arrives; returns its name."""
        idle = threading.Event()  # never set: an interruptible sleep
        while not self.received:
            idle.wait(SIGNAL_POLL_INTERVAL_S)
        return signal.Signals(self.received[0]).name
