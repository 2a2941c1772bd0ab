"""The one table from store outcomes to gRPC status codes, and the decorator that applies it.

Two kinds of outcome reach a servicer method (docs/conventions.md, rule 5):

* typed results (``PutStatus``, ``GetStatus``): data on the hot path, returned in the response.
  Only a put batch refused *as a whole* with a status whose code below is UNAVAILABLE fails
  the call (so a client's ordinary retry on UNAVAILABLE covers a store that is going away);
  ``GetStatus`` is always data.
* exceptions: bad input is a ``ValueError`` (``PropertiesError``, a malformed offset message
  id, a bad host string), a missing message/topic/group is a ``LookupError`` (the servicer
  raises it when the core returns ``None``), a store that is closed or not started raises
  ``StoreNotRunningError`` or reports ``SERVICE_NOT_AVAILABLE`` (``ServiceNotAvailableError``).

Servicer methods never call ``context.abort`` themselves: they raise, and ``rpc_errors`` aborts
once with the table's code. Anything else is a bug: it is logged with its traceback and reported as INTERNAL.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc

from services.domain.statuses import PutStatus
from services.store.errors import (
    MasterSwitchError,
    MasterSwitchTimeoutError,
    NotMasterError,
    NotMasterWriteError,
    ServiceNotAvailableError,
    StoreNotRunningError,
    TooManyWatchersError,
)
from services.store.model import PutResult

log = logging.getLogger(__name__)


Code = grpc.StatusCode

# Exceptions, most specific first: the first entry the exception is an instance of wins.
EXCEPTION_CODES: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (NotMasterWriteError, Code.UNAVAILABLE),  # a state change on a slave: the client retries on the master
    (ServiceNotAvailableError, Code.UNAVAILABLE),
    (StoreNotRunningError, Code.UNAVAILABLE),  # used before start() or after shutdown()
    (TooManyWatchersError, Code.RESOURCE_EXHAUSTED),
    (NotMasterError, Code.FAILED_PRECONDITION),  # Replicate on a slave
    (MasterSwitchTimeoutError, Code.DEADLINE_EXCEEDED),  # SwitchMaster: the target did not confirm in time
    (MasterSwitchError, Code.FAILED_PRECONDITION),  # SwitchMaster: not possible now
    (ValueError, Code.INVALID_ARGUMENT),  # includes PropertiesError and UnicodeError
    (LookupError, Code.NOT_FOUND),  # includes KeyError
)

# Every put status, with the code a caller surfacing it as an error should use.
PUT_STATUS_TO_GRPC: dict[PutStatus, grpc.StatusCode] = {
    PutStatus.PUT_OK: Code.OK,
    PutStatus.FLUSH_DISK_TIMEOUT: Code.DEADLINE_EXCEEDED,
    PutStatus.SERVICE_NOT_AVAILABLE: Code.UNAVAILABLE,
    PutStatus.CREATE_MAPPED_FILE_FAILED: Code.INTERNAL,
    PutStatus.MESSAGE_ILLEGAL: Code.INVALID_ARGUMENT,
    PutStatus.PROPERTIES_SIZE_EXCEEDED: Code.INVALID_ARGUMENT,
    PutStatus.TOPIC_ILLEGAL: Code.INVALID_ARGUMENT,
    PutStatus.TOPIC_NOT_FOUND: Code.NOT_FOUND,
    PutStatus.QUEUE_ID_ILLEGAL: Code.INVALID_ARGUMENT,
    PutStatus.OS_PAGE_CACHE_BUSY: Code.RESOURCE_EXHAUSTED,
    PutStatus.UNKNOWN_ERROR: Code.INTERNAL,
    PutStatus.FLUSH_SLAVE_TIMEOUT: Code.DEADLINE_EXCEEDED,
    PutStatus.HA_NOT_AVAILABLE: Code.FAILED_PRECONDITION,  # an answer, not UNAVAILABLE: the broker maps it to 50002
    PutStatus.LMQ_QUOTA_EXCEEDED: Code.RESOURCE_EXHAUSTED,
}
assert set(PUT_STATUS_TO_GRPC) == set(PutStatus), "every PutStatus needs a code"


def code_for_exception(exc: BaseException) -> grpc.StatusCode:
    for exc_type, code in EXCEPTION_CODES:
        if isinstance(exc, exc_type):
            return code
    return Code.INTERNAL


def check_put_batch(results: list[PutResult]) -> None:
    """Raise ServiceNotAvailableError if the whole batch was refused as unavailable."""
    if results and all(PUT_STATUS_TO_GRPC[r.status] is Code.UNAVAILABLE for r in results):
        reason = results[0].error or results[0].status.name
        raise ServiceNotAvailableError(f"store refused the batch: {reason}")


def check_put_status(status: PutStatus, error: str, count: int) -> None:
    """:func:`check_put_batch` for a batch answered with one status."""
    if count and PUT_STATUS_TO_GRPC[status] is Code.UNAVAILABLE:
        raise ServiceNotAvailableError(f"store refused the batch: {error or status.name}")


DETAILS_MAX_CHARS = 1_024


def _abort(context: grpc.ServicerContext, method: str, exc: Exception) -> None:
    code = code_for_exception(exc)
    if code is Code.INTERNAL:
        log.exception("Store.%s failed", method)
        context.abort(code, f"internal error: {type(exc).__name__}: {exc}")
    # KeyError's str() quotes its argument; show the plain message instead.
    detail = str(exc.args[0] if isinstance(exc, KeyError) and exc.args else exc) or type(exc).__name__
    if len(detail) > DETAILS_MAX_CHARS:  # a trailer over gRPC's metadata limit would hide the code
        detail = detail[: DETAILS_MAX_CHARS - 20] + f"... ({len(detail)} chars)"
    context.abort(code, detail)


Method = TypeVar("Method", bound=Callable[..., Any])


def rpc_errors(method: Method) -> Method:
    """Turn exceptions raised by a servicer method into ``context.abort`` with the table's code.

    Works for unary methods and for server-streaming (generator) methods.
    """
    name = method.__name__
    if inspect.isgeneratorfunction(method):

        @functools.wraps(method)
        def stream(self: Any, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            try:
                yield from method(self, request, context)
            except Exception as exc:  # noqa: BLE001 - mapped by the table, bugs logged
                _abort(context, name, exc)

        return stream  # type: ignore[return-value]

    @functools.wraps(method)
    def unary(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except Exception as exc:  # noqa: BLE001 - mapped by the table, bugs logged
            _abort(context, name, exc)

    return unary  # type: ignore[return-value]
