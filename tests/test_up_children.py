"""How ``pyrmq up`` starts and stops its children (services/launcher/children.py), without
processes: which rows start at once (``start_waves``) and the tiers they stop in (``stop_tiers``).
tests/test_up_groups.py, test_up_replicas.py and tests/broker/test_process.py run them for real."""

from __future__ import annotations

from types import SimpleNamespace

from services.launcher.children import start_waves, stop_tiers
from services.launcher.topology import ETCD, SERVICES

SPECS = {spec.name: spec for spec in (*SERVICES, ETCD)}


def rows(*labels: str) -> list:
    """(label, spec, namespace) rows as topology.rows makes them; the spec from the label."""
    return [(label, SPECS[label.split("-")[0]], lambda: None) for label in labels]


def labels(groups: list[list]) -> list[list[str]]:
    return [[item[0] if isinstance(item, tuple) else item.label for item in group] for group in groups]


def test_one_of_each_starts_the_store_then_the_broker_then_scheduler_and_txcheck_at_once() -> None:
    assert labels(start_waves(rows("store", "broker", "scheduler", "txcheck"))) == [
        ["store"],
        ["broker"],
        ["scheduler", "txcheck"],
    ]


def test_replicas_of_a_group_follow_its_first_and_groups_start_one_after_the_other() -> None:
    planned = rows(
        "etcd", "store", "store-1", "store-2", "store-b", "store-b-1", "store-b-2", "broker", "broker-1", "broker-2"
    )
    planned += rows("scheduler", "txcheck", "scheduler-b", "txcheck-b")
    assert labels(start_waves(planned)) == [
        ["etcd"],
        ["store"],
        ["store-1", "store-2"],  # each finds its master through etcd
        ["store-b"],
        ["store-b-1", "store-b-2"],
        ["broker"],
        ["broker-1", "broker-2"],  # they take the first broker's bound port
        ["scheduler", "txcheck", "scheduler-b", "txcheck-b"],
    ]


def test_children_stop_callers_first_each_tier_at_once() -> None:
    children = [
        SimpleNamespace(label=label, spec=spec)
        for label, spec, _ in rows(
            "etcd", "store", "store-1", "store-b", "broker", "broker-1", "scheduler", "txcheck", "scheduler-b"
        )
    ]
    assert labels(stop_tiers(children)) == [
        ["scheduler-b", "txcheck", "scheduler"],
        ["broker-1", "broker"],
        ["store-b", "store-1", "store"],
        ["etcd"],
    ]
