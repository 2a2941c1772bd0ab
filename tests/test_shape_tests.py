"""The shape of the test tree: no module under tests/ imports a ``test_*`` module or a
``conftest`` module. Shared helpers, fakes and fixtures live in tests/support/ (a directory's
conftest.py exposes the fixtures it needs); importing a test module would also run its
module-level code and share its fixtures by accident."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SKIPPED_DIRS = {"__pycache__", "node_modules"}


def module_name(path: Path) -> str:
    """The dotted name of a module under tests/ (``tests.broker.test_rpc``)."""
    parts = path.relative_to(TESTS.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_forbidden(dotted: str) -> bool:
    """A module of the tests package that is a test module or a conftest."""
    parts = dotted.split(".")
    return parts[0] == "tests" and any(p.startswith("test_") or p == "conftest" for p in parts[1:])


def resolve(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    """The absolute module of ``from <module> import ...`` (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def forbidden_imports(tree: ast.AST, importer: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, imported module) for each import of a test or conftest module in ``tree``,
    at any depth (function-local imports too), ``importlib.import_module("...")`` included."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if is_forbidden(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            module = resolve(node, importer, is_package)
            if is_forbidden(module):
                found.append((node.lineno, module))
            else:  # from tests.broker import test_rpc / conftest
                found += [
                    (node.lineno, f"{module}.{alias.name}")
                    for alias in node.names
                    if is_forbidden(f"{module}.{alias.name}")
                ]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Attribute, ast.Name))
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and is_forbidden(node.args[0].value)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if not SKIPPED_DIRS & set(p.relative_to(TESTS).parts))


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    # The detector itself, on the shapes it must catch and the ones it must let through.
    samples = {
        "from tests.broker.test_rpc import message": True,
        "import tests.store.conftest": True,
        "from tests.broker import conftest": True,
        "from tests.store import test_pop as pop": True,
        "def f():\n    from tests.pipeline.conftest import start_cluster": True,
        "from .test_rpc import send": True,
        "from . import conftest": True,
        "importlib.import_module('tests.broker.test_rpc')": True,
        "from tests.support.v2_requests import message": False,
        "from tests.faults.checker import History": False,
        "import pytest_timeout, unittest, test": False,
    }
    for source, expected in samples.items():
        assert bool(forbidden_imports(ast.parse(source), "tests.broker.test_x")) is expected, source

    files = python_files()
    assert Path(__file__).resolve() in files and TESTS / "conftest.py" in files  # the scan sees the tree
    offenders = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, imported in forbidden_imports(tree, module_name(path), path.name == "__init__.py"):
            offenders.append(f"{path.relative_to(TESTS.parent)}:{line} imports {imported}")
    assert not offenders, (
        "test and conftest modules are not imported; move what is shared to tests/support/:\n" + "\n".join(offenders)
    )
