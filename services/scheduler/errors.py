"""Scheduler errors (no gRPC here).

    SchedulerError
    └── SchedulerLockedError    another scheduler process holds the data directory

A failed store call is the store client's ``StoreError``: the loops retry later, state unchanged.
"""

from __future__ import annotations


class SchedulerError(Exception):
    """An expected failure of the scheduler."""


class SchedulerLockedError(SchedulerError):
    """Another scheduler holds ``<root>/lock``."""
