"""``pyrmq config``: every service's settings, where each value comes from, and the README table.

    pyrmq config [SERVICE ...] [--config FILE]   effective values and their source, as tables
    pyrmq config --json                          the same as one JSON document
    pyrmq config --toml                          a TOML file with every setting at its default
    pyrmq config --markdown                      the README's settings table (a test keeps them equal)

Values are resolved as the services resolve them (services/runtime/settings.py): defaults < the TOML file
(``--config`` or ``PYRMQ_CONFIG``) < ``PYRMQ_<SERVICE>_<KEY>`` environment variables. A bad file or
variable is reported as the service would report it, with exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from services.broker.config import SETTINGS as BROKER_SETTINGS
from services.runtime import settings
from services.runtime.settings import Setting, env_name, format_value
from services.scheduler.config import SETTINGS as SCHEDULER_SETTINGS
from services.store.config import SETTINGS as STORE_SETTINGS
from services.txcheck.config import SETTINGS as TXCHECK_SETTINGS

CATALOG: dict[str, Mapping[str, Setting]] = {
    "store": STORE_SETTINGS,
    "broker": BROKER_SETTINGS,
    "scheduler": SCHEDULER_SETTINGS,
    "txcheck": TXCHECK_SETTINGS,
}


def markdown_table() -> str:
    """One table of every setting of every service: the README's."""
    lines = ["| Setting (TOML) | Environment variable | Flag | Default | Meaning |", "|---|---|---|---|---|"]
    for service, catalog in CATALOG.items():
        for s in catalog.values():
            default = format_value(s.default)
            shown = "required" if s.default is settings.REQUIRED else f"`{default}`" if default else "(empty)"
            lines.append(
                f"| `[{service}] {s.name}` | `{env_name(service, s.name)}` | "
                f"{f'`{s.flag}`' if s.flag else ''} | {shown} | "
                f"{s.doc.replace('|', '/')} |"
            )
    return "\n".join(lines) + "\n"


def toml_example() -> str:
    """Every setting at its default, commented out, under its service's table."""
    out = [
        "# pyrmq settings (pyrmq config --toml). Uncomment what you change; see the README's table.",
        "# Precedence: defaults < this file < PYRMQ_<SERVICE>_<KEY> environment variables < flags.",
    ]
    for service, catalog in CATALOG.items():
        out += ["", f"[{service}]"]
        for s in catalog.values():
            out.append(f"# {s.doc}")
            out.append(f"# {s.name} = {_toml_value(s.default)}")
    return "\n".join(out) + "\n"


def _toml_value(value: object) -> str:
    if value is settings.REQUIRED:
        return '"..."  # required'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(format_value(value))


def effective(service: str, environ: Mapping[str, str], config: str | None) -> dict[str, settings.Resolved]:
    catalog = dict(CATALOG[service])
    if "data_dir" in catalog:  # shown even where none is given (pyrmq up uses ./data)
        catalog["data_dir"] = dataclasses.replace(catalog["data_dir"], default=Path("data"))
    return settings.resolve(service, catalog, {}, environ, config)


def run(ns: argparse.Namespace) -> int:
    if ns.markdown:
        sys.stdout.write(markdown_table())
        return 0
    if ns.toml:
        sys.stdout.write(toml_example())
        return 0
    services = ns.service or list(CATALOG)
    unknown = [s for s in services if s not in CATALOG]
    if unknown:
        print(f"pyrmq: error: no service {unknown[0]!r} (one of {', '.join(CATALOG)})", file=sys.stderr)
        return 2
    try:
        resolved = {service: effective(service, os.environ, ns.config) for service in services}
    except settings.SettingsError as exc:
        print(f"pyrmq: error: {exc}", file=sys.stderr)
        return 2
    if ns.json:
        print(
            json.dumps(
                {
                    service: {name: {"value": format_value(r.value), "source": r.source} for name, r in values.items()}
                    for service, values in resolved.items()
                },
                indent=2,
            )
        )
        return 0
    from rich.console import Console
    from rich.table import Table

    console = Console(markup=False, highlight=False, emoji=False, width=None if sys.stdout.isatty() else 1_000)
    for service, values in resolved.items():
        table = Table(title=f"[{service}]", title_justify="left")
        for header in ("SETTING", "VALUE", "SOURCE", "ENVIRONMENT VARIABLE"):
            table.add_column(header)
        for name, r in values.items():
            table.add_row(name, format_value(r.value), r.source, env_name(service, name))
        console.print(table)
    return 0


def add_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "config", help="show every service's settings and where they come from", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("service", nargs="*", metavar="SERVICE", help=f"only these ({', '.join(CATALOG)}; default all)")
    parser.add_argument("--config", metavar="FILE", default=None, help="TOML file (default: $PYRMQ_CONFIG)")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="one JSON document")
    shown.add_argument("--toml", action="store_true", help="a TOML file with every setting at its default")
    shown.add_argument("--markdown", action="store_true", help="the README's settings table")
    parser.set_defaults(run=run)
