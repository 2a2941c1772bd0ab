"""``GroupRetryPolicy`` (services/domain/retry_policy.py) <-> ``pyrmq.store.v1.GroupRetryPolicy``.

Shared by the store's servicer (``services/store/rpc/convert.py``) and its client: the policy
crosses the store API in both directions. An unset message is RocketMQ's default policy.
"""

from __future__ import annotations

from pyrmq.store.v1 import store_pb2 as pb

from services.domain.retry_policy import (
    CUSTOMIZED,
    EXPONENTIAL,
    CustomizedRetryPolicy,
    ExponentialRetryPolicy,
    GroupRetryPolicy,
)

_TYPE_TO_PB = {CUSTOMIZED: pb.RETRY_POLICY_CUSTOMIZED, EXPONENTIAL: pb.RETRY_POLICY_EXPONENTIAL}
_TYPE_FROM_PB = {pb.RETRY_POLICY_TYPE_UNSPECIFIED: CUSTOMIZED, **{v: k for k, v in _TYPE_TO_PB.items()}}


def retry_policy_to_pb(policy: GroupRetryPolicy) -> pb.GroupRetryPolicy:
    message = pb.GroupRetryPolicy(type=_TYPE_TO_PB[policy.type])
    if policy.exponential is not None:
        e = policy.exponential
        message.exponential.CopyFrom(
            pb.ExponentialRetryPolicy(initial_ms=e.initial_ms, max_ms=e.max_ms, multiplier=e.multiplier)
        )
    if policy.customized is not None:
        message.customized.CopyFrom(pb.CustomizedRetryPolicy(next_ms=policy.customized.next_ms))
    return message


def retry_policy_from_pb(message: pb.GroupRetryPolicy) -> GroupRetryPolicy:
    """ValueError for an unknown type or out-of-range values."""
    kind = _TYPE_FROM_PB.get(message.type)
    if kind is None:
        raise ValueError(f"unknown retry policy type {message.type}")
    exponential = customized = None
    if message.HasField("exponential"):
        e = message.exponential
        exponential = ExponentialRetryPolicy(e.initial_ms, e.max_ms, e.multiplier)
    if message.HasField("customized"):
        customized = CustomizedRetryPolicy(tuple(message.customized.next_ms))
    policy = GroupRetryPolicy(kind, exponential=exponential, customized=customized)
    policy.check()
    return policy
