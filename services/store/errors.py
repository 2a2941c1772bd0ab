"""The store's exceptions, in one place (no gRPC here: ``rpc/status.py`` maps them to codes).

    RuntimeError
    ├── StoreNotRunningError     the store was used before start() or after shutdown()
    ├── StoreLockedError         another process holds the store root's lock file
    └── CommitLogCorruptError    damaged durable CommitLog data: the store will not start
    ValueError
    ├── AuthConfigError          a user or ACL that cannot be stored
    └── FastjsonDecodeError      text that is not fastjson-flavoured JSON
    Exception
    ├── MetadataFileError        a metadata file and its ``.bak`` both fail to decode
    ├── ServiceNotAvailableError  the store does not serve the call now (SERVICE_NOT_AVAILABLE; gRPC UNAVAILABLE)
    │   └── NotMasterWriteError  a state-changing call on a replica that is not the writable master
    ├── TooManyWatchersError     the server's limit of WatchArrivals streams is reached
    └── MasterSwitchError        a planned master switch that cannot be done (FAILED_PRECONDITION)
        └── MasterSwitchTimeoutError  the target did not confirm in time (DEADLINE_EXCEEDED)

Errors of the pure byte formats (``PropertiesError``, ``CorruptRecord``, ...) and of the SQL
filter stay with them in ``services/domain``.
"""

from __future__ import annotations


class StoreNotRunningError(RuntimeError):
    """The store was used before start() or after shutdown()."""


class StoreLockedError(RuntimeError):
    """Another process holds the store root's lock file."""


class CommitLogCorruptError(RuntimeError):
    """Damaged CommitLog data with valid records after it: the store will not start."""

    def __init__(self, phy_offset: int, next_valid_offset: int, reason: str) -> None:
        super().__init__(
            f"CommitLog damaged at phy_offset {phy_offset} ({reason}), yet a valid record follows at "
            f"phy_offset {next_valid_offset}: refusing to truncate acknowledged data. Inspect the "
            f"segment, or start with allow_truncate_corrupt to drop everything from {phy_offset}."
        )
        self.phy_offset = phy_offset
        self.next_valid_offset = next_valid_offset
        self.reason = reason


class AuthConfigError(ValueError):
    """A user or ACL that cannot be stored (INVALID_ARGUMENT)."""


class FastjsonDecodeError(ValueError):
    """The text is not fastjson-flavoured JSON; ``pos`` is the offending character index."""

    def __init__(self, message: str, pos: int) -> None:
        super().__init__(f"{message} at char {pos}")
        self.pos = pos


class MetadataFileError(Exception):
    """A metadata file and its ``.bak`` exist but neither can be decoded."""


class ServiceNotAvailableError(Exception):
    """The store does not serve the call now: a put batch refused whole with SERVICE_NOT_AVAILABLE
    (not running, a slave, disk full), or a change on a replica that is not the writable master.
    (The client's ``StoreUnavailableError`` is what its callers see: the store not reached, not
    serving, or the client closed.)"""


class NotMasterWriteError(ServiceNotAvailableError):
    """A state-changing call (topic, group, offset, pop, ack, user...) on a replica that is not
    the writable master: refused so that no replica diverges from what the master replicates."""


class TooManyWatchersError(Exception):
    """WatchArrivals: the server's limit of open watch streams is reached."""


class ReplicaOffsetError(ValueError):
    """Replicated CommitLog bytes offered at another offset than the replica's max phy_offset,
    or a truncation to an offset that is not a record boundary of the replica's CommitLog."""

    def __init__(self, message: str, phy_offset: int, expected_offset: int) -> None:
        super().__init__(message)
        self.phy_offset = phy_offset
        self.expected_offset = expected_offset


class ReplicaDataError(ValueError):
    """Replicated CommitLog bytes that are not whole, valid records (nothing was written)."""

    def __init__(self, phy_offset: int, reason: str) -> None:
        super().__init__(f"replicated bytes at phy_offset {phy_offset} are not whole valid records: {reason}")
        self.phy_offset = phy_offset
        self.reason = reason


class NotMasterError(Exception):
    """A master-only call (Replicate) reached a replica that is not the master."""


class ReplicationError(Exception):
    """The slave cannot follow this master (no epoch in common, bytes it no longer has)."""


class MasterSwitchError(Exception):
    """A planned master switch that cannot be done: the target is not an in-sync, connected
    replica, or the handover transaction lost a race (writes resumed, nothing changed)."""


class MasterSwitchTimeoutError(MasterSwitchError):
    """The switch's target did not confirm the master's log in time (writes resumed)."""
