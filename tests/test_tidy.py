"""House style, enforced (docs/conventions.md: the rules marked "enforced")."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODULE_LINES_MAX = 600
# Entry points may print; everything else logs. The command line: the services/launcher package
# (``pyrmq``, ``pyrmq up``), the services/admin package (the operator commands), and *_cli.py; a
# service's ready line: runtime/service_main.py.
PRINT_ALLOWED = {"__main__.py", "cli.py", "service_main.py"}
CLI_DIRS = (ROOT / "services" / "admin", ROOT / "services" / "launcher")


def is_command_line(f: Path) -> bool:
    return f.name in PRINT_ALLOWED or f.name.endswith("_cli.py") or f.parent in CLI_DIRS


# pyrmq's own v2 client (services/v2client/), a client library of the operator commands: a gRPC
# edge, and it stamps the messages it sends from the wall clock, as the official clients do.
V2_CLIENT_DIR = ROOT / "services" / "v2client"


WALL_CLOCK = re.compile(r"\btime\.(time|time_ns|monotonic|monotonic_ns)\(|datetime\.now\(")
WALL_CLOCK_ALLOWED = {"clock.py", "cli.py", "__main__.py", "metrics.py"}
CORE_DIRS = [ROOT / "services" / "store"]


def tracked_python_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    files = [ROOT / line for line in out.stdout.splitlines() if line]
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    files += [ROOT / line for line in untracked.stdout.splitlines() if line]
    return [f for f in files if f.exists() and not f.name.endswith(("_pb2.py", "_pb2_grpc.py"))]


def service_modules() -> list[Path]:
    return [f for f in tracked_python_files() if f.parts[len(ROOT.parts)] == "services"]


def test_modules_stay_small():
    big = {
        str(f.relative_to(ROOT)): n
        for f in service_modules()
        if (n := len(f.read_text().splitlines())) > MODULE_LINES_MAX
    }
    assert not big, f"modules over {MODULE_LINES_MAX} lines: {big}"


def test_no_print_outside_entry_points():
    offenders = [
        str(f.relative_to(ROOT))
        for f in service_modules()
        if not is_command_line(f) and re.search(r"^\s*print\(", f.read_text(), re.M)
    ]
    assert not offenders


def test_wall_clock_only_in_clock_modules():
    offenders = [
        str(f.relative_to(ROOT))
        for f in service_modules()
        if f.name not in WALL_CLOCK_ALLOWED
        and not is_command_line(f)
        and f.parent != V2_CLIENT_DIR
        and WALL_CLOCK.search(f.read_text())
    ]
    assert not offenders, f"read the wall clock through an injected Clock: {offenders}"


def test_core_does_not_import_grpc():
    offenders = []
    for f in service_modules():
        rel = f.relative_to(ROOT)
        # The gRPC edges: each service's rpc/ shell (the broker's v2/ door), runtime/rpc/, the
        # store client (its job is the store API's protobuf) and the v2 client.
        if (
            "rpc" in rel.parts
            or rel.parts[:3] == ("services", "broker", "v2")
            or rel.parts[:3] == ("services", "store", "client")
            or f.parent == V2_CLIENT_DIR
            or f.name in ("__main__.py", "metrics.py")
            or is_command_line(f)
        ):
            continue
        if re.search(r"^\s*(import grpc|from grpc|.*_pb2)", f.read_text(), re.M):
            offenders.append(str(rel))
    assert not offenders, f"core modules must not import grpc or generated stubs: {offenders}"


def test_format_modules_open_with_a_byte_table():
    formats = list((ROOT / "services" / "domain" / "format").glob("*_format.py"))
    assert formats
    for f in formats:
        if f.name == "properties_format.py":
            continue
        doc = f.read_text().split('"""')[1]
        # JSON files (timermetrics) have no byte offsets: their table names each field's JSON type;
        # line-based text files (epochFileCheckpoint) name each line's content.
        tables = ("| offset |", "| # | offset |", "| field | JSON type |", "| line | content |")
        assert any(table in doc for table in tables), f"{f.name} lacks its byte table"


def test_no_generated_stubs_committed():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert not re.search(r"_pb2(_grpc)?\.pyi?$", out, re.M)


def test_no_fixme_left():
    offenders = [
        str(f.relative_to(ROOT))
        for f in tracked_python_files()
        if f.name != "test_tidy.py" and re.search(r"\bFIXME\b", f.read_text())
    ]
    assert not offenders


def test_mypy_is_strict_over_every_package():
    """``make lint``'s mypy covers every package of the project, and no override hides one."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True
    checked = set(config["files"])
    packages = {f"services/{p.name}" for p in (ROOT / "services").iterdir() if (p / "__init__.py").exists()}
    packages |= {f"services/{p.parent.name}" for p in (ROOT / "services").glob("*/*.py")}
    assert packages | {"pipeline", "pyspark_rocketmq.py"} <= checked, packages - checked
    hidden = [
        module
        for override in config.get("overrides", [])
        if override.get("ignore_errors")
        for module in override["module"]
        if module.split(".")[0] in ("services", "pipeline", "pyspark_rocketmq")
    ]
    assert not hidden, f"ignore_errors hides project modules: {hidden}"
