"""The etcd client's logic without I/O (services/runtime/etcd/model.py): prefix ranges, endpoint
rotation, the lease schedule, comparisons."""

from __future__ import annotations

import pytest

from services.runtime.etcd import Compare, prefix_range_end
from services.runtime.etcd.model import EndpointRotation, LeaseSchedule


@pytest.mark.parametrize(
    ("prefix", "end"),
    [(b"/pyrmq/", b"/pyrmq0"), (b"a\xff", b"b"), (b"a\xff\xff", b"b"), (b"\xff", b"\0"), (b"", b"\0")],
)
def test_prefix_range_end(prefix: bytes, end: bytes) -> None:
    assert prefix_range_end(prefix) == end


def test_rotation_starts_at_the_endpoint_that_answered_last() -> None:
    rotation = EndpointRotation(["a", "b", "c"])
    assert rotation.order() == [0, 1, 2]
    rotation.answered(2)
    assert rotation.order() == [2, 0, 1]
    with pytest.raises(ValueError):
        EndpointRotation([])


def test_lease_is_held_one_ttl_after_the_last_answered_send() -> None:
    schedule = LeaseSchedule(lease_id=7, ttl_s=3, granted_at_s=100.0)
    assert schedule.due_at_s() == 101.0
    assert schedule.held(102.9) and not schedule.held(103.0)
    schedule.renewed(sent_at_s=101.5, ttl_s=3)  # answered late: counts from the send
    assert schedule.held(104.4) and not schedule.held(104.5)
    assert schedule.due_at_s() == 102.5
    schedule.renewed(sent_at_s=102.5, ttl_s=0)  # etcd: lease not found
    assert schedule.lost and not schedule.held(102.6)


def test_compare_operand_type_follows_the_target() -> None:
    assert Compare.value(b"k", b"v").target == "VALUE"
    assert Compare.mod_revision(b"k", 5, "LESS").result == "LESS"
    with pytest.raises(ValueError):
        Compare(b"k", "VALUE", 3)
    with pytest.raises(ValueError):
        Compare(b"k", "MOD", b"3")
