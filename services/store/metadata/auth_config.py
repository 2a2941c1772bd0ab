"""Users and their ACLs: ``config/auth.json``, rewritten whole (and fsync'd, with a ``.bak``) on
every change, like topics.json. The broker reads them to authenticate and authorize clients
(services/broker/auth.py); ``pyrmq acl ...`` writes them through the broker's admin service.

    {"dataVersion": {...},
     "users": {"alice": {"username": "alice", "password": "<secret key>", "userType": "Normal",
                         "userStatus": "enable"}},
     "acls":  {"alice": {"subject": "User:alice",
                         "policies": [{"resource": "Topic:orders", "actions": ["Pub", "Sub"],
                                       "decision": "Allow", "sourceIps": ["10.0.0.0/8"]}]}}}

Names and values follow RocketMQ 5's ACL 2.0 (RIP-68): userType Super | Normal, userStatus
enable | disable; a resource is ``Topic:NAME`` / ``Group:NAME`` (LITERAL), ``Topic:PREFIX*``
(PREFIXED), ``Topic:*`` (any topic) or ``*`` (anything); actions Pub, Sub, Create, Update,
Delete, Get, List, All; decision Allow | Deny. The secret keys are the HMAC keys clients sign
with, so the file holds them in clear, as RocketMQ's does: it is written mode 0600.

Replication (ha/config_sync.py): a slave ``install``s the master's file content and refuses every
change (``check_writable``, given by the store); ``change_count`` moves on every change.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from services.runtime.clock import Clock
from services.store.errors import AuthConfigError
from services.store.metadata.config_files import (
    DataVersion,
    always_writable,
    json_object,
    json_str,
    load_with_backup,
    write_atomically,
)

AUTH_FILE = "auth.json"
USER_TYPES = ("Super", "Normal")
USER_STATUSES = ("enable", "disable")
ACTIONS = ("Pub", "Sub", "Create", "Update", "Delete", "Get", "List", "All")
DECISIONS = ("Allow", "Deny")
RESOURCE_TYPES = ("Topic", "Group", "Cluster")
USERNAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
POLICIES_MAX = 1_000


@dataclass(frozen=True)
class StoredUser:
    username: str
    password: str
    user_type: str = "Normal"
    user_status: str = "enable"

    def check(self) -> None:
        if not USERNAME.match(self.username):
            raise AuthConfigError(f"username must be 1-64 of A-Z a-z 0-9 _ . @ -, not {self.username!r}")
        if not self.password or len(self.password) > 256:
            raise AuthConfigError("password (secret key) must be 1-256 characters")
        if self.user_type not in USER_TYPES:
            raise AuthConfigError(f"userType must be one of {USER_TYPES}, not {self.user_type!r}")
        if self.user_status not in USER_STATUSES:
            raise AuthConfigError(f"userStatus must be one of {USER_STATUSES}, not {self.user_status!r}")


@dataclass(frozen=True)
class StoredPolicy:
    resource: str  # Topic:orders, Topic:ord*, Topic:*, Group:g, *
    actions: tuple[str, ...]
    decision: str
    source_ips: tuple[str, ...] = ()

    def check(self) -> None:
        check_resource(self.resource)
        if not self.actions or any(a not in ACTIONS for a in self.actions):
            raise AuthConfigError(f"actions must be some of {ACTIONS}, not {list(self.actions)}")
        if self.decision not in DECISIONS:
            raise AuthConfigError(f"decision must be one of {DECISIONS}, not {self.decision!r}")
        for ip in self.source_ips:
            try:
                ipaddress.ip_network(ip, strict=False)
            except ValueError:
                raise AuthConfigError(f"source IP {ip!r} is not an address or CIDR") from None


@dataclass(frozen=True)
class StoredAcl:
    username: str
    policies: tuple[StoredPolicy, ...] = field(default=())


def check_resource(resource: str) -> None:
    if resource == "*":
        return
    kind, sep, name = resource.partition(":")
    if not sep or kind not in RESOURCE_TYPES or not name or "*" in name[:-1]:
        raise AuthConfigError(f"resource must be Topic:NAME, Topic:PREFIX*, Topic:*, Group:... or *, not {resource!r}")


class AuthConfigManager:
    """``config/auth.json``: users and ACLs, persisted whole on each change."""

    def __init__(self, config_dir: Path, clock: Clock, check_writable: Callable[[], None] = always_writable) -> None:
        self.path = Path(config_dir) / AUTH_FILE
        self._clock = clock
        self._lock = threading.Lock()
        self._users: dict[str, StoredUser] = {}
        self._acls: dict[str, StoredAcl] = {}
        self._data_version = DataVersion(timestamp_ms=clock.now_ms())
        self._changes = 0
        self.check_writable = check_writable  # the store's: raises NotMasterWriteError unless the writable master

    @property
    def change_count(self) -> int:
        """Moves on every change (its own, an install, a load)."""
        return self._changes

    def load(self) -> None:
        loaded = load_with_backup(self.path, self._decode)
        with self._lock:
            if loaded is not None:
                self._users, self._acls, self._data_version = loaded
            self._changes += 1

    def encode(self) -> str:
        """The file's content for the current users and ACLs."""
        with self._lock:
            return self._encode_locked()

    def install(self, text: str) -> None:
        """Replace users and ACLs by ``text``, the master's content of the file (a slave), and
        write it as every change is written. Raises ValueError (nothing changes) if it does not decode."""
        users, acls, version = self._decode(text)
        with self._lock:
            self._users, self._acls, self._data_version = users, acls, version
            self._changes += 1
            self._write_locked(text)

    def snapshot(self) -> tuple[list[StoredUser], list[StoredAcl], int]:
        """Every user and ACL, and the data version's counter (it moves on every change)."""
        with self._lock:
            return list(self._users.values()), list(self._acls.values()), self._data_version.counter

    def put_user(self, user: StoredUser) -> bool:
        """Create or replace; True if it was new."""
        self.check_writable()
        user.check()
        with self._lock:
            created = user.username not in self._users
            self._users[user.username] = user
            self._persist_locked()
        return created

    def delete_user(self, username: str) -> bool:
        """Remove a user and its ACL; False if there was none."""
        self.check_writable()
        with self._lock:
            existed = self._users.pop(username, None) is not None
            self._acls.pop(username, None)
            if existed:
                self._persist_locked()
        return existed

    def put_acl(self, acl: StoredAcl) -> None:
        """Replace a user's policies (an empty list removes its ACL). The user must exist."""
        self.check_writable()
        if len(acl.policies) > POLICIES_MAX:
            raise AuthConfigError(f"at most {POLICIES_MAX} policies per user")
        for policy in acl.policies:
            policy.check()
        with self._lock:
            if acl.username not in self._users:
                raise KeyError(acl.username)
            if acl.policies:
                self._acls[acl.username] = acl
            else:
                self._acls.pop(acl.username, None)
            self._persist_locked()

    def _persist_locked(self) -> None:
        self._data_version.next_version(self._clock.now_ms())
        self._changes += 1
        self._write_locked(self._encode_locked())

    def _write_locked(self, text: str) -> None:
        write_atomically(self.path, text)
        os.chmod(self.path, 0o600)

    def _encode_locked(self) -> str:
        document = {
            "dataVersion": self._data_version.to_bean(),
            "users": {
                u.username: {
                    "username": u.username,
                    "password": u.password,
                    "userType": u.user_type,
                    "userStatus": u.user_status,
                }
                for u in self._users.values()
            },
            "acls": {
                a.username: {
                    "subject": f"User:{a.username}",
                    "policies": [
                        {
                            "resource": p.resource,
                            "actions": list(p.actions),
                            "decision": p.decision,
                            "sourceIps": list(p.source_ips),
                        }
                        for p in a.policies
                    ],
                }
                for a in self._acls.values()
            },
        }
        return json.dumps(document, indent=2)

    def _decode(self, text: str) -> tuple[dict[str, StoredUser], dict[str, StoredAcl], DataVersion]:
        root = json_object(json.loads(text), "auth.json")
        users = {}
        for name, obj in json_object(root.get("users", {}), "users").items():
            obj = json_object(obj, f"user {name}")
            user = StoredUser(
                json_str(obj.get("username", name), "username"),
                json_str(obj["password"], "password"),
                json_str(obj.get("userType", "Normal"), "userType"),
                json_str(obj.get("userStatus", "enable"), "userStatus"),
            )
            user.check()
            users[user.username] = user
        acls = {}
        for name, obj in json_object(root.get("acls", {}), "acls").items():
            policies = tuple(
                StoredPolicy(
                    json_str(p["resource"], "resource"),
                    tuple(p["actions"]),
                    json_str(p["decision"], "decision"),
                    tuple(p.get("sourceIps", ())),
                )
                for p in json_object(obj, f"acl {name}").get("policies", [])
            )
            for policy in policies:
                policy.check()
            acls[name] = StoredAcl(name, policies)
        return users, acls, DataVersion.from_json(root.get("dataVersion", {}), self._clock.now_ms())
