"""Requests that are not valid protobuf: refused as INVALID_ARGUMENT by our own code.

grpcio's sync server decodes each request before the handler runs and, when that fails, answers
INTERNAL "Exception deserializing request!" without ever releasing the HTTP/2 stream: every such
request leaks one of the connection's ``grpc.max_concurrent_streams`` slots (measured with grpcio
1.85: with a limit of 128, the 129th garbage request and every later call on that connection are
refused with RST_STREAM REFUSED_STREAM, health checks included). One bad client could so wedge its
own connection, and a garbage request is the client's fault, not an internal error.

``DecodeGuardInterceptor`` hands the handler's raw bytes to the handler instead, decoding them in
the handler's own call, so a request that does not parse ends like any refused call:
INVALID_ARGUMENT naming the expected message type, the stream released. Put it last in the
server's interceptor list, so the metrics interceptor counts these refusals by their code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc

Deserializer = Callable[[bytes], Any]


def _type_name(deserializer: Deserializer) -> str:
    owner = getattr(deserializer, "__self__", None)  # Message.FromString is a classmethod
    descriptor = getattr(owner, "DESCRIPTOR", None)
    return descriptor.full_name if descriptor is not None else "request"


def _refuse(context: grpc.ServicerContext, type_name: str, exc: Exception) -> None:
    detail = str(exc) or f"not a valid {type_name}"
    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"request does not parse: {detail}")


def _decode_one(
    deserializer: Deserializer, type_name: str, behavior: Callable[..., Any]
) -> Callable[[bytes, grpc.ServicerContext], Any]:
    def decoded(raw: bytes, context: grpc.ServicerContext) -> Any:
        try:
            request = deserializer(raw)
        except Exception as exc:  # noqa: BLE001 - any decode failure is the client's bad bytes
            _refuse(context, type_name, exc)
        return behavior(request, context)

    return decoded


def _decode_each(
    deserializer: Deserializer, type_name: str, behavior: Callable[..., Any]
) -> Callable[[Iterator[bytes], grpc.ServicerContext], Any]:
    def requests(raw_requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[Any]:
        for raw in raw_requests:
            try:
                request = deserializer(raw)
            except Exception as exc:  # noqa: BLE001
                _refuse(context, type_name, exc)
            yield request

    def decoded(raw_requests: Iterator[bytes], context: grpc.ServicerContext) -> Any:
        return behavior(requests(raw_requests, context), context)

    return decoded


def guarded(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """``handler`` taking raw bytes and decoding them itself (unchanged if it has no deserializer)."""
    deserializer = handler.request_deserializer
    if deserializer is None:
        return handler
    type_name = _type_name(deserializer)
    serializer = handler.response_serializer
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(
            _decode_one(deserializer, type_name, handler.unary_unary), response_serializer=serializer
        )
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(
            _decode_one(deserializer, type_name, handler.unary_stream), response_serializer=serializer
        )
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(
            _decode_each(deserializer, type_name, handler.stream_unary), response_serializer=serializer
        )
    return grpc.stream_stream_rpc_method_handler(
        _decode_each(deserializer, type_name, handler.stream_stream), response_serializer=serializer
    )


class DecodeGuardInterceptor(grpc.ServerInterceptor):
    """Applies ``guarded`` to every method's handler, once per method (handlers never change)."""

    def __init__(self) -> None:
        self._guarded: dict[str, grpc.RpcMethodHandler | None] = {}

    def intercept_service(
        self, continuation: Callable[[grpc.HandlerCallDetails], Any], handler_call_details: grpc.HandlerCallDetails
    ) -> Any:
        method = handler_call_details.method
        try:
            return self._guarded[method]
        except KeyError:
            pass
        handler = continuation(handler_call_details)
        if handler is None:
            return None  # unknown method: grpcio answers UNIMPLEMENTED; not cached (paths are unbounded)
        wrapped = self._guarded[method] = guarded(handler)
        return wrapped
