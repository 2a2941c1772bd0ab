"""Requests to handlers: the remoting door's ``Dispatcher``, its header readers and its errors.

A handler takes ``(channel, request)`` and returns the response, None for no answer (a oneway
request, or one it answers later itself: a suspended pull), and may raise:

* ``RemotingError(code, remark)``: answered with that code and remark;
* ``MissingField(name)``: a required header field is absent or not a number: SYSTEM_ERROR with
  "the custom field <name> is null" (RocketMQ's ``decodeCommandCustomHeader``);
* ``BrokerError`` (the core's): its ``errors.Code`` mapped to RocketMQ's code (``CORE_TO_REMOTING``);
* anything else: SYSTEM_ERROR with the exception named, and logged.

Handlers registered ``inline`` run on the event loop (in-memory work only); the others on the
worker pool, since the core's store calls block. An unknown code answers
REQUEST_CODE_NOT_SUPPORTED (3) with " request type <code> not supported".
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from services.broker.errors import FAILURES, Code, as_broker_error
from services.broker.remoting.server import Channel
from services.domain.remoting.codes import ResponseCode
from services.domain.remoting.command import RemotingCommand

log = logging.getLogger(__name__)

Handler = Callable[[Channel, RemotingCommand], RemotingCommand | None]
Observe = Callable[[int, int, float], None]  # request code, response code, seconds to answer

# The core's codes as RocketMQ's broker answers the same failures.
CORE_TO_REMOTING: dict[Code, ResponseCode] = {
    Code.OK: ResponseCode.SUCCESS,
    Code.BAD_REQUEST: ResponseCode.SYSTEM_ERROR,
    Code.ILLEGAL_TOPIC: ResponseCode.SYSTEM_ERROR,  # msgCheck: TopicValidator's remark
    Code.ILLEGAL_CONSUMER_GROUP: ResponseCode.SYSTEM_ERROR,
    Code.ILLEGAL_MESSAGE_TAG: ResponseCode.MESSAGE_ILLEGAL,
    Code.ILLEGAL_MESSAGE_KEY: ResponseCode.MESSAGE_ILLEGAL,
    Code.ILLEGAL_MESSAGE_GROUP: ResponseCode.MESSAGE_ILLEGAL,
    Code.ILLEGAL_MESSAGE_PROPERTY_KEY: ResponseCode.MESSAGE_ILLEGAL,
    Code.ILLEGAL_MESSAGE_ID: ResponseCode.MESSAGE_ILLEGAL,
    Code.MESSAGE_CORRUPTED: ResponseCode.MESSAGE_ILLEGAL,
    Code.MESSAGE_BODY_EMPTY: ResponseCode.MESSAGE_ILLEGAL,
    Code.MESSAGE_BODY_TOO_LARGE: ResponseCode.MESSAGE_ILLEGAL,
    Code.MESSAGE_PROPERTIES_TOO_LARGE: ResponseCode.MESSAGE_ILLEGAL,
    Code.PAYLOAD_TOO_LARGE: ResponseCode.MESSAGE_ILLEGAL,
    Code.ILLEGAL_DELIVERY_TIME: ResponseCode.MESSAGE_ILLEGAL,
    Code.ILLEGAL_FILTER_EXPRESSION: ResponseCode.SUBSCRIPTION_PARSE_FAILED,
    Code.ILLEGAL_OFFSET: ResponseCode.PULL_OFFSET_MOVED,
    Code.INVALID_TRANSACTION_ID: ResponseCode.SYSTEM_ERROR,
    Code.UNAUTHORIZED: ResponseCode.NO_PERMISSION,
    Code.FORBIDDEN: ResponseCode.NO_PERMISSION,
    Code.TOPIC_NOT_FOUND: ResponseCode.TOPIC_NOT_EXIST,
    Code.CONSUMER_GROUP_NOT_FOUND: ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
    Code.OFFSET_NOT_FOUND: ResponseCode.QUERY_NOT_FOUND,
    Code.MESSAGE_NOT_FOUND: ResponseCode.QUERY_NOT_FOUND,
    Code.NOT_FOUND: ResponseCode.QUERY_NOT_FOUND,
    Code.TOO_MANY_REQUESTS: ResponseCode.SYSTEM_BUSY,
    Code.LITE_TOPIC_QUOTA_EXCEEDED: ResponseCode.SYSTEM_BUSY,
    Code.REQUEST_TIMEOUT: ResponseCode.SYSTEM_ERROR,
    Code.PROXY_TIMEOUT: ResponseCode.SYSTEM_ERROR,
    Code.INTERNAL_ERROR: ResponseCode.SYSTEM_ERROR,
    Code.INTERNAL_SERVER_ERROR: ResponseCode.SYSTEM_ERROR,
    Code.HA_NOT_AVAILABLE: ResponseCode.SLAVE_NOT_AVAILABLE,
    Code.MASTER_PERSISTENCE_TIMEOUT: ResponseCode.FLUSH_DISK_TIMEOUT,
    Code.SLAVE_PERSISTENCE_TIMEOUT: ResponseCode.FLUSH_SLAVE_TIMEOUT,
    Code.UNSUPPORTED: ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
    Code.NOT_IMPLEMENTED: ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
    Code.VERSION_UNSUPPORTED: ResponseCode.VERSION_NOT_SUPPORTED,
}


def remoting_code(code: Code) -> ResponseCode:
    return CORE_TO_REMOTING.get(code, ResponseCode.SYSTEM_ERROR)


class RemotingError(Exception):
    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class MissingField(RemotingError):
    def __init__(self, name: str, reason: str = "is null") -> None:
        super().__init__(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> {reason}")
        self.name = name


# -- header fields (extFields are strings; RocketMQ parses each as its field's Java type) -------


def required(fields: Mapping[str, str], name: str) -> str:
    value = fields.get(name)
    if value is None:
        raise MissingField(name)
    return value


def required_int(fields: Mapping[str, str], name: str) -> int:
    value = fields.get(name)
    if value is None:
        raise MissingField(name)
    return _parse_int(name, value)


def optional_int(fields: Mapping[str, str], name: str, default: int) -> int:
    value = fields.get(name)
    if value is None or value == "null":
        return default
    return _parse_int(name, value)


def optional_bool(fields: Mapping[str, str], name: str, default: bool = False) -> bool:
    value = fields.get(name)
    if value is None:
        return default
    return value.strip().lower() == "true"  # Boolean.parseBoolean


# Header fields that are Java ints (the rest are longs): a value beyond the type is refused as
# Integer.parseInt / Long.parseLong refuse it, never handed on to the store.
INT_FIELDS = frozenset(
    {
        "queueId", "sysFlag", "flag", "reconsumeTimes", "maxReconsumeTimes", "defaultTopicQueueNums", "maxMsgNums",
        "delayLevel", "commitOrRollback", "readQueueNums", "writeQueueNums", "perm", "topicSysFlag", "maxNum",
        "maxMsgBytes", "reviveQid", "initMode", "retryQueueNums", "retryMaxTimes",
    }
)  # fmt: skip
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


def _parse_int(name: str, value: str) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise MissingField(name, f"is not a number: {value!r}") from None
    low, high = (INT_MIN, INT_MAX) if name in INT_FIELDS else (LONG_MIN, LONG_MAX)
    if not low <= number <= high:
        raise MissingField(name, f"is not a number: {value!r} is beyond a Java {'int' if high == INT_MAX else 'long'}")
    return number


def json_body(request: RemotingCommand) -> dict[str, Any]:
    """A request's JSON object body (an empty body is an empty object); SYSTEM_ERROR otherwise."""
    try:
        data = json.loads(request.body) if request.body else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise RemotingError(ResponseCode.SYSTEM_ERROR, f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise RemotingError(ResponseCode.SYSTEM_ERROR, "the body is not a JSON object")
    return data


# -- the dispatcher ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    handler: Handler
    inline: bool = False


class Dispatcher:
    """Code -> handler. ``before`` runs first for every request (the ACL check); it raises
    RemotingError to refuse."""

    def __init__(
        self,
        workers: int,
        before: Callable[[Channel, RemotingCommand], None] | None = None,
        observe: Observe | None = None,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self._observe = observe
        self._monotonic_s = monotonic_s
        self._routes: dict[int, Route] = {}
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="remoting")
        self._before = before
        self._closed_listeners: list[Callable[[Channel], None]] = []

    def register(self, code: int, handler: Handler, inline: bool = False) -> None:
        self._routes[int(code)] = Route(handler, inline)

    def on_closed(self, listener: Callable[[Channel], None]) -> None:
        self._closed_listeners.append(listener)

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(self._routes)

    def dispatch(self, channel: Channel, request: RemotingCommand) -> None:
        route = self._routes.get(request.code)
        if route is None:
            if not request.is_oneway:
                channel.answer(
                    request.response(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {request.code} not supported"
                    )
                )
            return
        if route.inline:
            self.run(route.handler, channel, request)
        else:
            self._pool.submit(self.run, route.handler, channel, request)

    def run(self, handler: Handler, channel: Channel, request: RemotingCommand) -> None:
        started_s = self._monotonic_s()
        try:
            if self._before is not None:
                self._before(channel, request)
            response = handler(channel, request)
        except RemotingError as exc:
            response = request.response(exc.code, exc.remark)
        except FAILURES as exc:
            error = as_broker_error(exc)
            response = request.response(remoting_code(error.code), error.message)
        except Exception as exc:
            log.exception("remoting request %d from %s failed", request.code, channel.peer_address)
            response = request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
        if response is None:
            return  # oneway, or answered later (a held pull: observed then)
        if not request.is_oneway:
            try:
                channel.answer(response)
            except Exception:
                log.exception("the answer to remoting request %d from %s failed", request.code, channel.peer_address)
                channel.answer(request.response(ResponseCode.SYSTEM_ERROR, "the answer could not be encoded"))
        if self._observe is not None:
            self._observe(request.code, response.code, self._monotonic_s() - started_s)

    def submit(self, function: Callable[[], None]) -> bool:
        """Run ``function`` on a worker (a held pull's next pass); False once shut down."""
        try:
            self._pool.submit(function)
        except RuntimeError:  # shut down: the connection is closing too
            return False
        return True

    def closed(self, channel: Channel) -> None:
        for listener in self._closed_listeners:
            try:
                listener(channel)
            except Exception:
                log.exception("remoting close listener failed")

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
