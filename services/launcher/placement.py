"""Where ``pyrmq up`` runs its processes: a placement plan over the CPUs it may use.

Each service runs its Python under one interpreter lock, so the store and the broker (the hot
processes: every message passes through both) each do best on a core of their own, where their
threads pass the lock without waking another core; pinned apart on a 2-core machine, 32-message
sends went from ~17k to ~24k msgs/s (bench/RESULTS.md, README "Speed on a small machine").
``plan`` gives, with ``--cpu-placement auto`` (the default):

- each store replica and each broker a CPU of its own, stores first, in CPU order, while CPUs
  last; with more of them than CPUs, the brokers keep their share of CPUs to themselves and the
  store replicas share the others in turn (the store and the broker stay apart);
- the other rows (scheduler, txcheck, the local etcd) the CPUs left over, shared; none left: any;
- nothing pinned with fewer than 2 CPUs (nothing to gain) or ``--cpu-placement off``.

A service whose ``cpu_affinity`` is given in the config file or the environment keeps it
(``explicit_affinities``): ``up`` plans only the others, and keeps its planned stores and brokers
off the CPUs an explicitly pinned store or broker names while any other CPU is left.
A row's CPUs reach its process as ``PYRMQ_<SERVICE>_CPU_AFFINITY`` (``affinity_environment``);
the service pins itself at start (services/runtime/process.py, ``apply_cpu_affinity``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from services.runtime.process import parse_cpu_list
from services.runtime.settings import CONFIG_ENV, env_name, read_file

MODES = ("auto", "off")
HOT_SERVICES = ("store", "broker")  # every message passes through both
CPUS_MIN = 2  # with fewer, pinning only takes away the operating system's choice
ANY = ""  # cpu_affinity's "any CPU"


def format_cpu_list(cpus: Iterable[int]) -> str:
    """CPUs in ``taskset -c`` list form, runs as ranges: {0, 1, 2, 5} -> "0-2,5"."""
    parts: list[str] = []
    ordered = sorted(set(cpus))
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            first, last = ordered[start], ordered[i - 1]
            parts.append(str(first) if first == last else f"{first}-{last}")
            start = i
    return ",".join(parts)


def _spread(labels: Sequence[str], cpus: Sequence[int]) -> dict[str, str]:
    """Each label a CPU, in turn."""
    return {label: str(cpus[i % len(cpus)]) for i, label in enumerate(labels)}


def plan(
    available: Iterable[int],
    rows: Sequence[tuple[str, str]],
    explicit: Mapping[str, str] | None = None,
    mode: str = "auto",
) -> dict[str, str]:
    """The CPUs of each row ``up`` places: (label, service) rows in start order -> {label: CPU
    list, "" for any}. ``available``: the CPUs ``up`` may use (os.sched_getaffinity(0));
    ``explicit``: service -> the cpu_affinity its settings give (those rows are left out)."""
    if mode not in MODES:
        raise ValueError(f"cpu placement must be one of {MODES}, got {mode!r}")
    cpus = sorted(set(available))
    explicit = explicit or {}
    placed = [(label, service) for label, service in rows if service not in explicit]
    if mode == "off" or len(cpus) < CPUS_MIN:
        return {label: ANY for label, _ in placed}
    claimed: set[int] = set()
    for service in HOT_SERVICES:
        claimed |= parse_cpu_list(explicit.get(service, ANY))
    pool = [cpu for cpu in cpus if cpu not in claimed] or cpus
    stores = [label for label, service in placed if service == "store"]
    brokers = [label for label, service in placed if service == "broker"]
    hot = stores + brokers
    out: dict[str, str]
    if len(pool) >= len(hot):
        out = {label: str(cpu) for label, cpu in zip(hot, pool, strict=False)}
        rest = pool[len(hot) :]
    elif len(pool) == 1 or not brokers:
        out, rest = _spread(hot, pool), []
    else:  # more hot processes than CPUs: the brokers their share, the stores the others
        broker_cpus = max(1, len(pool) * len(brokers) // len(hot))
        out = {**_spread(stores, pool[:-broker_cpus]), **_spread(brokers, pool[-broker_cpus:])}
        rest = []
    shared = format_cpu_list(rest)
    return {label: out.get(label, shared) for label, _ in placed}


def explicit_affinities(services: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
    """service -> its cpu_affinity, for each service whose config file (``PYRMQ_CONFIG``) or
    environment gives one (explicit settings win over the plan; "" is an explicit "any")."""
    path = environ.get(CONFIG_ENV)
    document = read_file(Path(path)) if path else {}
    out: dict[str, str] = {}
    for service in services:
        table = document.get(service, {})
        if isinstance(table, dict) and "cpu_affinity" in table:
            out[service] = str(table["cpu_affinity"])
        variable = env_name(service, "cpu_affinity")
        if variable in environ:
            out[service] = environ[variable]  # the environment over the file, as settings.resolve
    return out


def affinity_environment(service: str, cpus: str | None) -> dict[str, str]:
    """The variable that pins a planned row (none for "any" or a row ``up`` does not place)."""
    return {env_name(service, "cpu_affinity"): cpus} if cpus else {}


def describe(cpus: frozenset[int] | set[int], available: Iterable[int]) -> str:
    """A process's CPUs for people: "any" when it may use every CPU ``up`` may."""
    return "any" if set(cpus) >= set(available) else format_cpu_list(cpus)


def plan_for_up(rows: Sequence[tuple[str, str]], environ: Mapping[str, str], mode: str) -> dict[str, str]:
    """``plan`` over the CPUs this process may use, leaving out the services pinned by their
    own settings. ValueError (SettingsError) for an unreadable config file or a bad CPU list."""
    explicit = explicit_affinities(sorted({service for _, service in rows}), environ)
    for service, text in explicit.items():
        try:
            parse_cpu_list(text)
        except ValueError as exc:
            raise ValueError(f"{service}.cpu_affinity: {exc}") from None
    return plan(os.sched_getaffinity(0), rows, explicit, mode)


def running_on(pid: int) -> str:
    """The CPUs process ``pid`` may run on, for people ("any", "0", "2-15"); "?" once it is gone."""
    try:
        return describe(os.sched_getaffinity(pid), os.sched_getaffinity(0))
    except OSError:
        return "?"


def placement_text(mode: str) -> str:
    """The placement line of ``pyrmq up``'s table."""
    available = os.sched_getaffinity(0)
    cpus = f"{len(available)} CPU(s) ({format_cpu_list(available)})"
    if mode == "off":
        return f"off (--cpu-placement off): {cpus}, every service on any unless its cpu_affinity says"
    if len(available) < CPUS_MIN:
        return f"off: {cpus}, nothing to gain"
    return (
        f"auto over {cpus}: store and broker on cores of their own, a service's own cpu_affinity wins "
        "(--cpu-placement off: none)"
    )
