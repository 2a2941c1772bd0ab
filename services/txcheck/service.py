"""CheckService: the thread that runs ``HalfMessageChecker`` passes (RocketMQ's
``TransactionalMessageCheckService``).

A pass, then a wait of ``check_interval_ms``; at once again if the pass was cut short by its
budget; ``retry_after_failure_ms`` after a pass the store failed. ``healthy`` is whether the
last pass succeeded (the gRPC health status follows it). ``run_once`` is one loop turn
without the wait, for tests.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from services.store.client.errors import StoreError
from services.txcheck.config import TxCheckConfig
from services.txcheck.half_message_checker import HalfMessageChecker

log = logging.getLogger(__name__)

STOP_JOIN_S = 10.0


class CheckService:
    def __init__(
        self,
        checker: HalfMessageChecker,
        config: TxCheckConfig,
        on_health: Callable[[bool], None] = lambda healthy: None,
    ) -> None:
        self._checker = checker
        self._config = config
        self._on_health = on_health
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.healthy = True

    def run_once(self) -> float:
        """One pass; how long to wait before the next one, seconds."""
        try:
            handled = self._checker.run_once()
        except StoreError as exc:
            self._set_health(False)
            log.warning("transaction check pass failed: %s", exc)
            return self._config.retry_after_failure_ms / 1000
        except Exception:  # a bug: log it, keep checking
            self._set_health(False)
            log.exception("transaction check pass failed")
            return self._config.retry_after_failure_ms / 1000
        self._set_health(True)
        if handled:
            log.debug("transaction check pass handled %d half messages", handled)
        return 0.0 if not self._checker.round_complete else self._config.check_interval_ms / 1000

    def _set_health(self, healthy: bool) -> None:
        if healthy != self.healthy:
            log.info("transaction checker %s", "healthy again" if healthy else "unhealthy")
        self.healthy = healthy
        self._on_health(healthy)

    def start(self) -> None:
        assert self._thread is None, "started twice"
        self._thread = threading.Thread(target=self._run, name="txcheck", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(STOP_JOIN_S)

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._stopped.wait(self.run_once())
