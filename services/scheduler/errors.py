"""Scheduler errors (no gRPC here).

    SchedulerError
    ├── StoreUnavailableError   a store call failed or timed out: retry later, state unchanged
    └── SchedulerLockedError    another scheduler process holds the data directory
"""
from __future__ import annotations


class SchedulerError(Exception):
    """An expected failure of the scheduler."""


class StoreUnavailableError(SchedulerError):
    """The store could not be reached, refused the call as a whole, or did not answer in time."""


class SchedulerLockedError(SchedulerError):
    """Another scheduler holds ``<root>/lock``."""
