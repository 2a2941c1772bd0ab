"""GetReplicaStatus and SwitchMaster: conversions between the replica-set dataclasses
(services/store/ha/replica_status.py, ha/switch.py) and their protobufs."""

from __future__ import annotations

from pyrmq.store.v1 import store_pb2 as pb

from services.store.ha.replica_status import GroupStatus, ReplicaState
from services.store.ha.switch import SwitchResult


def replica_to_pb(r: ReplicaState) -> pb.ReplicaStatus:
    return pb.ReplicaStatus(
        replica_id=r.replica_id,
        role=r.role,
        address=r.address,
        epoch=r.epoch,
        max_offset=r.max_offset,
        confirmed_offset=r.confirmed_offset,
        in_sync=r.in_sync,
        lag_bytes=r.lag_bytes,
        lag_seconds=r.lag_seconds,
        connected=r.connected,
    )


def group_status_to_pb(status: GroupStatus) -> pb.GetReplicaStatusResponse:
    return pb.GetReplicaStatusResponse(
        group=status.group,
        replica_id=status.replica_id,
        broker_role=status.broker_role,
        controller_mode=status.controller_mode,
        master_id=status.master_id,
        master_address=status.master_address,
        master_epoch=status.master_epoch,
        sync_state_set=list(status.sync_state_set),
        sync_state_set_epoch=status.sync_state_set_epoch,
        replicas=[replica_to_pb(r) for r in status.replicas],
    )


def switch_result_to_pb(result: SwitchResult) -> pb.SwitchMasterResponse:
    return pb.SwitchMasterResponse(
        master_id=result.master_id,
        master_address=result.master_address,
        master_epoch=result.master_epoch,
        handover_offset=result.handover_offset,
        paused_ms=result.paused_ms,
    )
