"""The gRPC server's worker pool, timed: how long the running call waited for a worker.

grpcio's sync server hands every call to its ``ThreadPoolExecutor`` (``submit``) and, when all
workers are busy, the call waits in the executor's queue before any handler runs. Under
overload that queue is where time goes, so shedding that only looks at the broker's own send
queue never triggers. ``TimedThreadPool`` records, per worker thread, the queue wait of the
call it is running; ``SendMessage`` refuses a send that waited longer than
``put_queue_wait_max_ms`` with TOO_MANY_REQUESTS before doing any work (RocketMQ's
waitTimeMillsInSendQueue, applied one hop earlier), so a refused send is cheap and definite.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any


class TimedThreadPool(futures.ThreadPoolExecutor):
    def __init__(self, max_workers: int, thread_name_prefix: str, monotonic_s: Callable[[], float]) -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self._monotonic_s = monotonic_s
        self._local = threading.local()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        return super().submit(self._timed, self._monotonic_s(), fn, args, kwargs)

    def _timed(self, submitted_s: float, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        local = self._local
        local.waited_s = self._monotonic_s() - submitted_s
        try:
            return fn(*args, **kwargs)
        finally:
            local.waited_s = 0.0

    def waited_s(self) -> float:
        """Seconds the call running on this thread waited for a worker (0.0 off the pool)."""
        return getattr(self._local, "waited_s", 0.0)
