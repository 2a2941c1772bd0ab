"""Broker errors and the v2 status codes they carry (no gRPC here).

Expected failures are exceptions of one small tree; each carries the ``apache.rocketmq.v2.Code``
the client must see. The RPC layer turns them into an in-band ``Status`` (errors are in band:
the response's ``status`` carries them and the gRPC status stays OK, as the proxy does). Anything else is a bug: the servicer logs it
and answers INTERNAL_SERVER_ERROR.

    BrokerError                   .code, .message
    ├── RequestError              the request is malformed or breaks a limit (40000-40021, 41301-41302, 43101)
    ├── NotFoundError             TOPIC_NOT_FOUND, CONSUMER_GROUP_NOT_FOUND
    ├── ForbiddenError            FORBIDDEN: the topic is not writable
    ├── FlowControlError          TOO_MANY_REQUESTS: the send queue is full
    ├── UnsupportedError          UNSUPPORTED / NOT_IMPLEMENTED
    └── StoreCallError            the store failed or did not answer (INTERNAL_SERVER_ERROR, PROXY_TIMEOUT)

The store client raises its own tree (``services.store.client.errors.StoreError``); where the
broker answers a client, ``as_broker_error`` gives a failed store call its v2 code: no answer in
time is PROXY_TIMEOUT (the outcome is unknown), a request the store refused is BAD_REQUEST (a
field the broker should have checked), anything else INTERNAL_SERVER_ERROR. ``FAILURES`` is
both trees, for the ``except`` clauses that answer clients.

``Code`` mirrors the proto enum value for value; ``v2/status.py`` asserts that at import.
"""

from __future__ import annotations

import enum

from services.store.client.errors import StoreError, StoreRejectedError, StoreTimeoutError


class Code(enum.IntEnum):
    """``apache.rocketmq.v2.Code``; how each client reacts: docs/v2-clients.md, section 2."""

    CODE_UNSPECIFIED = 0
    OK = 20000
    MULTIPLE_RESULTS = 30000
    BAD_REQUEST = 40000
    ILLEGAL_ACCESS_POINT = 40001
    ILLEGAL_TOPIC = 40002
    ILLEGAL_CONSUMER_GROUP = 40003
    ILLEGAL_MESSAGE_TAG = 40004
    ILLEGAL_MESSAGE_KEY = 40005
    ILLEGAL_MESSAGE_GROUP = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    INVALID_TRANSACTION_ID = 40008
    ILLEGAL_MESSAGE_ID = 40009
    ILLEGAL_FILTER_EXPRESSION = 40010
    ILLEGAL_INVISIBLE_TIME = 40011
    ILLEGAL_DELIVERY_TIME = 40012
    INVALID_RECEIPT_HANDLE = 40013
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014
    UNRECOGNIZED_CLIENT_TYPE = 40015
    MESSAGE_CORRUPTED = 40016
    CLIENT_ID_REQUIRED = 40017
    ILLEGAL_POLLING_TIME = 40018
    ILLEGAL_OFFSET = 40019
    ILLEGAL_LITE_TOPIC = 40020
    INVALID_CLIENT_PROPERTIES = 40021
    UNAUTHORIZED = 40100
    PAYMENT_REQUIRED = 40200
    FORBIDDEN = 40300
    NOT_FOUND = 40400
    MESSAGE_NOT_FOUND = 40401
    TOPIC_NOT_FOUND = 40402
    CONSUMER_GROUP_NOT_FOUND = 40403
    OFFSET_NOT_FOUND = 40404
    REQUEST_TIMEOUT = 40800
    PAYLOAD_TOO_LARGE = 41300
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_BODY_EMPTY = 41302
    PRECONDITION_FAILED = 42800
    TOO_MANY_REQUESTS = 42900
    LITE_TOPIC_QUOTA_EXCEEDED = 42901
    LITE_SUBSCRIPTION_QUOTA_EXCEEDED = 42902
    REQUEST_HEADER_FIELDS_TOO_LARGE = 43100
    MESSAGE_PROPERTIES_TOO_LARGE = 43101
    INTERNAL_ERROR = 50000
    INTERNAL_SERVER_ERROR = 50001
    HA_NOT_AVAILABLE = 50002
    NOT_IMPLEMENTED = 50100
    PROXY_TIMEOUT = 50400
    MASTER_PERSISTENCE_TIMEOUT = 50401
    SLAVE_PERSISTENCE_TIMEOUT = 50402
    UNSUPPORTED = 50500
    VERSION_UNSUPPORTED = 50501
    VERIFY_FIFO_MESSAGE_UNSUPPORTED = 50502
    FAILED_TO_CONSUME_MESSAGE = 60000


class BrokerError(Exception):
    """An expected failure; ``code`` is what the client sees in the response status."""

    default_code = Code.INTERNAL_SERVER_ERROR

    def __init__(self, message: str, code: Code | None = None) -> None:
        super().__init__(message)
        self.code = code if code is not None else self.default_code
        self.message = message


class RequestError(BrokerError):
    """The request is malformed or breaks a limit; the code names the rule."""

    default_code = Code.BAD_REQUEST


class NotFoundError(BrokerError):
    default_code = Code.TOPIC_NOT_FOUND


class ForbiddenError(BrokerError):
    default_code = Code.FORBIDDEN


class FlowControlError(BrokerError):
    default_code = Code.TOO_MANY_REQUESTS


class UnsupportedError(BrokerError):
    default_code = Code.UNSUPPORTED


class StoreCallError(BrokerError):
    """The store could not be reached, failed, or did not answer in time."""

    default_code = Code.INTERNAL_SERVER_ERROR


FAILURES = (BrokerError, StoreError)


def as_broker_error(exc: BrokerError | StoreError) -> BrokerError:
    """The broker's answer to a failure: a BrokerError as it is, a failed store call with its code."""
    if isinstance(exc, BrokerError):
        return exc
    if isinstance(exc, StoreTimeoutError):
        return StoreCallError(exc.message, Code.PROXY_TIMEOUT)
    if isinstance(exc, StoreRejectedError):
        return RequestError(exc.message, Code.BAD_REQUEST)
    return StoreCallError(exc.message, Code.INTERNAL_SERVER_ERROR)
