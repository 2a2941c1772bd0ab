"""services/domain is pure: it imports nothing of the project outside services.domain, and no gRPC."""

from __future__ import annotations

import ast
from pathlib import Path

DOMAIN = Path(__file__).resolve().parents[2] / "services" / "domain"


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_domain_imports_only_the_domain():
    modules = sorted(DOMAIN.rglob("*.py"))
    assert modules
    offenders = {}
    for path in modules:
        bad = {
            name
            for name in imported_modules(path)
            if (name.startswith("services.") and not name.startswith("services.domain"))
            or name.split(".")[0] in ("grpc", "pipeline", "tests")
            or name.endswith(("_pb2", "_pb2_grpc"))
        }
        if bad:
            offenders[str(path.relative_to(DOMAIN))] = sorted(bad)
    assert not offenders, f"domain modules importing outside services.domain: {offenders}"
