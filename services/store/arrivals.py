"""ArrivalBus: the store's announcements that a queue has something new to read.

Publishers:

* reput, after each dispatched batch: one ``Arrival`` per queue that grew;
* the pop engine (``PopService`` on an ack or a forward to the DLQ, ``ReviveService`` on
  expiry): FIFO queues whose lock was released (no new message, but a pop can now return one).

Subscribers are long-polling readers: each gRPC WatchArrivals stream (``rpc/servicer.py``),
tests. ``publish`` runs on the publisher's thread (reput's, a gRPC worker's, the revive
loop's), so a listener must be quick and never block; one that raises is logged and skipped,
it never stops dispatch or fails an ack.

The listener set is an immutable tuple replaced on (un)subscribe, so ``publish`` iterates it
without a lock or a copy.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from services.store.model import Arrival

log = logging.getLogger(__name__)

ArrivalListener = Callable[[list[Arrival]], None]


class ArrivalBus:
    def __init__(self) -> None:
        self._listeners: tuple[ArrivalListener, ...] = ()
        self._lock = threading.Lock()  # serialises (un)subscribe; publish reads the tuple

    @property
    def has_listeners(self) -> bool:
        """Publishers check it to skip building arrivals nobody hears."""
        return bool(self._listeners)

    def subscribe(self, listener: ArrivalListener) -> Callable[[], None]:
        """Call ``listener`` with every published batch until the returned function is called."""
        with self._lock:
            self._listeners += (listener,)

        def unsubscribe() -> None:
            with self._lock:
                listeners = list(self._listeners)
                try:
                    listeners.remove(listener)
                except ValueError:
                    return
                self._listeners = tuple(listeners)

        return unsubscribe

    def publish(self, arrivals: list[Arrival]) -> None:
        for listener in self._listeners:
            try:
                listener(arrivals)
            except Exception:  # a listener must never stop dispatch nor fail an ack
                log.exception("arrival listener failed")
