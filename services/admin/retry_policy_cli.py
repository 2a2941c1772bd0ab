"""The retry-policy options of ``pyrmq group create|update`` and how ``group list`` shows a
policy (the syntax is in ``cli.py``'s docstring; the semantics in services/domain/retry_policy.py).

    --retry-policy default|customized|exponential   (implied by the options below)
    --backoffs 1s,5s,30s                            customized
    --initial-backoff 1s --max-backoff 1m --backoff-multiplier 2   exponential
"""

from __future__ import annotations

import argparse
from typing import Any

from pyrmq.admin.v1 import admin_pb2 as pb

from services.domain.retry_policy import (
    EXPONENTIAL_INITIAL_MS_DEFAULT,
    EXPONENTIAL_MAX_MS_DEFAULT,
    EXPONENTIAL_MULTIPLIER_DEFAULT,
    format_duration_ms,
    parse_duration_ms,
    parse_durations_ms,
)

Document = dict[str, Any]


def add_retry_policy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--retry-policy",
        type=str.lower,
        choices=("default", "customized", "exponential"),
        help="the kind of retry policy (implied by the options below; default: RocketMQ's 1s 5s 10s 30s 1m ... 2h; "
        "unchanged for an existing group)",
    )
    parser.add_argument(
        "--backoffs",
        type=_durations,
        metavar="D,D,...",
        help="customized: the delay after each failed delivery, e.g. 1s,5s,30s (the last repeats)",
    )
    parser.add_argument("--initial-backoff", type=_duration, metavar="D", help="exponential: the first delay (5s)")
    parser.add_argument("--max-backoff", type=_duration, metavar="D", help="exponential: the longest delay (2h)")
    parser.add_argument(
        "--backoff-multiplier",
        type=_multiplier,
        metavar="N",
        help="exponential: growth per attempt, a whole number (2)",
    )


def _duration(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _durations(text: str) -> tuple[int, ...]:
    try:
        return parse_durations_ms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _multiplier(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


_POLICY_KINDS = {
    pb.RETRY_POLICY_DEFAULT: "default",
    pb.RETRY_POLICY_CUSTOMIZED: "customized",
    pb.RETRY_POLICY_EXPONENTIAL: "exponential",
}


def retry_policy_doc(policy: pb.RetryPolicy) -> Document:
    kind = _POLICY_KINDS.get(policy.kind, "default")
    if kind == "customized":
        return {"kind": kind, "backoffs_ms": list(policy.backoffs_ms)}
    if kind == "exponential":
        return {
            "kind": kind,
            "initial_backoff_ms": policy.initial_backoff_ms,
            "max_backoff_ms": policy.max_backoff_ms,
            "backoff_multiplier": policy.backoff_multiplier,
        }
    return {"kind": kind}


def retry_policy_text(doc: Document) -> str:
    if doc["kind"] == "customized":
        return "customized " + ",".join(format_duration_ms(ms) for ms in doc["backoffs_ms"])
    if doc["kind"] == "exponential":
        return (
            f"exponential {format_duration_ms(doc['initial_backoff_ms'])}.."
            f"{format_duration_ms(doc['max_backoff_ms'])} x{doc['backoff_multiplier']}"
        )
    return "default"


_EXPONENTIAL_OPTIONS = ("initial_backoff", "max_backoff", "backoff_multiplier")


def check_retry_policy(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> None:
    """The kind the options imply must agree with --retry-policy; exits 2 otherwise."""
    exponential = [name for name in _EXPONENTIAL_OPTIONS if getattr(ns, name) is not None]
    implied = {"customized"} if ns.backoffs is not None else set()
    implied |= {"exponential"} if exponential else set()
    if len(implied) > 1:
        parser.error(
            "--backoffs (customized) and --initial-backoff/--max-backoff/--backoff-multiplier (exponential) are exclusive"
        )
    if ns.retry_policy is not None and implied and implied != {ns.retry_policy}:
        parser.error(f"--retry-policy {ns.retry_policy} does not take the options given")
    if ns.retry_policy == "customized" and ns.backoffs is None:
        parser.error("--retry-policy customized needs --backoffs")
    if ns.retry_policy is None and implied:
        ns.retry_policy = implied.pop()


def retry_policy_request(ns: argparse.Namespace) -> pb.RetryPolicy | None:
    """The request's retry policy (after ``check_retry_policy``); None: unchanged."""
    if ns.retry_policy == "default":
        return pb.RetryPolicy(kind=pb.RETRY_POLICY_DEFAULT)
    if ns.retry_policy == "customized":
        return pb.RetryPolicy(kind=pb.RETRY_POLICY_CUSTOMIZED, backoffs_ms=ns.backoffs)
    if ns.retry_policy == "exponential":
        return pb.RetryPolicy(
            kind=pb.RETRY_POLICY_EXPONENTIAL,
            initial_backoff_ms=ns.initial_backoff or EXPONENTIAL_INITIAL_MS_DEFAULT,
            max_backoff_ms=ns.max_backoff or EXPONENTIAL_MAX_MS_DEFAULT,
            backoff_multiplier=ns.backoff_multiplier or EXPONENTIAL_MULTIPLIER_DEFAULT,
        )
    return None
