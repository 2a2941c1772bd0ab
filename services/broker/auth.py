"""Authentication and authorization of v2 clients: RocketMQ 5's ACL 2.0 model (RIP-68), checked
by the broker before a request reaches the producer or consumer code (README.md, "Security").

Authentication: every request of an authenticated client carries

    authorization: MQv2-HMAC-SHA1 Credential=<AK>, SignedHeaders=x-mq-date-time, Signature=<hex>
    x-mq-date-time: 20261122T093015Z

and the signature is ``hex(HMAC-SHA1(key=secret_key, msg=x-mq-date-time))``, compared in constant
time and case-insensitively (Python sends lowercase hex, Java and Node uppercase). The user must
exist and be enabled. Only the date-time is signed, so a header is a bearer token for as long as
the key is valid: TLS is what protects it. ``max_clock_skew_s`` (off by default, as upstream)
is a replay window: a date-time further than that from the broker's clock is refused. Java and
Python clients format their host's *local* time with a literal ``Z``, so with
``local_time_tolerant`` (the default) the skew is measured from the nearest time-zone offset
(the UTC offsets in use, UTC-12..UTC+14): a client in any zone works, but replay is only
narrowed (a captured header passes again near any zone offset from it, for up to ~26 h); off,
the window is exact and clients must send UTC.

Authorization: a SUPER user may do anything. A NORMAL user's policies are entries of
(resource, pattern, actions, decision, source CIDRs); the entries that match a request's
resource, action and source address are ordered most specific first (LITERAL, then PREFIXED
with the longest prefix first, then ANY), DENY before ALLOW at equal specificity (the intent
upstream fixed in apache/rocketmq#9785), and the first decides. No match denies.

The source address is the connection's peer (grpc ``context.peer()``), never a header: the
servicer strips every header the server derives itself. (Upstream's proxy once set such headers,
the ACL source address and the authenticated user among them, only if the client had not sent
them, so a client could choose what the ACLs saw.)

Errors: UNAUTHORIZED (40100) for a missing, malformed or wrong signature, an unknown or
disabled user; FORBIDDEN (40300) for a request the policies do not allow.
"""

from __future__ import annotations

import datetime
import enum
import hashlib
import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from services.broker.errors import BrokerError, Code
from services.runtime.clock import Clock

AUTHORIZATION = "authorization"
DATE_TIME = "x-mq-date-time"
ALGORITHM = "MQv2-HMAC-SHA1"
DATE_TIME_FORMAT = "%Y%m%dT%H%M%SZ"
# A local time sent as UTC is off by its zone's offset: the UTC offsets in use (IANA tz database,
# standard and daylight time), in minutes.
ZONE_OFFSETS_MIN = (
    -720,
    -660,
    -600,
    -570,
    -540,
    -480,
    -420,
    -360,
    -300,
    -240,
    -210,
    -180,
    -150,
    -120,
    -60,
    0,
    60,
    120,
    180,
    210,
    240,
    270,
    300,
    330,
    345,
    360,
    390,
    420,
    480,
    525,
    540,
    570,
    600,
    630,
    660,
    720,
    765,
    780,
    825,
    840,
)
ZONE_OFFSETS_MS = tuple(minutes * 60_000 for minutes in ZONE_OFFSETS_MIN)
# Headers the server sets itself; a client's copy is dropped before anything reads it.
SERVER_DERIVED_HEADERS = ("rpc-remote-address", "x-mq-channel-id", "x-mq-authorization-ak")


class UserType(enum.Enum):
    SUPER = "Super"
    NORMAL = "Normal"


class UserStatus(enum.Enum):
    ENABLE = "enable"
    DISABLE = "disable"


class ResourceType(enum.Enum):
    TOPIC = "Topic"
    GROUP = "Group"
    CLUSTER = "Cluster"
    ANY = "Any"


class ResourcePattern(enum.Enum):
    LITERAL = "LITERAL"
    PREFIXED = "PREFIXED"
    ANY = "ANY"


class Action(enum.Enum):
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"
    ALL = "All"


class Decision(enum.Enum):
    ALLOW = "Allow"
    DENY = "Deny"


class AuthError(BrokerError):
    default_code = Code.UNAUTHORIZED


class AccessDenied(BrokerError):
    default_code = Code.FORBIDDEN


@dataclass(frozen=True)
class User:
    username: str
    password: str  # the secret key (SK)
    user_type: UserType = UserType.NORMAL
    user_status: UserStatus = UserStatus.ENABLE


@dataclass(frozen=True)
class PolicyEntry:
    resource_type: ResourceType  # ignored when pattern is ANY
    resource_name: str  # a name, or a prefix for PREFIXED
    pattern: ResourcePattern
    actions: frozenset[Action]
    decision: Decision
    source_ips: tuple[str, ...] = ()  # CIDRs or addresses; empty: any source
    _networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = field(
        init=False, repr=False, compare=False
    )  # source_ips parsed once (a bad one raises ValueError here)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_networks", tuple(ipaddress.ip_network(s, strict=False) for s in self.source_ips))

    def matches(
        self,
        resource_type: ResourceType,
        name: str,
        action: Action,
        source: ipaddress.IPv4Address | ipaddress.IPv6Address | None,
    ) -> bool:
        if self.resource_type is not ResourceType.ANY and resource_type is not self.resource_type:
            return False
        if self.pattern is not ResourcePattern.ANY:
            if self.pattern is ResourcePattern.LITERAL and name != self.resource_name:
                return False
            if self.pattern is ResourcePattern.PREFIXED and not name.startswith(self.resource_name):
                return False
        if action not in self.actions and Action.ALL not in self.actions:
            return False
        networks = self._networks
        return not networks or (source is not None and any(source in n for n in networks))

    def specificity(self) -> tuple[int, int, int]:
        """Sort key, smallest first: LITERAL, longer PREFIXED, ANY; DENY before ALLOW."""
        rank = {ResourcePattern.LITERAL: 0, ResourcePattern.PREFIXED: 1, ResourcePattern.ANY: 2}[self.pattern]
        return rank, -len(self.resource_name), 0 if self.decision is Decision.DENY else 1


@dataclass(frozen=True)
class Acl:
    username: str
    policies: tuple[PolicyEntry, ...] = field(default=())


# -- authentication ---------------------------------------------------------------------------------


def parse_authorization(header: str) -> tuple[str, str, str]:
    """``MQv2-HMAC-SHA1 Credential=AK, SignedHeaders=x-mq-date-time, Signature=hex`` ->
    (access key, signed headers, signature hex). AuthError if malformed."""
    algorithm, _, rest = header.strip().partition(" ")
    if algorithm != ALGORITHM:
        raise AuthError(f"authorization must use {ALGORITHM}, not {algorithm!r}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            raise AuthError(f"malformed authorization header near {part.strip()!r}")
        fields[key.strip()] = value.strip()
    credential, signed, signature = (fields.get(k, "") for k in ("Credential", "SignedHeaders", "Signature"))
    access_key = credential.split("/")[0]
    if not access_key:
        raise AuthError("authorization has no Credential (access key)")
    if not signature:
        raise AuthError("authorization has no Signature")
    if signed.lower() != DATE_TIME:
        raise AuthError(f"SignedHeaders must be {DATE_TIME}")
    return access_key, signed, signature


def sign(secret_key: str, date_time: str) -> str:
    """The signature a client computes: lowercase hex of HMAC-SHA1(secret, date-time)."""
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


class Authenticator:
    def __init__(
        self, users: Mapping[str, User], clock: Clock, max_clock_skew_s: int = 0, local_time_tolerant: bool = True
    ) -> None:
        self._users = users
        self._clock = clock
        self._max_skew_ms = max_clock_skew_s * 1000
        self._zones = ZONE_OFFSETS_MS if local_time_tolerant else (0,)

    def authenticate(self, metadata: Mapping[str, str]) -> User:
        """The user a request's headers prove to be; AuthError otherwise."""
        header = metadata.get(AUTHORIZATION)
        if not header:
            raise AuthError("authentication is required: no authorization header (set the client's credentials)")
        access_key, _, signature = parse_authorization(header)
        date_time = metadata.get(DATE_TIME)
        if not date_time:
            raise AuthError(f"the {DATE_TIME} header is missing")
        user = self._users.get(access_key)
        expected = sign(user.password if user else "\0", date_time)  # same work for unknown users
        if not hmac.compare_digest(expected, signature.lower()) or user is None:
            raise AuthError(f"signature does not match for access key {access_key!r}")
        if user.user_status is not UserStatus.ENABLE:
            raise AuthError(f"user {access_key!r} is disabled")
        if self._max_skew_ms:
            self._check_skew(date_time)
        return user

    def _check_skew(self, date_time: str) -> None:
        try:
            sent = datetime.datetime.strptime(date_time, DATE_TIME_FORMAT).replace(tzinfo=datetime.UTC)
        except ValueError:
            raise AuthError(f"{DATE_TIME} must look like 20261122T093015Z, not {date_time!r}") from None
        raw_ms = int(sent.timestamp() * 1000) - self._clock.now_ms()
        skew_ms = min(abs(raw_ms - zone) for zone in self._zones)
        if skew_ms > self._max_skew_ms:
            raise AuthError(
                f"{DATE_TIME} is {skew_ms // 1000} s from the broker's clock (at most {self._max_skew_ms // 1000} s)"
            )


# -- authorization ----------------------------------------------------------------------------------


class Authorizer:
    def __init__(self, acls: Mapping[str, Acl]) -> None:
        self._acls = acls

    def check(
        self,
        user: User,
        resources: Iterable[tuple[ResourceType, str]],
        action: Action | tuple[Action, ...],
        source: str,
    ) -> None:
        """AccessDenied unless ``user`` may do ``action`` (one of them, for a tuple: QueryRoute
        needs Pub or Sub) on every resource from ``source``."""
        if user.user_type is UserType.SUPER:
            return
        address = _address(source)
        acl = self._acls.get(user.username)
        entries = sorted(acl.policies if acl else (), key=PolicyEntry.specificity)
        actions = action if isinstance(action, tuple) else (action,)
        for resource_type, name in resources:
            if not any(
                next((e.decision for e in entries if e.matches(resource_type, name, a, address)), Decision.DENY)
                is Decision.ALLOW
                for a in actions
            ):
                raise AccessDenied(
                    f"user {user.username!r} may not {'/'.join(a.value for a in actions)} "
                    f"{resource_type.value} {name!r}{f' from {address}' if address else ''}"
                )


def _address(source: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP of a grpc peer (``ipv4:1.2.3.4:5``, ``ipv6:[::1]:5``) or a bare address; None if none."""
    text = source
    if text.startswith(("ipv4:", "ipv6:")):
        text = text.split(":", 1)[1]
        text = text[1 : text.index("]")] if text.startswith("[") else text.rsplit(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def parse_resource(text: str) -> tuple[ResourceType, str, ResourcePattern]:
    """``Topic:orders`` (LITERAL), ``Topic:ord*`` (PREFIXED), ``Topic:*`` (any topic), ``*`` (anything)."""
    if text == "*":
        return ResourceType.ANY, "", ResourcePattern.ANY
    kind, _, name = text.partition(":")
    resource_type = ResourceType(kind)
    if name == "*":
        return resource_type, "", ResourcePattern.ANY
    if name.endswith("*"):
        return resource_type, name[:-1], ResourcePattern.PREFIXED
    return resource_type, name, ResourcePattern.LITERAL


def policy_entry(resource: str, actions: Iterable[str], decision: str, source_ips: Iterable[str] = ()) -> PolicyEntry:
    """A stored policy (config/auth.json's words) as an entry."""
    resource_type, name, pattern = parse_resource(resource)
    return PolicyEntry(
        resource_type, name, pattern, frozenset(Action(a) for a in actions), Decision(decision), tuple(source_ips)
    )
