"""A store replica set's coordination through etcd (issue 16): RocketMQ 5's controller mode
with etcd holding the consensus and every replica running the controller logic for itself.

keys.py is the key layout and the JSON of each value; model.py the decisions without I/O
(electMaster, alterSyncStateSet, DefaultElectPolicy, RocketMQ's response codes);
controller.py a replica's ReplicaController (membership under a lease, the transactions,
the master's writability); role.py the watched RoleView and the ElectionLoop.
"""
