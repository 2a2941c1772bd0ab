"""One real store + broker for the whole bad-input package: the module-scoped ``cluster``
fixture (tests/support/badinput_cluster.py). A test module may set ``BROKER_OVERRIDES``
(BrokerConfig fields) for its cluster."""

from __future__ import annotations

from tests.support.badinput_cluster import cluster  # noqa: F401 - fixture
