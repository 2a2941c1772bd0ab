"""Faults fixtures: a real etcd member for the replica-set runs (tests/support/etcd.py)."""

from __future__ import annotations

from tests.support.etcd import etcd_server  # noqa: F401 - fixture
