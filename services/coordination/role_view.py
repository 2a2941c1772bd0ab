"""Who is master of a group, as seen through an etcd watch (``RoleView``, a ``PrefixView`` of
the group's keys: prefix_view.py). Brokers, the scheduler, txcheck and slaves follow the master
through it. It may lag etcd by the watch's delivery time: it is good for routing, never for
fencing, which is the transactions' and the lease's job (services/store/ha/controller.py).
"""

from __future__ import annotations

from services.coordination.group_keys import GroupKeys
from services.coordination.group_state import GroupState
from services.coordination.prefix_view import PrefixView
from services.runtime.etcd import Event, KeyValue
from services.runtime.etcd.rpc.client import EtcdClient


class RoleView(PrefixView[GroupState]):
    """A group's master, masterEpoch, SyncStateSet and live replicas (``state``, an immutable
    GroupState), kept current by a watch."""

    def __init__(self, etcd: EtcdClient, keys: GroupKeys) -> None:
        super().__init__(etcd, keys.root, GroupState(keys), f"group {keys.group}")
        self.keys = keys

    def read(self, kvs: tuple[KeyValue, ...], revision: int) -> GroupState:
        return GroupState.from_kvs(self.keys, kvs, revision)

    def apply(self, state: GroupState, events: list[Event]) -> GroupState:
        return state.apply(events)
