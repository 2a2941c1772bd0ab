"""A consumer group's retry policy (RocketMQ 5's ``GroupRetryPolicy``): how long a message that
failed, or was not acked in time, waits before it is delivered again, per attempt.

Two kinds, as in RocketMQ's ``subscriptionGroup.json`` (field ``groupRetryPolicy``)::

    {"type": "CUSTOMIZED", "customizedRetryPolicy": {"next": [1000, 5000, 10000]}}
    {"type": "EXPONENTIAL", "exponentialRetryPolicy": {"initial": 5000, "max": 7200000, "multiplier": 2}}

``{"type": "CUSTOMIZED"}`` with no ``customizedRetryPolicy`` is RocketMQ's default: the 18
delays of the classic ``messageDelayLevel`` (1 s .. 2 h). A missing inner field takes the Java
field's initial value (``next`` = those 18 delays; ``initial`` 5 s, ``max`` 2 h,
``multiplier`` 2).

Who uses it, and how (RocketMQ 5, gRPC clients):

* The Telemetry settings reply tells a consumer its group's ``backoff_policy``
  (GrpcClientSettingsManager): ``max_attempts`` = ``retryMaxTimes + 1`` and either
  ``customized_backoff.next`` = ``next`` or ``exponential_backoff`` = (initial, max,
  multiplier). A CUSTOMIZED policy without ``next`` is sent as the 18 default delays, an
  EXPONENTIAL one without parameters as (5 s, 2 h, 2). The client nacks a message that failed on
  delivery attempt ``n`` with ChangeInvisibleDuration(``client_delay_ms(n)``): the customized
  list's ``n``-th entry (the last one past its end), or ``initial * multiplier ** (n - 1)``
  capped at ``max``.
* Where the server decides a delay itself (the proxy's receipt-handle manager, when it stops
  renewing a push consumer's message), it uses ``next_delay_ms(reconsume_times)``
  (``RetryPolicy.nextDelayDuration``): customized ``next[reconsume_times + 2]`` (the classic
  "delay level = 3 + reconsume times", clamped to the last entry), exponential ``initial *
  multiplier ** reconsume_times`` (exponent at most 32) capped at ``max``. An EXPONENTIAL
  policy without parameters falls back to the default customized one there
  (``GroupRetryPolicy.getRetryPolicy``).

Pure: no I/O, imports nothing else of the project.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

CUSTOMIZED = "CUSTOMIZED"
EXPONENTIAL = "EXPONENTIAL"
POLICY_TYPES = (CUSTOMIZED, EXPONENTIAL)

# CustomizedRetryPolicy.next: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h.
CUSTOMIZED_NEXT_MS_DEFAULT: tuple[int, ...] = (
    1_000,
    5_000,
    10_000,
    30_000,
    60_000,
    120_000,
    180_000,
    240_000,
    300_000,
    360_000,
    420_000,
    480_000,
    540_000,
    600_000,
    1_200_000,
    1_800_000,
    3_600_000,
    7_200_000,
)
EXPONENTIAL_INITIAL_MS_DEFAULT = 5_000
EXPONENTIAL_MAX_MS_DEFAULT = 7_200_000
EXPONENTIAL_MULTIPLIER_DEFAULT = 2
EXPONENT_MAX = 32  # ExponentialRetryPolicy caps reconsume times at 32
# A delay is used as an invisible duration, which the proxy accepts up to 12 h; also the bound on
# the number of customized delays (RocketMQ sets none; 64 keeps a settings reply small).
RETRY_DELAY_MS_MAX = 12 * 3_600_000
CUSTOMIZED_DELAYS_MAX = 64
MULTIPLIER_MAX = 1_000


@dataclass(frozen=True, slots=True)
class ExponentialRetryPolicy:
    initial_ms: int = EXPONENTIAL_INITIAL_MS_DEFAULT
    max_ms: int = EXPONENTIAL_MAX_MS_DEFAULT
    multiplier: int = EXPONENTIAL_MULTIPLIER_DEFAULT  # a Java long in RocketMQ: whole numbers only

    def check(self) -> None:
        if not 0 < self.initial_ms <= RETRY_DELAY_MS_MAX:
            raise ValueError(f"initial backoff must be in (0, {RETRY_DELAY_MS_MAX}] ms, not {self.initial_ms}")
        if not self.initial_ms <= self.max_ms <= RETRY_DELAY_MS_MAX:
            raise ValueError(
                f"max backoff must be in [initial {self.initial_ms}, {RETRY_DELAY_MS_MAX}] ms, not {self.max_ms}"
            )
        if not 1 <= self.multiplier <= MULTIPLIER_MAX:
            raise ValueError(
                f"backoff multiplier must be a whole number in [1, {MULTIPLIER_MAX}], not {self.multiplier}"
            )

    def delay_ms(self, exponent: int) -> int:
        exponent = min(max(exponent, 0), EXPONENT_MAX)
        return min(self.max_ms, self.initial_ms * self.multiplier**exponent)

    def next_delay_ms(self, reconsume_times: int) -> int:
        """ExponentialRetryPolicy.nextDelayDuration."""
        return self.delay_ms(reconsume_times)

    def client_delay_ms(self, attempt: int) -> int:
        """What a v2 client waits after delivery ``attempt`` (1-based) failed."""
        return self.delay_ms(attempt - 1)

    def to_json(self) -> dict[str, Any]:
        return {"initial": self.initial_ms, "max": self.max_ms, "multiplier": self.multiplier}

    def describe(self) -> str:
        return (
            f"exponential {format_duration_ms(self.initial_ms)}..{format_duration_ms(self.max_ms)} x{self.multiplier}"
        )


@dataclass(frozen=True, slots=True)
class CustomizedRetryPolicy:
    next_ms: tuple[int, ...] = CUSTOMIZED_NEXT_MS_DEFAULT

    def check(self) -> None:
        if not 1 <= len(self.next_ms) <= CUSTOMIZED_DELAYS_MAX:
            raise ValueError(
                f"a customized policy needs 1 to {CUSTOMIZED_DELAYS_MAX} backoffs, not {len(self.next_ms)}"
            )
        for delay in self.next_ms:
            if not 0 < delay <= RETRY_DELAY_MS_MAX:
                raise ValueError(f"each backoff must be in (0, {RETRY_DELAY_MS_MAX}] ms, not {delay}")

    def next_delay_ms(self, reconsume_times: int) -> int:
        """CustomizedRetryPolicy.nextDelayDuration: ``next[reconsume_times + 2]``, clamped."""
        index = min(max(reconsume_times, 0) + 2, len(self.next_ms) - 1)
        return self.next_ms[index]

    def client_delay_ms(self, attempt: int) -> int:
        """What a v2 client waits after delivery ``attempt`` (1-based) failed."""
        return self.next_ms[min(max(attempt, 1), len(self.next_ms)) - 1]

    def to_json(self) -> dict[str, Any]:
        return {"next": list(self.next_ms)}

    def describe(self) -> str:
        return "customized " + ",".join(format_duration_ms(d) for d in self.next_ms)


RetryPolicy = ExponentialRetryPolicy | CustomizedRetryPolicy
DEFAULT_RETRY_POLICY = CustomizedRetryPolicy()


@dataclass(frozen=True, slots=True)
class GroupRetryPolicy:
    """``groupRetryPolicy`` as stored: a type and the parameters of either kind (None: absent)."""

    type: str = CUSTOMIZED
    exponential: ExponentialRetryPolicy | None = None
    customized: CustomizedRetryPolicy | None = None

    @classmethod
    def of(cls, policy: RetryPolicy) -> GroupRetryPolicy:
        if isinstance(policy, ExponentialRetryPolicy):
            return cls(EXPONENTIAL, exponential=policy)
        return cls(CUSTOMIZED, customized=policy)

    @property
    def is_default(self) -> bool:
        """RocketMQ's default: CUSTOMIZED without delays of its own."""
        return self.type == CUSTOMIZED and self.customized is None

    def check(self) -> None:
        if self.type not in POLICY_TYPES:
            raise ValueError(f"retry policy type must be one of {POLICY_TYPES}, not {self.type!r}")
        for part in (self.exponential, self.customized):
            if part is not None:
                part.check()

    def retry_policy(self) -> RetryPolicy:
        """GroupRetryPolicy.getRetryPolicy: the policy of the type, else the default one."""
        chosen = self.exponential if self.type == EXPONENTIAL else self.customized
        return chosen if chosen is not None else DEFAULT_RETRY_POLICY

    def backoff(self) -> RetryPolicy:
        """What the settings reply sends (GrpcClientSettingsManager): the type's policy, with the
        Java defaults of that type if it has no parameters."""
        if self.type == EXPONENTIAL:
            return self.exponential or ExponentialRetryPolicy()
        return self.customized or DEFAULT_RETRY_POLICY

    def next_delay_ms(self, reconsume_times: int) -> int:
        return self.retry_policy().next_delay_ms(reconsume_times)

    def to_json(self) -> dict[str, Any]:
        """The RocketMQ JSON object (absent parts omitted, as fastjson omits nulls)."""
        obj: dict[str, Any] = {}
        if self.customized is not None:
            obj["customizedRetryPolicy"] = self.customized.to_json()
        if self.exponential is not None:
            obj["exponentialRetryPolicy"] = self.exponential.to_json()
        obj["type"] = self.type
        return obj

    @classmethod
    def from_json(cls, obj: Any) -> GroupRetryPolicy:
        """From RocketMQ's JSON (None: the default); ValueError if malformed."""
        if obj is None:
            return cls()
        obj = _object(obj, "groupRetryPolicy")
        kind = obj.get("type", CUSTOMIZED)
        if kind is None:
            kind = CUSTOMIZED
        exponential = obj.get("exponentialRetryPolicy")
        customized = obj.get("customizedRetryPolicy")
        policy = cls(
            type=kind,
            exponential=None if exponential is None else _exponential_from_json(exponential),
            customized=None if customized is None else _customized_from_json(customized),
        )
        policy.check()
        return policy

    def describe(self) -> str:
        """One line for people: ``default``, ``customized 1s,5s,10s``, ``exponential 1s..1m x2``."""
        if self.is_default:
            return "default"
        return self.backoff().describe()


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be an object, not {value!r}")
    return value


def _long(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} must be an integer, not {value!r}")
    return value


def _exponential_from_json(value: Any) -> ExponentialRetryPolicy:
    obj = _object(value, "exponentialRetryPolicy")
    return ExponentialRetryPolicy(
        initial_ms=_long(obj.get("initial", EXPONENTIAL_INITIAL_MS_DEFAULT), "exponentialRetryPolicy.initial"),
        max_ms=_long(obj.get("max", EXPONENTIAL_MAX_MS_DEFAULT), "exponentialRetryPolicy.max"),
        multiplier=_long(obj.get("multiplier", EXPONENTIAL_MULTIPLIER_DEFAULT), "exponentialRetryPolicy.multiplier"),
    )


def _customized_from_json(value: Any) -> CustomizedRetryPolicy:
    obj = _object(value, "customizedRetryPolicy")
    delays = obj.get("next")
    if delays is None:
        return CustomizedRetryPolicy()
    if not isinstance(delays, (list, tuple)):
        raise ValueError(f"customizedRetryPolicy.next must be an array, not {delays!r}")
    return CustomizedRetryPolicy(tuple(_long(d, "customizedRetryPolicy.next") for d in delays))


# -- durations as people write them ------------------------------------------------------------

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)?")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``500ms``, ``1s``, ``2m``, ``1h``, ``1d`` or a bare number of milliseconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a duration: {text!r} (examples: 500ms, 1s, 2m, 1h, or milliseconds)")
    number, unit = match.groups()
    return int(number) * _UNIT_MS[unit or "ms"]


def parse_durations_ms(text: str) -> tuple[int, ...]:
    """A comma-separated list of durations: ``1s,5s,10s``."""
    return tuple(parse_duration_ms(part) for part in text.split(","))


def format_duration_ms(ms: int) -> str:
    """The largest unit that divides ``ms`` exactly: 1000 -> 1s, 90000 -> 90s, 1500 -> 1500ms."""
    for unit in ("d", "h", "m", "s"):
        size = _UNIT_MS[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"
