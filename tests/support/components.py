"""What some tests need besides the project's own code, and what happens when it is missing.

`make setup` installs every component here (Python packages with the test extras, Java, node and etcd
through apt-get, the Node.js client with npm ci, and the remoting peers: ali-ons with npm ci,
rocketmq-client-python in .venv-rocketmq-cpp). A test says what it needs with the registered
marker ``@pytest.mark.needs("<component>", ...)``, handled by tests/conftest.py; fixtures call
``require`` (the ``spark`` fixture), and a module whose imports need a component calls
``require(..., module_level=True)`` before them.

A missing component skips the test with the reason, except under ``PYRMQ_REQUIRE_COMPONENTS=1``
(``make test``, so CI), where the test fails: "<component> is missing: <reason>; `make setup`
installs it". Each check runs once per process (some start a subprocess).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REQUIRE_ENV = "PYRMQ_REQUIRE_COMPONENTS"
JAVA_MIN = 17
NODE_MIN = (16, 19)
ETCD_MIN = (3, 4)
NODE_CLIENT_DIR = Path(__file__).resolve().parents[1] / "broker" / "clients" / "node"
# The remoting test peers (tests/support/remoting_peers.py drives them), each in its own environment.
REMOTING_PEERS_DIR = Path(__file__).resolve().parents[1] / "remoting" / "peers"
ALI_ONS_DIR = REMOTING_PEERS_DIR / "ali-ons"
ALI_ONS_VERSION = "3.12.0"
CPP_PEER_VENV = Path(__file__).resolve().parents[2] / ".venv-rocketmq-cpp"
CPP_PEER_PYTHON = CPP_PEER_VENV / "bin" / "python"
CPP_PEER_VERSION = "0.5.0rc2"


def java_major() -> int | None:
    """The major version of `java` on PATH (else $JAVA_HOME/bin/java); None if there is none."""
    java = shutil.which("java") or (os.environ.get("JAVA_HOME") and str(Path(os.environ["JAVA_HOME"]) / "bin" / "java"))
    if not java:
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def _python_package(module: str, package: str, extra: str) -> Callable[[], str | None]:
    def check() -> str | None:
        if importlib.util.find_spec(module) is None:
            return f"{package} not installed (pip install -e '.[{extra}]')"
        return None

    return check


def spark_missing() -> str | None:
    """pyspark and Java >= JAVA_MIN (what one local SparkSession needs)."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark not installed (pip install -e '.[spark]')"
    major = java_major()
    if major is None or major < JAVA_MIN:
        return (
            f"Java >= {JAVA_MIN} is needed for Spark (found {major or 'none'}); "
            "install it: apt-get install -y openjdk-17-jre-headless"
        )
    return None


def node_client_missing() -> str | None:
    """node >= NODE_MIN on PATH and the Node.js client installed by npm ci in NODE_CLIENT_DIR."""
    node = shutil.which("node")
    wanted = ".".join(map(str, NODE_MIN))
    if node is None:
        return f"node not on PATH (the Node.js client tests need Node >= {wanted}; apt-get install -y nodejs npm)"
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`node --version` failed: {exc}"
    match = re.match(r"v(\d+)\.(\d+)", version)
    if not match or (int(match.group(1)), int(match.group(2))) < NODE_MIN:
        return f"node {version or '(no version)'} is too old (the Node.js client tests need Node >= {wanted})"
    if not (NODE_CLIENT_DIR / "node_modules" / "rocketmq-client-nodejs" / "package.json").is_file():
        return "rocketmq-client-nodejs not installed (npm ci in tests/broker/clients/node)"
    return None


def etcd_binary() -> str | None:
    """The `etcd` server binary: on PATH, else where Debian's etcd-server puts it."""
    return shutil.which("etcd") or (os.access("/usr/bin/etcd", os.X_OK) and "/usr/bin/etcd") or None


def etcd_missing() -> str | None:
    """An `etcd` server >= ETCD_MIN (the replica-set coordination tests start real members)."""
    wanted = ".".join(map(str, ETCD_MIN))
    etcd = etcd_binary()
    if etcd is None:
        return f"etcd not on PATH (etcd >= {wanted}; apt-get install -y etcd-server etcd-client)"
    try:
        out = subprocess.run([etcd, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`etcd --version` failed: {exc}"
    match = re.search(r"etcd Version: (\d+)\.(\d+)", out)
    if not match or (int(match.group(1)), int(match.group(2))) < ETCD_MIN:
        return f"etcd {match.group(0) if match else '(no version)'} is too old (etcd >= {wanted} is needed)"
    return None


def node_missing(purpose: str) -> str | None:
    """node >= NODE_MIN on PATH, for ``purpose`` (named in the reason)."""
    node = shutil.which("node")
    wanted = ".".join(map(str, NODE_MIN))
    if node is None:
        return f"node not on PATH ({purpose} needs Node >= {wanted}; apt-get install -y nodejs npm)"
    try:
        version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`node --version` failed: {exc}"
    match = re.match(r"v(\d+)\.(\d+)", version)
    if not match or (int(match.group(1)), int(match.group(2))) < NODE_MIN:
        return f"node {version or '(no version)'} is too old ({purpose} needs Node >= {wanted})"
    return None


def ali_ons_missing() -> str | None:
    """node >= NODE_MIN and ali-ons ALI_ONS_VERSION installed by npm ci in ALI_ONS_DIR."""
    if reason := node_missing("the ali-ons remoting peer"):
        return reason
    package = ALI_ONS_DIR / "node_modules" / "ali-ons" / "package.json"
    if not package.is_file():
        return "ali-ons not installed (npm ci in tests/remoting/peers/ali-ons)"
    version = json.loads(package.read_text()).get("version")
    if version != ALI_ONS_VERSION:
        return f"ali-ons {version} installed, {ALI_ONS_VERSION} wanted (npm ci in tests/remoting/peers/ali-ons)"
    return None


def cpp_peer_missing() -> str | None:
    """rocketmq-client-python CPP_PEER_VERSION (the binding of rocketmq-client-cpp) importable by
    CPP_PEER_PYTHON, its bundled librocketmq.so loaded."""
    if not os.access(CPP_PEER_PYTHON, os.X_OK):
        return f"no {CPP_PEER_VENV.name} (a venv with rocketmq-client-python=={CPP_PEER_VERSION})"
    probe = "import importlib.metadata as m, rocketmq.client; print(m.version('rocketmq-client-python'))"
    try:
        done = subprocess.run([str(CPP_PEER_PYTHON), "-c", probe], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{CPP_PEER_PYTHON} failed to start: {exc}"
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no error text)"]
        return f"rocketmq-client-python does not load in {CPP_PEER_VENV.name}: {tail[0]}"
    if done.stdout.strip() != CPP_PEER_VERSION:
        return f"rocketmq-client-python {done.stdout.strip()} in {CPP_PEER_VENV.name}, {CPP_PEER_VERSION} wanted"
    return None


# Component name -> its check: None when present, else why it is missing.
CHECKS: dict[str, Callable[[], str | None]] = {
    "rocketmq-python-client": _python_package("rocketmq", "rocketmq-python-client", "test"),
    "rocketmq-client-nodejs": node_client_missing,
    "pyarrow": _python_package("pyarrow", "pyarrow", "spark"),
    "spark": spark_missing,
    "etcd": etcd_missing,
    "ali-ons": ali_ons_missing,
    "rocketmq-client-cpp": cpp_peer_missing,
}


@functools.cache
def missing(component: str) -> str | None:
    """Why ``component`` is missing, or None when it is present (checked once per process)."""
    if component not in CHECKS:
        raise ValueError(f"unknown component {component!r} (tests/support/components.py knows {sorted(CHECKS)})")
    return CHECKS[component]()


def components_required() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


def require(*components: str, module_level: bool = False) -> None:
    """Skip (or, under PYRMQ_REQUIRE_COMPONENTS=1, fail) the current test unless every component is
    present. ``module_level``: called while a test module is being imported (collection)."""
    for component in components:
        reason = missing(component)
        if reason is None:
            continue
        if components_required():
            pytest.fail(f"{component} is missing: {reason}; `make setup` installs it", pytrace=False)
        pytest.skip(f"{component} is missing: {reason}", allow_module_level=module_level)
