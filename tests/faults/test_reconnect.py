"""How fast the services' store channels reconnect after the store restarts.

Every service reaches the store through ``services.runtime.rpc.tls.open_channel`` with
``DEFAULT_OPTIONS``. With gRPC's default reconnect backoff (1 s, x1.6 per failed attempt, up to
120 s) the broker's channel backed off to 2.6 s, 5.2 s, 9.3 s ... while a killed store
restarted, so the first put after the store was ready waited 1.4-4.1 s (test_kill_store.py),
and up to 120 s after a long outage; a plain channel down 6 s took 3.3 s to reconnect with the
defaults and 0.19 s with a 100 ms initial / 1 s maximum backoff, the options now set.
"""

from __future__ import annotations

import grpc
import pytest

import services.runtime.rpc.tls as tls
from services.store.client.client import GrpcStoreClient

RECONNECT_BACKOFF_MAX_MS = 1000


def channel_options(monkeypatch: pytest.MonkeyPatch, make) -> dict:
    seen: dict = {}
    real = grpc.insecure_channel

    def spy(target, options=None, *args, **kwargs):
        seen.update(dict(options or ()))
        return real(target, options, *args, **kwargs)

    monkeypatch.setattr(tls.grpc, "insecure_channel", spy)
    make("127.0.0.1:1").close()
    return seen


def test_store_channel_reconnects_within_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """One store client serves the broker, the scheduler and txcheck (services/store/client)."""
    options = channel_options(monkeypatch, GrpcStoreClient)
    assert options.get("grpc.max_reconnect_backoff_ms", 120_000) <= RECONNECT_BACKOFF_MAX_MS, options
