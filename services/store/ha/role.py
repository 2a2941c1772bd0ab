"""What a replica is right now, as the rest of the store reads it.

``ReplicaRole`` is built first of the store's parts (``FileStore.__init__``), because the metadata
tables and the pop engine ask it before every change (``check_writable``) and reput asks it how
far to dispatch (``dispatch_limit``), while ``Replication`` (ha/replication.py), built after
recovery, is the only one that changes it (under its role lock). Reads take no lock: each field
is one reference, replaced whole.
"""

from __future__ import annotations

from typing import Protocol

from services.domain.statuses import NOT_MASTER, PutStatus
from services.store.config import BrokerRole
from services.store.errors import NotMasterWriteError
from services.store.ha.ha_service import HAService

Refusal = tuple[PutStatus, str]


class WriteGate(Protocol):
    """A controller-mode master's checks (ha/controller_mode.py)."""

    def refuse_put(self) -> Refusal | None: ...
    def writable(self) -> bool: ...


class ReplicaRole:
    def __init__(self) -> None:
        self.role: BrokerRole | None = None  # None: no role (yet): controller mode electing, or stopped
        self.master_address = ""  # the master a slave follows
        self.gate: WriteGate | None = None  # controller mode: the master's lease and SyncStateSet checks
        self.ha_service: HAService | None = None  # a master's: its slaves' sessions
        # False until Replication takes the first role (``Replication.open``, at start): the
        # tables of a store not started refuse nothing.
        self.taken = False

    @property
    def is_slave(self) -> bool:
        return self.role is BrokerRole.SLAVE

    @property
    def is_master(self) -> bool:
        return self.role is not None and self.role is not BrokerRole.SLAVE

    def check_writable(self) -> None:
        """Raises NotMasterWriteError unless this replica is the writable master: every
        state-changing call but puts (which answer SERVICE_NOT_AVAILABLE: ``Replication.refuse_put``)."""
        if not self.taken:
            return
        if self.role is BrokerRole.SLAVE:
            raise NotMasterWriteError(f"{NOT_MASTER}: this store is a slave of {self.master_address}")
        if self.role is None:
            raise NotMasterWriteError(f"{NOT_MASTER}: its group is electing one")
        gate = self.gate
        if gate is not None and not gate.writable():
            raise NotMasterWriteError(f"{NOT_MASTER}: its lease or role is changing")

    def dispatch_limit(self) -> int | None:
        """How far reput may dispatch (``ReputService``'s ``limit``): a master's commit_offset (in
        controller mode: what its SyncStateSet confirmed); None (everything) otherwise."""
        ha = self.ha_service
        return ha.commit_offset() if ha is not None else None
