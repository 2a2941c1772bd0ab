"""AclAdmin: the admin service's users and ACLs (``pyrmq acl ...``), kept by the store in
config/auth.json. Secret keys go in and never come out. A change invalidates the broker's
AccessGuard cache so it applies to the next request here (other brokers within their cache TTL).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from services.broker.errors import Code, NotFoundError, RequestError
from services.store.client.errors import StoreNotFoundError
from services.store.client.model import PolicyView


@dataclass(frozen=True)
class UserView:
    username: str
    user_type: str  # Super | Normal
    user_status: str  # enable | disable


class AuthStore(Protocol):
    """The store calls (the store client, ``services.store.client``). A refused value raises
    StoreRejectedError; an unknown user in ``put_acl`` raises StoreNotFoundError."""

    def auth_config(self) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, list[PolicyView]]], int]:
        """(users as (name, secret, type, status), ACLs as (name, policies), version)."""

    def put_user(self, username: str, secret: str, user_type: str, user_status: str) -> bool: ...
    def delete_user(self, username: str) -> bool: ...
    def put_acl(self, username: str, policies: list[PolicyView]) -> None: ...


class AclAdmin:
    def __init__(self, store: AuthStore, on_change: Callable[[], None] = lambda: None) -> None:
        self._store = store
        self._on_change = on_change

    def put_user(self, username: str, secret_key: str, super_user: bool, disabled: bool) -> bool:
        if not secret_key:
            raise RequestError("a secret key is required")
        created = self._store.put_user(
            username, secret_key, "Super" if super_user else "Normal", "disable" if disabled else "enable"
        )
        self._on_change()
        return created

    def delete_user(self, username: str) -> None:
        if not self._store.delete_user(username):
            raise NotFoundError(f"no user {username!r}")
        self._on_change()

    def list_users(self) -> list[UserView]:
        users, _, _ = self._store.auth_config()
        return sorted((UserView(name, kind, status) for name, _, kind, status in users), key=lambda u: u.username)

    def set_acl(self, username: str, policies: Sequence[PolicyView]) -> None:
        try:
            self._store.put_acl(username, list(policies))
        except StoreNotFoundError:
            raise NotFoundError(f"no user {username!r}", Code.NOT_FOUND) from None
        self._on_change()

    def list_acls(self, username: str = "") -> list[tuple[str, list[PolicyView]]]:
        users, acls, _ = self._store.auth_config()
        if username:
            if username not in {name for name, *_ in users}:
                raise NotFoundError(f"no user {username!r}")
            return [(name, policies) for name, policies in acls if name == username] or [(username, [])]
        return sorted(acls, key=lambda acl: acl[0])
