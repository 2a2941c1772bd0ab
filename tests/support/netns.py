"""Test hosts: each a Linux network namespace with its own address, so services run as they would
on separate machines, and the network between them can be cut, made lossy, slow or late.

Layout (``Hosts(["etcd-0", "store-0", ...])``, as root)::

    root namespace (the test, its clients)          pyrmq-<run>-net (the bridge's namespace)
      pq<pid>x<k>  10.77.N.254/24  ── veth ──  root ─┐
                                                      br0 ── p0 ── veth ── eth0 10.77.N.1  pyrmq-<run>-etcd-0
                                                          ── p1 ── veth ── eth0 10.77.N.2  pyrmq-<run>-store-0 ...

``<run>`` is ``<pid>-<k>`` (the test process and a counter), so namespaces of a crashed run are
recognised by a dead pid and removed (``cleanup_stale``, called by every ``Hosts`` start). The
/24 (``10.77.N.0/24``) is picked free of the root namespace's addresses under a lock file; it is
only ever used between these namespaces and the root's one veth: nothing is routed anywhere
else. Clients in the root namespace (the test's workload) reach the hosts through that veth;
the hosts' own rules never touch the root namespace.

Every host gets an nft table ``inet pyrmq`` (sets ``drop_to`` / ``drop_from`` with a drop rule
on output / input) at creation. The primitives, all reversible:

* ``block(source, destination)`` / ``unblock``: packets from one host to the other are dropped
  (reference-counted per direction, so overlapping partitions compose).
* ``add_loss(host, percent, peer)`` / ``remove_rule``: ``numgen random mod 100 < percent drop``
  on the host's traffic (to and from ``peer``, or all of it on eth0).
* ``add_delay(host, delay_ms, peer)`` / ``remove_delay``: netem is not in this kernel, so a delay
  is a TCP relay (tests/support/delay_proxy.py) in ``host``'s namespace that every connection
  between ``host`` and ``peer`` is redirected through (nft ``redirect``: the host's own
  connections in output, the peer's in prerouting; the relay dials on with SO_MARK, which the
  rule skips), holding each chunk ``delay_ms`` in each direction. Connections open at that
  moment are reset (``ss -K``) so they reconnect through it; when it ends, the relay's
  connections close and clients reconnect directly. It delays streams, not packets: handshakes
  and retransmissions are not slowed.
* ``shape(host, rate_kbit)`` / ``unshape``: a tbf qdisc on both ends of the host's veth (a slow
  link: latency grows only with the queue).
* ``set_clock(host, offset_s)``: the wall clock of the host's processes started with
  ``faketime=True`` (libfaketime preloaded, FAKETIME_TIMESTAMP_FILE re-read on every call:
  FAKETIME_NO_CACHE, monotonic clocks left alone: DONT_FAKE_MONOTONIC). libfaketime 0.9.10 turns
  ``clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME)`` into EINVAL with DONT_FAKE_MONOTONIC, which
  is how Python's ``time.sleep`` sleeps, so such a process also gets a ``sitecustomize`` that
  sleeps through ``select`` (the same monotonic deadline). Go programs (etcd) ignore LD_PRELOAD.
* ``mount_tmpfs(path, size_bytes)``: a filesystem of its own for a service's data (disk full).

``Host.command(args)`` is ``ip netns exec <namespace> args`` (which execs: the pid is the
service's), ``Host.popen`` runs it. ``close()`` (the context manager's exit) kills whatever still
runs in the namespaces, unmounts, and deletes them.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.components import components_required

PREFIX = "pyrmq"
SUBNET = "10.77"  # 10.77.N.0/24, N picked per run
CLIENT_OCTET = 254  # the root namespace's address on the run's /24
LOCK_PATH = Path("/run/lock/pyrmq-netns.lock")
RUN_DIR_PARENT = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
FAKETIME_LIBS = "/usr/lib/*/faketime/libfaketime.so.1"
DELAY_MARK = 0x7701  # SO_MARK of the delay relays' own connections (the redirect rules skip it)
COMMAND_TIMEOUT_S = 20.0
ROOT = Path(__file__).resolve().parents[2]
_NAMESPACE = re.compile(rf"^{PREFIX}-(?P<pid>\d+)-\d+-")
_ROOT_LINK = re.compile(r"^pq(?P<pid>\d+)x\d+$")
_RUN_DIR = re.compile(rf"^{PREFIX}-hosts-(?P<pid>\d+)-")
_HANDLE = re.compile(r"# handle (\d+)")
_runs = itertools.count()

# Python's time.sleep is clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME), which libfaketime 0.9.10
# breaks (EINVAL) when monotonic time is not faked: sleep on select's timeout instead.
SITECUSTOMIZE = '''"""Written by tests/support/netns.py for processes run under libfaketime."""
import select as _select
import time as _time


def _sleep(seconds):
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    deadline = _time.monotonic() + seconds
    while (left := deadline - _time.monotonic()) > 0:
        _select.select([], [], [], left)


_time.sleep = _sleep
'''


def faketime_lib() -> str | None:
    found = sorted(glob.glob(FAKETIME_LIBS))
    return found[0] if found else None


def hosts_missing() -> str | None:
    """Why test hosts cannot be made here (None: they can): root, ip, nft, tc, ss, libfaketime."""
    if os.geteuid() != 0:
        return "test hosts (network namespaces) need root"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("ss", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None and not os.access(f"/usr/sbin/{tool}", os.X_OK):
            return f"`{tool}` not found (apt-get install -y {package})"
    if faketime_lib() is None:
        return "libfaketime not found (apt-get install -y faketime)"
    return None


def require_hosts() -> None:
    """Skip (or, under PYRMQ_REQUIRE_COMPONENTS=1, fail) unless test hosts can be made."""
    reason = hosts_missing()
    if reason is None:
        return
    if components_required():
        pytest.fail(
            f"test hosts are missing: {reason} (they run as root; `make setup` installs nftables, faketime, iproute2)",
            pytrace=False,
        )
    pytest.skip(f"test hosts are missing: {reason}")


def run(args: Sequence[str], check: bool = True, input: str | None = None) -> str:
    """A command's stdout; RuntimeError with its stderr when it fails and ``check``."""
    done = subprocess.run(list(args), capture_output=True, text=True, input=input, timeout=COMMAND_TIMEOUT_S)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Host:
    """One test host: a namespace (None: the root namespace, where the test's clients run)."""

    name: str
    namespace: str | None
    address: str
    clock_file: Path | None = None  # the libfaketime timestamp file of its faketime processes
    clock_offset_s: float = 0.0

    def command(self, args: Sequence[str], faketime: bool = False) -> list[str]:
        """``args`` as run on this host (``ip netns exec``), with libfaketime preloaded if asked."""
        prefix: list[str] = []
        if faketime:
            assert self.clock_file is not None, f"host {self.name} has no clock (the root namespace)"
            site = str(self.clock_file.parent)
            path = os.pathsep.join(filter(None, [site, os.environ.get("PYTHONPATH", "")]))
            prefix = [
                "env",
                f"LD_PRELOAD={faketime_lib()}",
                f"FAKETIME_TIMESTAMP_FILE={self.clock_file}",
                "FAKETIME_NO_CACHE=1",
                "DONT_FAKE_MONOTONIC=1",
                "NO_FAKE_STAT=1",  # file times stay the kernel's, as on a host whose clock jumped
                f"PYTHONPATH={path}",
            ]
        if self.namespace is None:
            return [*prefix, *args]
        return ["ip", "netns", "exec", self.namespace, *prefix, *args]

    def popen(self, args: Sequence[str], faketime: bool = False, **kwargs: object) -> subprocess.Popen[str]:
        """``subprocess.Popen`` of ``args`` on this host (text mode; ``kwargs`` passed on)."""
        return subprocess.Popen(self.command(args, faketime), text=True, **kwargs)  # type: ignore[call-overload]

    def run(self, args: Sequence[str], check: bool = True, input: str | None = None) -> str:
        return run(self.command(args), check=check, input=input)

    def nft(self, script: str) -> str:
        """``nft -e -a -f -`` in this host's namespace (echoes what it added, with handles)."""
        assert self.namespace is not None, "no rules in the root namespace"
        return self.run(["nft", "-e", "-a", "-f", "-"], input=script)

    def pids(self) -> list[int]:
        if self.namespace is None:
            return []
        return [int(p) for p in run(["ip", "netns", "pids", self.namespace], check=False).split()]


@dataclass
class Rule:
    """An nft rule added to a host's ``inet pyrmq`` table, by chain and handle."""

    host: Host
    chain: str
    handle: int


@dataclass
class Delay:
    """A delay relay in ``host``'s namespace and its redirect table."""

    host: Host
    peer: Host
    table: str
    relay: subprocess.Popen[str]


@dataclass
class Hosts:
    """The namespaces, the bridge and the root's veth of one run; a context manager."""

    names: Sequence[str]
    client: bool = True  # the root namespace gets an address on the run's /24 (clients run there)
    run_id: str = field(default_factory=lambda: f"{os.getpid()}-{next(_runs)}")
    hosts: dict[str, Host] = field(default_factory=dict)
    subnet: str = ""  # 10.77.N
    root_dir: Path = Path()
    _blocks: Counter[tuple[str, str]] = field(default_factory=Counter)
    _mounts: list[Path] = field(default_factory=list)
    _delays: list[Delay] = field(default_factory=list)
    _shaped: set[str] = field(default_factory=set)
    _tables: Iterator[int] = field(default_factory=itertools.count)

    @property
    def net_namespace(self) -> str:
        return f"{PREFIX}-{self.run_id}-net"

    @property
    def root_link(self) -> str:
        pid, k = self.run_id.split("-")
        return f"pq{pid}x{k}"

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def __enter__(self) -> Hosts:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- making and removing
    def start(self) -> Hosts:
        cleanup_stale()
        self.root_dir = Path(tempfile.mkdtemp(prefix=f"{PREFIX}-hosts-{os.getpid()}-", dir=RUN_DIR_PARENT))
        (self.root_dir / "clock").mkdir()
        (self.root_dir / "clock" / "sitecustomize.py").write_text(SITECUSTOMIZE)
        try:
            LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
            with open(LOCK_PATH, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # two runs must not pick the same /24
                self.subnet = f"{SUBNET}.{free_subnet_octet()}"
                self._make_bridge()
            for i, name in enumerate(self.names):
                self._make_host(i, name)
        except BaseException:
            self.close()
            raise
        return self

    def _make_bridge(self) -> None:
        net = self.net_namespace
        run(["ip", "netns", "add", net])
        run(["ip", "-n", net, "link", "add", "br0", "type", "bridge"])
        run(["ip", "-n", net, "link", "set", "br0", "up"])
        run(["ip", "-n", net, "link", "set", "lo", "up"])
        if self.client:
            link = self.root_link
            run(["ip", "link", "add", link, "type", "veth", "peer", "name", "root", "netns", net])
            run(["ip", "-n", net, "link", "set", "root", "master", "br0", "up"])
            run(["ip", "addr", "add", f"{self.subnet}.{CLIENT_OCTET}/24", "dev", link])
            run(["ip", "link", "set", link, "up"])
            self.hosts["client"] = Host("client", None, f"{self.subnet}.{CLIENT_OCTET}")

    def _make_host(self, i: int, name: str) -> None:
        assert name not in self.hosts, f"host {name} twice"
        assert i + 1 < CLIENT_OCTET, "too many hosts for one /24"
        namespace = f"{PREFIX}-{self.run_id}-{name}"
        port = f"p{i}"
        address = f"{self.subnet}.{i + 1}"
        run(["ip", "netns", "add", namespace])
        run(
            [
                "ip",
                "-n",
                self.net_namespace,
                "link",
                "add",
                port,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                namespace,
            ]
        )
        run(["ip", "-n", self.net_namespace, "link", "set", port, "master", "br0", "up"])
        run(["ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0"])
        run(["ip", "-n", namespace, "link", "set", "eth0", "up"])
        run(["ip", "-n", namespace, "link", "set", "lo", "up"])
        clock = self.root_dir / "clock" / name
        clock.write_text("+0\n")
        host = Host(name, namespace, address, clock)
        host.nft(
            "table inet pyrmq {\n"
            "  set drop_to { type ipv4_addr; }\n"
            "  set drop_from { type ipv4_addr; }\n"
            "  chain output { type filter hook output priority 0; policy accept; ip daddr @drop_to drop; }\n"
            "  chain input { type filter hook input priority 0; policy accept; ip saddr @drop_from drop; }\n"
            "}\n"
        )
        self.hosts[name] = host

    def close(self) -> None:
        """Stop every relay, kill what runs in the namespaces, unmount, delete them (idempotent)."""
        for delay in list(self._delays):
            self.remove_delay(delay)
        namespaces = [h.namespace for h in self.hosts.values() if h.namespace] + [self.net_namespace]
        for namespace in namespaces:
            _kill_namespace(namespace)
        for mount in reversed(self._mounts):
            run(["umount", "-l", str(mount)], check=False)
        self._mounts.clear()
        for namespace in namespaces:
            run(["ip", "netns", "delete", namespace], check=False)
        if self.client:
            run(["ip", "link", "delete", self.root_link], check=False)  # gone with its peer already
        self.hosts.clear()
        if self.root_dir != Path() and self.root_dir.exists():
            shutil.rmtree(self.root_dir, ignore_errors=True)

    # -- partitions
    def block(self, source: Host, destination: Host) -> None:
        """Drop every packet from ``source`` to ``destination`` (until as many ``unblock``s)."""
        key = (source.name, destination.name)
        self._blocks[key] += 1
        if self._blocks[key] == 1:
            self._set_block(source, destination, "add")

    def unblock(self, source: Host, destination: Host) -> None:
        key = (source.name, destination.name)
        if self._blocks[key] <= 0:
            return
        self._blocks[key] -= 1
        if self._blocks[key] == 0:
            self._set_block(source, destination, "delete")

    def _set_block(self, source: Host, destination: Host, verb: str) -> None:
        # Dropped at both ends where there is a namespace (the root's client has none of ours).
        if source.namespace is not None:
            source.nft(f"{verb} element inet pyrmq drop_to {{ {destination.address} }}\n")
        if destination.namespace is not None:
            destination.nft(f"{verb} element inet pyrmq drop_from {{ {source.address} }}\n")

    def blocked(self) -> list[tuple[str, str]]:
        return sorted(key for key, count in self._blocks.items() if count > 0)

    # -- loss
    def add_loss(self, host: Host, percent: int, peer: Host | None = None) -> list[Rule]:
        """Drop ``percent`` % of ``host``'s packets to and from ``peer`` (None: all on eth0),
        each packet drawn alone; the rules, for ``remove_rule``."""
        assert 0 < percent <= 100 and host.namespace is not None
        out_match = f"ip daddr {peer.address}" if peer else 'oifname "eth0"'
        in_match = f"ip saddr {peer.address}" if peer else 'iifname "eth0"'
        rules = []
        for chain, match in (("output", out_match), ("input", in_match)):
            echoed = host.nft(f"add rule inet pyrmq {chain} {match} numgen random mod 100 < {percent} drop\n")
            handle = _HANDLE.search(echoed)
            assert handle is not None, f"no handle in nft's echo: {echoed!r}"
            rules.append(Rule(host, chain, int(handle.group(1))))
        return rules

    def remove_rule(self, rule: Rule) -> None:
        if rule.host.name in self.hosts:
            rule.host.nft(f"delete rule inet pyrmq {rule.chain} handle {rule.handle}\n")

    # -- delay
    def add_delay(self, host: Host, delay_ms: int, peer: Host) -> Delay:
        """Every TCP connection between ``host`` and ``peer`` goes through a relay in ``host``'s
        namespace that holds each chunk ``delay_ms`` each way (module docstring)."""
        assert host.namespace is not None and delay_ms >= 0
        relay = host.popen(
            [sys.executable, "-m", "tests.support.delay_proxy", "--delay-ms", str(delay_ms), "--mark", str(DELAY_MARK)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        assert relay.stdout is not None
        ready = relay.stdout.readline()
        match = re.match(r"delay-proxy ready port=(\d+)", ready)
        if match is None:
            relay.kill()
            raise RuntimeError(f"delay relay did not start: {ready!r} {relay.communicate()[1]}")
        port = int(match.group(1))
        table = f"pyrmq_delay{next(self._tables)}"
        host.nft(
            f"table ip {table} {{\n"
            "  chain output { type nat hook output priority -100; policy accept;\n"
            f"    ip daddr {peer.address} meta l4proto tcp meta mark != {DELAY_MARK} redirect to :{port}; }}\n"
            "  chain prerouting { type nat hook prerouting priority -100; policy accept;\n"
            f"    ip saddr {peer.address} meta l4proto tcp redirect to :{port}; }}\n"
            "}\n"
        )
        delay = Delay(host, peer, table, relay)
        self._delays.append(delay)
        host.run(["ss", "-K", "dst", peer.address], check=False)  # reconnect through the relay
        return delay

    def remove_delay(self, delay: Delay) -> None:
        if delay not in self._delays:
            return
        self._delays.remove(delay)
        if delay.host.name in self.hosts:
            delay.host.nft(f"delete table ip {delay.table}\n")
        delay.relay.kill()  # its connections close: clients reconnect directly
        delay.relay.communicate()

    # -- rate
    def shape(self, host: Host, rate_kbit: int, latency_ms: int = 1000) -> None:
        """A tbf qdisc of ``rate_kbit`` on both ends of ``host``'s veth (queueing up to ``latency_ms``)."""
        assert host.namespace is not None and host.name not in self._shaped, f"{host.name} is shaped already"
        burst = max(1600, rate_kbit * 1000 // 8 // 100)  # 10 ms of traffic, at least a packet
        index = list(self.names).index(host.name)
        for args in (["-n", host.namespace, "qdisc", "replace", "dev", "eth0"],
                     ["-n", self.net_namespace, "qdisc", "replace", "dev", f"p{index}"]):  # fmt: skip
            run(
                [
                    "tc",
                    *args,
                    "root",
                    "tbf",
                    "rate",
                    f"{rate_kbit}kbit",
                    "burst",
                    str(burst),
                    "latency",
                    f"{latency_ms}ms",
                ]
            )
        self._shaped.add(host.name)

    def unshape(self, host: Host) -> None:
        if host.name not in self._shaped:
            return
        self._shaped.discard(host.name)
        index = list(self.names).index(host.name)
        run(["tc", "-n", str(host.namespace), "qdisc", "del", "dev", "eth0", "root"], check=False)
        run(["tc", "-n", self.net_namespace, "qdisc", "del", "dev", f"p{index}", "root"], check=False)

    # -- clocks and disks
    def set_clock(self, host: Host, offset_s: float) -> None:
        """The wall clock of ``host``'s faketime processes becomes real time + ``offset_s`` (at
        their next clock read: the file is re-read on every call). Written whole, then renamed."""
        assert host.clock_file is not None, f"host {host.name} has no clock file"
        temporary = host.clock_file.with_suffix(".new")
        temporary.write_text(f"{offset_s:+.3f}\n")
        temporary.rename(host.clock_file)
        host.clock_offset_s = offset_s

    def mount_tmpfs(self, path: Path, size_bytes: int) -> Path:
        """A tmpfs of ``size_bytes`` at ``path`` (made if missing), unmounted by ``close``."""
        path.mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0700", f"{PREFIX}-disk", str(path)])
        self._mounts.append(path)
        return path


def free_subnet_octet() -> int:
    """An N in 1..250 whose 10.77.N.0/24 no root-namespace address or route uses (the run's pid
    picks where the search starts)."""
    used = set()
    for line in (
        run(["ip", "-4", "-j", "addr", "show"]).splitlines() + run(["ip", "-4", "-j", "route", "show"]).splitlines()
    ):
        for match in re.finditer(rf"\b{re.escape(SUBNET)}\.(\d+)\.", line):
            used.add(int(match.group(1)))
    start = os.getpid() % 250
    for k in range(250):
        octet = (start + k) % 250 + 1
        if octet not in used:
            return octet
    raise RuntimeError(f"no free {SUBNET}.N.0/24 in the root namespace")


def _kill_namespace(namespace: str) -> None:
    """SIGKILL every process in ``namespace`` (they are the test's)."""
    for pid in run(["ip", "netns", "pids", namespace], check=False).split():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def cleanup_stale() -> list[str]:
    """Remove what crashed runs left: namespaces ``pyrmq-<pid>-...`` (and what runs in them),
    root veths ``pq<pid>x<k>``, tmpfs mounts and run directories whose ``<pid>`` is dead.
    Returns what it removed."""
    removed = []
    for mount in Path("/proc/mounts").read_text().splitlines():
        source, target, *_ = mount.split()
        owner = re.search(rf"/{PREFIX}-hosts-(\d+)-", target)
        if source == f"{PREFIX}-disk" and owner and not _pid_alive(int(owner.group(1))):
            run(["umount", "-l", target], check=False)
            removed.append(target)
    for name in run(["ip", "netns", "list"], check=False).split("\n"):
        namespace = name.split(" ")[0]
        match = _NAMESPACE.match(namespace)
        if match and not _pid_alive(int(match.group("pid"))):
            _kill_namespace(namespace)
            run(["ip", "netns", "delete", namespace], check=False)
            removed.append(namespace)
    for link in json.loads(run(["ip", "-j", "link", "show"], check=False) or "[]"):
        match = _ROOT_LINK.match(link.get("ifname", ""))
        if match and not _pid_alive(int(match.group("pid"))):
            run(["ip", "link", "delete", link["ifname"]], check=False)
            removed.append(link["ifname"])
    for path in RUN_DIR_PARENT.glob(f"{PREFIX}-hosts-*"):
        match = _RUN_DIR.match(path.name)
        if match and not _pid_alive(int(match.group("pid"))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(str(path))
    return removed
