"""Every failure of a store call, as one tree (what a caller may do differs by branch):

    StoreError                   the call failed; the message says which and why
    ├── StoreUnavailableError    the store could not be reached, is not serving, or the client is closed
    ├── StoreTimeoutError        no answer within the deadline: the outcome is unknown
    ├── StoreRejectedError       the store refused the request's content (gRPC INVALID_ARGUMENT)
    └── StoreNotFoundError       what the request names does not exist (gRPC NOT_FOUND)

Refusals that are answers (a put's ``PutStatus``, an ack's ``AckResult``) are values, not errors.
"""

from __future__ import annotations

import grpc


class StoreError(Exception):
    """A store call failed. ``code``: the gRPC status name, "" when the call never reached it."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class StoreUnavailableError(StoreError):
    pass


class StoreTimeoutError(StoreError):
    pass


class StoreRejectedError(StoreError):
    pass


class StoreNotFoundError(StoreError):
    pass


_UNAVAILABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})


def error_for_status(code: grpc.StatusCode | None, details: str, what: str) -> StoreError:
    """The ``StoreError`` for a call ``what`` that ended with gRPC status ``code``."""
    if code is grpc.StatusCode.DEADLINE_EXCEEDED:
        return StoreTimeoutError(f"store did not answer {what} in time", code.name)
    if code is grpc.StatusCode.INVALID_ARGUMENT:
        return StoreRejectedError(f"store refused {what}: {details}", code.name)
    name = code.name if code is not None else "UNKNOWN"
    message = f"store failed {what}: {name} {details}"
    if code is grpc.StatusCode.NOT_FOUND:
        return StoreNotFoundError(message, name)
    if code in _UNAVAILABLE:
        return StoreUnavailableError(message, name)
    return StoreError(message, name)
