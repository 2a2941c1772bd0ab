"""``pyrmq acl ...``: users and their ACLs (RocketMQ ACL 2.0), through the broker's admin service;
the store keeps them in config/auth.json.

    pyrmq acl user create NAME [--super] [--disabled]     secret key from $PYRMQ_NEW_SECRET_KEY or a prompt
    pyrmq acl user delete NAME
    pyrmq acl user list
    pyrmq acl policy add USER RESOURCE --actions Pub,Sub [--deny] [--source-ip CIDR ...]
    pyrmq acl policy remove USER RESOURCE
    pyrmq acl list [USER]

RESOURCE is ``Topic:NAME`` or ``Group:NAME`` (that one), ``Topic:PREFIX*`` (names starting so),
``Topic:*`` (every topic) or ``*`` (everything). Actions: Pub, Sub, Create, Update, Delete, Get,
List, All. For a Normal user the most specific matching entry decides (a name, then the longest
prefix, then any), Deny before Allow at equal specificity, and no match denies; a Super user may
do anything. ``user create`` on an existing user changes its secret key, type and status.

With authentication on, these commands need a Super user's ``--access-key`` / ``--secret-key``
(or $PYRMQ_ACCESS_KEY / $PYRMQ_SECRET_KEY). Exit codes as the other admin commands; 2 also for a
bad resource or action, 3 for an unknown user.
"""

from __future__ import annotations

import argparse
import functools
import getpass
import os
import sys

from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc
from rich.console import Console

from services.admin.cli import Document, Render, _print_table, _table, add_leaf, common_arguments

ACTIONS = ("Pub", "Sub", "Create", "Update", "Delete", "Get", "List", "All")
SECRET_ENV = "PYRMQ_NEW_SECRET_KEY"


def _secret() -> str:
    secret = os.environ.get(SECRET_ENV)
    if secret:
        return secret
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\n")
    return getpass.getpass("secret key: ")


def user_create(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    response = stub.PutUser(
        pb.PutUserRequest(username=ns.name, secret_key=_secret(), super_user=ns.super, disabled=ns.disabled),
        timeout=ns.timeout,
    )
    kind = "Super" if ns.super else "Normal"

    def render(console: Console) -> None:
        console.print(
            f"{'Created' if response.created else 'Updated'} user {ns.name} ({kind}"
            f"{', disabled' if ns.disabled else ''})."
        )

    return {"created": response.created, "username": ns.name, "user_type": kind}, render


def user_delete(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    stub.DeleteUser(pb.DeleteUserRequest(username=ns.name), timeout=ns.timeout)
    return {"deleted": ns.name}, lambda console: console.print(f"Deleted user {ns.name} and its ACL.")


def user_list(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    users = [
        {"username": u.username, "user_type": u.user_type, "user_status": u.user_status}
        for u in stub.ListUsers(pb.ListUsersRequest(), timeout=ns.timeout).users
    ]

    def render(console: Console) -> None:
        table = _table("USER", "TYPE", "STATUS")
        for u in users:
            table.add_row(u["username"], u["user_type"], u["user_status"])
        _print_table(console, table, users, "No users.")

    return {"users": users}, render


def _policies_of(stub: pb_grpc.AdminStub, ns: argparse.Namespace, user: str) -> list[pb.Policy]:
    acls = stub.ListAcls(pb.ListAclsRequest(username=user), timeout=ns.timeout).acls
    return list(acls[0].policies) if acls else []


def policy_add(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    """Read the user's policies, replace any entry for the same resource, write them back."""
    policies = [p for p in _policies_of(stub, ns, ns.user) if p.resource != ns.resource]
    policies.append(
        pb.Policy(
            resource=ns.resource,
            actions=ns.actions,
            decision="Deny" if ns.deny else "Allow",
            source_ips=ns.source_ip or [],
        )
    )
    stub.SetAcl(pb.SetAclRequest(acl=pb.Acl(username=ns.user, policies=policies)), timeout=ns.timeout)
    verb = "Deny" if ns.deny else "Allow"
    return (
        {"username": ns.user, "resource": ns.resource, "actions": ns.actions, "decision": verb},
        lambda console: console.print(f"{verb} {ns.user} {','.join(ns.actions)} on {ns.resource}."),
    )


def policy_remove(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    policies = _policies_of(stub, ns, ns.user)
    kept = [p for p in policies if p.resource != ns.resource]
    if len(kept) == len(policies):
        print(f"pyrmq: error: {ns.user} has no policy on {ns.resource}", file=sys.stderr)
        raise SystemExit(3)
    stub.SetAcl(pb.SetAclRequest(acl=pb.Acl(username=ns.user, policies=kept)), timeout=ns.timeout)
    return (
        {"username": ns.user, "removed": ns.resource},
        lambda console: console.print(f"Removed {ns.user}'s policy on {ns.resource}."),
    )


def acl_list(stub: pb_grpc.AdminStub, ns: argparse.Namespace) -> tuple[Document, Render]:
    acls = [
        {
            "username": a.username,
            "policies": [
                {
                    "resource": p.resource,
                    "actions": list(p.actions),
                    "decision": p.decision,
                    "source_ips": list(p.source_ips),
                }
                for p in a.policies
            ],
        }
        for a in stub.ListAcls(pb.ListAclsRequest(username=ns.user or ""), timeout=ns.timeout).acls
    ]
    rows = [(a["username"], p) for a in acls for p in a["policies"]]

    def render(console: Console) -> None:
        table = _table("USER", "RESOURCE", "ACTIONS", "DECISION", "SOURCE IPS")
        for user, p in rows:
            table.add_row(
                user, p["resource"], ",".join(p["actions"]), p["decision"], ",".join(p["source_ips"]) or "any"
            )
        _print_table(console, table, rows, "No policies.")

    return {"acls": acls}, render


def _actions(text: str) -> list[str]:
    by_lower = {a.lower(): a for a in ACTIONS}
    out = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if item.lower() not in by_lower:
            raise argparse.ArgumentTypeError(f"not an action: {item} (one of {', '.join(ACTIONS)})")
        out.append(by_lower[item.lower()])
    if not out:
        raise argparse.ArgumentTypeError("at least one action")
    return out


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = common_arguments()
    acl = commands.add_parser(
        "acl", help="users and their ACLs (authentication and authorization)", description=__doc__.split("\n\n")[0]
    ).add_subparsers(dest="acl_command", required=True, metavar="{user,policy,list}")

    leaf = functools.partial(add_leaf, common)

    user = acl.add_parser("user", help="create, delete and list users").add_subparsers(
        dest="user_command", required=True, metavar="{create,delete,list}"
    )
    create = leaf(
        user,
        "create",
        user_create,
        f"create a user, or change one (the secret key is read from ${SECRET_ENV}, stdin or a prompt)",
    )
    create.add_argument("name", metavar="NAME")
    create.add_argument("--super", action="store_true", help="a Super user: may do anything")
    create.add_argument("--disabled", action="store_true", help="cannot authenticate until re-created without it")
    leaf(user, "delete", user_delete, "delete a user and its ACL").add_argument("name", metavar="NAME")
    leaf(user, "list", user_list, "list users (never their secret keys)")

    policy = acl.add_parser("policy", help="add and remove a user's policies").add_subparsers(
        dest="policy_command", required=True, metavar="{add,remove}"
    )
    add = leaf(policy, "add", policy_add, "allow (or deny) a user actions on a resource")
    add.add_argument("user", metavar="USER")
    add.add_argument("resource", metavar="RESOURCE", help="Topic:NAME, Group:NAME, Topic:PREFIX*, Topic:*, or *")
    add.add_argument("--actions", type=_actions, required=True, help=f"comma-separated: {', '.join(ACTIONS)}")
    add.add_argument("--deny", action="store_true", help="deny instead of allow")
    add.add_argument("--source-ip", action="append", metavar="CIDR", help="only from these addresses (repeatable)")
    remove = leaf(policy, "remove", policy_remove, "remove a user's policy on a resource")
    remove.add_argument("user", metavar="USER")
    remove.add_argument("resource", metavar="RESOURCE")
    leaf(acl, "list", acl_list, "list every user's policies, or one user's").add_argument(
        "user", nargs="?", metavar="USER"
    )
