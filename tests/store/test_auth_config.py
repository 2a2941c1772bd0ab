"""config/auth.json (services/store/metadata/auth_config.py): users and ACLs survive a restart, bad ones
are refused, and the file holds secrets so it is private."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from pyrmq.store.v1 import store_pb2 as pb

from services.runtime.clock import ManualClock
from services.store.errors import AuthConfigError
from services.store.metadata.auth_config import AuthConfigManager, StoredAcl, StoredPolicy, StoredUser
from tests.support.store_rpc import Served


def manager(tmp_path: Path) -> AuthConfigManager:
    m = AuthConfigManager(tmp_path / "config", ManualClock())
    m.load()
    return m


def test_users_and_acls_survive_a_restart(tmp_path: Path) -> None:
    m = manager(tmp_path)
    assert m.put_user(StoredUser("alice", "s3cret")) is True
    assert m.put_user(StoredUser("alice", "rotated")) is False
    m.put_user(StoredUser("root", "r", user_type="Super"))
    policy = StoredPolicy("Topic:ord*", ("Pub", "Sub"), "Allow", ("10.0.0.0/8",))
    m.put_acl(StoredAcl("alice", (policy, StoredPolicy("*", ("All",), "Deny"))))
    users, acls, version = manager(tmp_path).snapshot()
    assert {u.username: u.password for u in users} == {"alice": "rotated", "root": "r"}
    assert acls == [StoredAcl("alice", (policy, StoredPolicy("*", ("All",), "Deny")))]
    assert version == 4
    document = json.loads((tmp_path / "config" / "auth.json").read_text())
    assert document["acls"]["alice"]["subject"] == "User:alice"
    assert document["users"]["root"] == {
        "username": "root",
        "password": "r",
        "userType": "Super",
        "userStatus": "enable",
    }
    assert (tmp_path / "config" / "auth.json").stat().st_mode & 0o777 == 0o600


def test_deleting_a_user_deletes_its_acl_and_an_empty_acl_is_none(tmp_path: Path) -> None:
    m = manager(tmp_path)
    m.put_user(StoredUser("bob", "x"))
    m.put_acl(StoredAcl("bob", (StoredPolicy("Group:g1", ("Sub",), "Allow"),)))
    m.put_acl(StoredAcl("bob", ()))
    assert m.snapshot()[1] == []
    m.put_acl(StoredAcl("bob", (StoredPolicy("Group:g1", ("Sub",), "Allow"),)))
    assert m.delete_user("bob") is True and m.delete_user("bob") is False
    assert manager(tmp_path).snapshot()[:2] == ([], [])


@pytest.mark.parametrize(
    "user",
    [
        StoredUser("", "x"),
        StoredUser("a b", "x"),
        StoredUser("a" * 65, "x"),
        StoredUser("alice", ""),
        StoredUser("alice", "x", user_type="Root"),
        StoredUser("alice", "x", user_status="on"),
    ],
)
def test_bad_users_are_refused(tmp_path: Path, user: StoredUser) -> None:
    with pytest.raises(AuthConfigError):
        manager(tmp_path).put_user(user)


@pytest.mark.parametrize(
    "policy",
    [
        StoredPolicy("orders", ("Pub",), "Allow"),
        StoredPolicy("Queue:orders", ("Pub",), "Allow"),
        StoredPolicy("Topic:", ("Pub",), "Allow"),
        StoredPolicy("Topic:o*rders", ("Pub",), "Allow"),
        StoredPolicy("Topic:orders", (), "Allow"),
        StoredPolicy("Topic:orders", ("Publish",), "Allow"),
        StoredPolicy("Topic:orders", ("Pub",), "Maybe"),
        StoredPolicy("Topic:orders", ("Pub",), "Allow", ("10.0.0.300",)),
    ],
)
def test_bad_policies_are_refused_and_nothing_changes(tmp_path: Path, policy: StoredPolicy) -> None:
    m = manager(tmp_path)
    m.put_user(StoredUser("alice", "x"))
    with pytest.raises(AuthConfigError):
        m.put_acl(StoredAcl("alice", (policy,)))
    assert m.snapshot()[1] == []


def test_an_acl_needs_its_user(tmp_path: Path) -> None:
    with pytest.raises(KeyError):
        manager(tmp_path).put_acl(StoredAcl("ghost", (StoredPolicy("*", ("All",), "Allow"),)))


# -- over the store's gRPC API ------------------------------------------------------------------------


def test_users_and_acls_over_grpc(served: Served) -> None:
    stub = served.stub
    assert stub.PutUser(pb.PutUserRequest(user=pb.AuthUser(username="alice", password="s"))).created
    stub.PutAcl(
        pb.PutAclRequest(
            acl=pb.AuthAcl(
                username="alice",
                policies=[
                    pb.AuthPolicy(resource="Topic:orders", actions=["Pub"], decision="Allow", source_ips=["10.0.0.0/8"])
                ],
            )
        )
    )
    config = stub.GetAuthConfig(pb.GetAuthConfigRequest())
    assert [(u.username, u.password, u.user_type, u.user_status) for u in config.users] == [
        ("alice", "s", "Normal", "enable")
    ]
    assert config.acls[0].policies[0].resource == "Topic:orders" and config.version == 2
    with pytest.raises(grpc.RpcError) as info:
        stub.PutAcl(pb.PutAclRequest(acl=pb.AuthAcl(username="ghost")))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as info:
        stub.PutUser(pb.PutUserRequest(user=pb.AuthUser(username="bad name", password="s")))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as info:
        stub.PutAcl(
            pb.PutAclRequest(
                acl=pb.AuthAcl(
                    username="alice",
                    policies=[pb.AuthPolicy(resource="Topic:orders", actions=["Fly"], decision="Allow")],
                )
            )
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert stub.GetAuthConfig(pb.GetAuthConfigRequest()).version == 2  # refused changes changed nothing
    assert stub.DeleteUser(pb.DeleteUserRequest(username="alice")).existed
    assert not stub.GetAuthConfig(pb.GetAuthConfigRequest()).users
