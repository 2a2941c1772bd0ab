"""Every error the pipeline raises on purpose: a bad option, a corrupt store file, records lost
to retention, a broker without the records API."""

from __future__ import annotations


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (failOnDataLoss=true)."""


class RecordsUnsupported(RuntimeError):
    """The broker at an endpoint does not serve pyrmq.pull.v1.Pull (use PullMessage)."""


class CorruptSegment(ValueError):
    """A record's length arithmetic does not add up (the message names the phy offset)."""


class OptionError(ValueError):
    """A source or sink option is missing, malformed or not allowed here."""


class TruncatedRecords(ValueError):
    """A response's bytes do not hold exactly ``record_count`` whole records."""
