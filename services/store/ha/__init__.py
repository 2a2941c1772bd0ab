"""A store replica set (issue 16): CommitLog replication from the master to its slaves, and
RocketMQ 5's controller mode with etcd holding the consensus and every replica running the
controller logic for itself.

The role: role.py (``ReplicaRole``, what the replica is now) and replication.py (its changes).
The CommitLog's way to the slaves: ha_service.py (the master's side), ha_client.py and
replica_log.py (the slave's), epoch_file.py; config_sync.py carries the ``config/`` tables on the
same stream. Controller mode: controller.py (a replica's ReplicaController: membership under a
lease, the transactions, the master's writability; the ElectionLoop), controller_mode.py (its
loop, the master's WriteGate), sync_state.py (the SyncStateSet), switch.py (a planned master
switch); the etcd keys, the election rules and the watched views are services/coordination/.
replica_status.py answers ``pyrmq status`` and the metrics.
"""
