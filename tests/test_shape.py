"""The shape of the house, enforced: which package may import which, and no import cycles.

    domain        pure code (formats, names, contracts): imports nothing else of the project
    runtime       what every process shares (clock, settings, gRPC and etcd plumbing): domain only
    coordination  etcd's keys and watched views of replica sets and routes (election rules,
                  RoleView, RouteView): domain and runtime; every layer above may read them
    store.client  the store's client: domain, runtime and coordination only, so a process that
                  talks to the store over gRPC loads none of the engine
    store         the store service (log/, index/, pop/, lite/, metadata/, ha/, rpc/): domain,
                  runtime, coordination and its client; ``store.local_client`` (the client of a
                  store core in this process) is the engine's, not the client's
    broker, scheduler, txcheck
                  domain, runtime, coordination, and other services only through the store client
    v2client      pyrmq's own v2 API client (the operator commands and the pipeline use it)
    admin         the operator commands: domain, runtime, coordination, v2client and the
                  topology of ``pyrmq up`` (launcher.topology)
    pipeline      the Spark jobs: domain, runtime and the two clients (one exception, below)
    launcher      the command line (``pyrmq``, ``pyrmq up``): starts and configures everything;
                  imported by no package

Every import counts, at module level or inside a function.
"""

from __future__ import annotations

import ast
import subprocess
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ("store", "broker", "scheduler", "txcheck")
COMMAND_LINE = "launcher"
TOPOLOGY = "launcher.topology"
ALLOWED: dict[str, set[str]] = {
    "domain": {"domain"},
    "runtime": {"domain", "runtime"},
    "coordination": {"domain", "runtime", "coordination"},
    "store.client": {"domain", "runtime", "coordination", "store.client"},
    "store": {"domain", "runtime", "coordination", "store", "store.client"},
    "broker": {"domain", "runtime", "coordination", "store.client", "broker"},
    "scheduler": {"domain", "runtime", "coordination", "store.client", "scheduler"},
    "txcheck": {"domain", "runtime", "coordination", "store.client", "txcheck"},
    "v2client": {"domain", "runtime", "v2client"},
    "admin": {"domain", "runtime", "coordination", "v2client", "admin", TOPOLOGY},
    "pipeline": {"domain", "runtime", "store.client", "v2client", "pipeline"},
}
# The rebuild job writes the store's own cache files (ConsumeQueue, IndexFile) from a CommitLog,
# with the very code the store's dispatch runs: it is a store tool that happens to run on Spark.
EXCEPTIONS = {("pipeline.jobs.rebuild", "store")}


def _modules() -> dict[str, Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "services/*.py", "pipeline/*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    modules = {}
    for line in out.splitlines():
        path = ROOT / line
        if not path.exists():
            continue
        parts = list(Path(line).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (``from pkg import module`` counts the module)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # ``from package import submodule`` depends on the submodule; names defined in
                # the module (or the package's __init__) on the module.
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                targets = subs + ([node.module] if len(subs) < len(node.names) else [])
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            edges[name].update(t for t in targets if t in modules and t != name)
    return edges


def layer(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "pipeline":
        return "pipeline"
    if parts[:3] == ["services", "store", "client"]:
        return "store.client"
    if parts[:3] == ["services", "launcher", "topology"]:
        return TOPOLOGY
    if len(parts) >= 2 and (ROOT / "services" / parts[1]).is_dir():
        return parts[1]
    return COMMAND_LINE


def test_packages_import_only_what_their_layer_allows() -> None:
    edges = _imports(_modules())
    offenders = []
    for source, targets in sorted(edges.items()):
        mine = layer(source)
        if mine in (COMMAND_LINE, TOPOLOGY):
            continue
        for target in sorted(targets):
            theirs = layer(target)
            if theirs not in ALLOWED[mine] and (source, theirs) not in EXCEPTIONS:
                offenders.append(f"{source} -> {target}")
    assert not offenders, "imports across layers the shape forbids:\n" + "\n".join(offenders)


def test_the_command_line_is_imported_by_no_package() -> None:
    edges = _imports(_modules())
    offenders = [
        f"{source} -> {target}"
        for source, targets in edges.items()
        for target in targets
        if layer(target) == COMMAND_LINE and layer(source) != COMMAND_LINE
    ]
    assert not offenders


def test_no_import_cycles() -> None:
    edges = _imports(_modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_the_rules_know_every_package() -> None:
    packages = {layer(m) for m in _modules()} - {COMMAND_LINE, TOPOLOGY}
    assert packages <= set(ALLOWED), packages - set(ALLOWED)
    assert set(SERVICES) <= packages
