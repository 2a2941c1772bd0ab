"""v2 ``Status`` building and the one place broker errors become responses.

Errors are in band: every response carries ``status`` with a non-zero code (the Py client raises
"response is illegal" on a missing one or code 0) and the gRPC status stays OK. ``in_band`` wraps a
unary servicer method: ``BrokerError`` -> its code, anything else -> INTERNAL_SERVER_ERROR
(logged with its traceback, a bug). Only Telemetry uses real gRPC status codes.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

import grpc
from apache.rocketmq.v2 import definition_pb2 as d

from services.broker.errors import FAILURES, BrokerError, Code, as_broker_error

log = logging.getLogger(__name__)

# Pair assertion: our Code is the proto's, name for name, value for value.
assert {c.name: c.value for c in Code} == dict(d.Code.items()), "errors.Code drifted from definition.proto"

CLIENT_ID_HEADER = "x-mq-client-id"


def status(code: int, message: str | None = None) -> d.Status:
    # cast: the stub types the field as the proto's enum class; any of its numbers is one (Code's are)
    return d.Status(code=cast(d.Code, code), message=message if message is not None else Code(code).name)


OK_STATUS = status(Code.OK, "OK")


def client_id_of(context: grpc.ServicerContext) -> str:
    for key, value in context.invocation_metadata():
        if key == CLIENT_ID_HEADER:
            text = value if isinstance(value, str) else value.decode("utf-8", "replace")
            return text if text.strip() else ""  # a blank id is no id (the proxy's isBlank)
    return ""


class Peers(Protocol):
    """The client behind a gRPC peer (services/broker/front.py: through the TLS/plaintext front)."""

    def resolve(self, peer: str) -> str: ...


class DirectPeers:
    """No front: the gRPC peer is the client."""

    def resolve(self, peer: str) -> str:
        return peer


DIRECT = DirectPeers()


def peer_address(context: grpc.ServicerContext, peers: Peers = DIRECT) -> str:
    """The client's ``ipv4:1.2.3.4:5`` -> ``1.2.3.4:5``, ``ipv6:[::1]:5`` -> ``[::1]:5``; else ""."""
    peer = peers.resolve(context.peer() or "")
    scheme, _, address = peer.partition(":")
    return address if scheme in ("ipv4", "ipv6") else ""


Method = TypeVar("Method", bound=Callable[..., Any])


def check_access(guard: Any, method: str, request: Any, context: grpc.ServicerContext, peers: Peers = DIRECT) -> None:
    """``guard.check`` (services/broker/access.py) when authentication is on: the caller's
    headers and the connection's peer address (the client's, through the front), never a
    header's claim of one."""
    if guard is not None:
        guard.check(method, request, dict(context.invocation_metadata()), peers.resolve(context.peer() or ""))


def in_band(response_type: type, require_client_id: bool = True) -> Callable[[Method], Method]:
    """Answer ``response_type(status=...)`` for errors raised by a unary method.

    Also refuses a call without ``x-mq-client-id`` with CLIENT_ID_REQUIRED, as the proxy does
    (unless ``require_client_id`` is false).
    """

    def decorate(method: Method) -> Method:
        name = method.__name__

        @functools.wraps(method)
        def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
            try:
                if require_client_id and not client_id_of(context):
                    raise BrokerError("x-mq-client-id header is required", Code.CLIENT_ID_REQUIRED)
                check_access(getattr(self, "guard", None), name, request, context, getattr(self, "peers", DIRECT))
                return method(self, request, context)
            except FAILURES as caught:
                exc = as_broker_error(caught)
                return response_type(status=status(exc.code, exc.message))
            except Exception as exc:  # a bug: log it, answer in band
                log.exception("MessagingService.%s failed", name)
                return response_type(
                    status=status(Code.INTERNAL_SERVER_ERROR, f"internal error: {type(exc).__name__}: {exc}")
                )

        return wrapper  # type: ignore[return-value]

    return decorate
