"""What a corpus case is (``Case``, ``InBand``), the list they go in (``CASES``, filled by
``corpus_v2.py``, ``corpus_admin_store.py`` and ``corpus_remoting.py`` through ``case``), and the name classes and small
builders the case modules share. tests/badinput/corpus.py documents the fields."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from apache.rocketmq.v2 import definition_pb2 as d
from google.protobuf.duration_pb2 import Duration

from services.domain.names import PREDEFINED_GROUPS, SYSTEM_TOPICS

ALL_STATE = ("puts", "topics", "groups", "offsets")
SC = grpc.StatusCode
R = d.Resource


@dataclass(frozen=True)
class InBand:
    """A store RPC answered gRPC OK whose result carries this status (PutResult, pop status)."""

    code: int


@dataclass(frozen=True)
class Case:
    id: str
    service: str  # "v2" | "admin" | "store" | "remoting"
    rpc: str
    build: Callable[[dict], Any]
    expected: Any  # int (v2 Code; remoting ResponseCode) | grpc.StatusCode | InBand
    metadata: tuple | None = None
    unchanged: tuple[str, ...] = ALL_STATE
    bug: str | None = None
    timeout_s: float = 10.0
    remark: str | None = None  # remoting: text the answer's remark must contain

    @property
    def kind(self) -> str:
        if self.rpc in ("ReceiveMessage", "PullMessage"):
            return "server_stream"
        if self.rpc == "Telemetry":
            return "bidi_stream"
        return "unary"


CASES: list[Case] = []


def case(id_: str, service: str, rpc: str, build: Callable[[dict], Any], expected: Any, **kw: Any) -> None:
    prefix = rpc if service == "v2" else f"{service}.{rpc}"
    CASES.append(Case(f"{prefix}: {id_}", service, rpc, build, expected, **kw))


def const(value: Any) -> Callable[[dict], Any]:
    return lambda ctx: value


# -- name classes ---------------------------------------------------------------------------------

# One character of every class the name rule ^[%|a-zA-Z0-9_-]+$ refuses.
ILLEGAL_CHARS = {
    "space": " ",
    "dot": ".",
    "slash": "/",
    "backslash": "\\",
    "colon": ":",
    "star": "*",
    "hash": "#",
    "at": "@",
    "bang": "!",
    "dollar": "$",
    "ampersand": "&",
    "plus": "+",
    "equals": "=",
    "question": "?",
    "comma": ",",
    "semicolon": ";",
    "double quote": '"',
    "single quote": "'",
    "lt": "<",
    "gt": ">",
    "paren": "(",
    "bracket": "[",
    "brace": "{",
    "tilde": "~",
    "caret": "^",
    "backtick": "`",
    "tab": "\t",
    "newline": "\n",
    "NUL": "\x00",
    "DEL": "\x7f",
    "C1 NEL": "\x85",
    "e-acute": "\u00e9",
    "CJK": "\u4e2d",
    "emoji": "\U0001f600",
    "zero-width space": "\u200b",
    "RTL override": "\u202e",
    "fullwidth A": "\uff21",
    "nbsp": "\u00a0",
}
BAD_NAMES = {f"char {label}": f"Bad{ch}Name" for label, ch in ILLEGAL_CHARS.items()}
BAD_NAMES.update({"whitespace only": "   ", "tab only": "\t"})
LONG_TOPICS = {
    "128 chars": "t" * 128,
    "1000 chars": "t" * 1000,
    "%RETRY% 256 chars": "%RETRY%" + "r" * 249,
    "%DLQ% 256 chars": "%DLQ%" + "q" * 251,
}
SYSTEM_TOPIC_NAMES = sorted(SYSTEM_TOPICS) + ["rmq_sys_wheel_timer", "rmq_sys_REVIVE_LOG_broker-a", "rmq_sys_x"]
SYSTEM_GROUP_NAMES = sorted(PREDEFINED_GROUPS) + ["CID_RMQ_SYS_REVIVE_GROUP", "CID_RMQ_SYS_anything"]


def resource(name: str, namespace: str = "") -> d.Resource:
    return R(name=name, resource_namespace=namespace)


def dur(seconds: int = 0, nanos: int = 0) -> Duration:
    return Duration(seconds=seconds, nanos=nanos)
