"""Settings: a service's frozen config dataclass filled from four layers, each over the last::

    defaults (the dataclass)  <  TOML file  <  environment  <  command line

The TOML file (``--config FILE``, or the ``PYRMQ_CONFIG`` variable) has one table per service
and the dataclass field names as keys; one file can configure the whole cluster::

    [store]
    data_dir = "/var/lib/pyrmq"
    flush_mode = "SYNC"

    [broker]
    consumer_receive_batch_size = 64

An environment variable is ``PYRMQ_<SERVICE>_<KEY>`` in capitals (``PYRMQ_STORE_FLUSH_MODE=SYNC``),
the names docker-compose files use. Every setting can also be given on the command line as
``--set KEY=VALUE``; the common ones have their own flag (``--port``). Text values (environment,
command line) are read as the setting's type: integers as Python writes them (``10_000``),
booleans ``true/false/yes/no/on/off/1/0``, enums by name, tuples comma-separated.

A key the service does not have, in the file or as a ``PYRMQ_<SERVICE>_`` variable, is an error
that names the closest known key: a typo must not silently leave the default in force.

A setting's documentation is the comment on its line in the dataclass (or the comment block
just above it): ``pyrmq config --markdown`` renders the README's table from them.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import enum
import inspect
import io
import os
import tokenize
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_ENV = "PYRMQ_CONFIG"
ENV_PREFIX = "PYRMQ_"
REQUIRED = dataclasses.MISSING
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


class SettingsError(ValueError):
    """A setting that cannot be used; the message names where it came from."""


@dataclass(frozen=True)
class Setting:
    name: str  # the dataclass field name, the TOML key
    type: Any  # its annotation (int, str, Path, an Enum, tuple[int, ...], ...)
    default: Any  # REQUIRED if it has none
    doc: str  # one sentence, from the source comment
    flag: str = ""  # its own command-line flag, if any ("--port")


@dataclass(frozen=True)
class Resolved:
    value: Any
    source: str  # "default", "file FILE", "env NAME", "command line"


def env_name(service: str, key: str) -> str:
    return f"{ENV_PREFIX}{service}_{key}".upper()


def settings_of(
    cls: type, exclude: tuple[str, ...] = (), extra: tuple[Setting, ...] = (), flags: Mapping[str, str] | None = None
) -> dict[str, Setting]:
    """The settings of a config dataclass: its fields (less ``exclude``) and ``extra`` ones
    (``data_dir``, which the service turns into a path of its own), with their docs."""
    hints = typing.get_type_hints(cls)
    docs = field_comments(cls)
    flags = flags or {}
    out = {s.name: dataclasses.replace(s, flag=flags.get(s.name, s.flag)) for s in extra}
    for f in dataclasses.fields(cls):
        if f.name in exclude:
            continue
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else REQUIRED)
        )
        out[f.name] = Setting(f.name, hints[f.name], default, docs.get(f.name, ""), flags.get(f.name, ""))
    return out


def field_comments(cls: type) -> dict[str, str]:
    """Field name -> its comment: the one on its line, else the comment block just above it.
    An indented comment line under a commented field continues that field's comment; a block
    starting with ``--`` is a section heading, not documentation."""
    source = inspect.getsource(cls)
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    body_col = next(t.end[1] for t in tokens if t.type == tokenize.INDENT)
    docs: dict[str, str] = {}
    block: list[str] = []
    last_field = ""
    for i, tok in enumerate(tokens):
        if (
            tok.type == tokenize.NAME
            and tok.start[1] == body_col
            and i + 1 < len(tokens)
            and tokens[i + 1].string == ":"
            and tokens[i - 1].type in (tokenize.INDENT, tokenize.NL, tokenize.NEWLINE, tokenize.DEDENT)
        ):
            last_field = tok.string
            trailing = [t.string for t in tokens[i:] if t.start[0] == tok.start[0] and t.type == tokenize.COMMENT]
            docs[last_field] = _comment_text(trailing[0]) if trailing else " ".join(block)
            block = []
        elif tok.type == tokenize.COMMENT and tok.line.lstrip().startswith("#"):
            text = _comment_text(tok.string)
            if tok.start[1] > body_col and last_field:
                docs[last_field] = f"{docs[last_field]} {text}".strip()
            elif not text.startswith("--"):
                block.append(text)
        elif tok.type == tokenize.NAME and tok.string == "def" and tok.start[1] == body_col:
            break
    return docs


def _comment_text(comment: str) -> str:
    return comment.lstrip("#").strip()


# -- reading values ---------------------------------------------------------------------------------


def coerce(setting: Setting, value: Any, where: str, typed: bool = False) -> Any:
    """``value`` (TOML's type, or text) as the setting's type; SettingsError naming ``where``.
    ``typed`` (a TOML value): a number or boolean must not be a string."""
    try:
        if typed and isinstance(value, str) and setting.type in (int, float, bool):
            raise ValueError(
                f"not {'a boolean' if setting.type is bool else 'an integer' if setting.type is int else 'a number'} (a TOML string)"
            )
        return _coerce(setting.type, value)
    except (ValueError, TypeError, KeyError) as exc:
        raise SettingsError(f"{where}: {setting.name} = {value!r}: {exc}") from None


def _coerce(kind: Any, value: Any) -> Any:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):  # "X | None"
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        return None if value in ("", None) else _coerce(options[0], value)
    if origin is tuple:
        item = typing.get_args(kind)[0]
        items = [p.strip() for p in value.split(",") if p.strip()] if isinstance(value, str) else list(value)
        return tuple(_coerce(item, v) for v in items)
    if kind is bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ValueError("not a boolean (true/false, yes/no, on/off, 1/0)")
    if kind is int:
        if isinstance(value, bool) or isinstance(value, float):
            raise ValueError("not an integer")
        return int(value) if isinstance(value, int) else int(str(value).strip(), 10)
    if kind is float:
        if isinstance(value, bool):
            raise ValueError("not a number")
        return float(value)
    if kind is str:
        if not isinstance(value, str):
            raise ValueError("not a string")
        return value
    if kind is Path:
        if not isinstance(value, (str, Path)):
            raise ValueError("not a path")
        return Path(value)
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        text = str(value).strip()
        for member in kind:
            if text.upper() in (member.name, str(member.value).upper()):
                return member
        raise ValueError(f"not one of {', '.join(m.name for m in kind)}")
    raise TypeError(f"settings of type {kind!r} are not supported")


def read_file(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise SettingsError(f"config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path}: not valid TOML: {exc}") from None


def _unknown(what: str, key: str, known: Mapping[str, Setting]) -> SettingsError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]}?" if close else ""
    return SettingsError(f"{what}: unknown setting {key!r}{hint}")


def resolve(
    service: str,
    settings: Mapping[str, Setting],
    cli: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    config_path: Path | str | None = None,
) -> dict[str, Resolved]:
    """Every setting's value and where it came from. ``config_path`` None: ``PYRMQ_CONFIG`` if set.
    Raises SettingsError for an unknown key, a value of the wrong type or a missing required one."""
    environ = os.environ if environ is None else environ
    cli = cli or {}
    out = {name: Resolved(s.default, "default") for name, s in settings.items()}
    path = config_path or environ.get(CONFIG_ENV) or None
    if path:
        document = read_file(Path(path))
        table = document.get(service, {})
        if not isinstance(table, dict):
            raise SettingsError(f"config file {path}: [{service}] must be a table")
        for key, value in table.items():
            if key not in settings:
                raise _unknown(f"config file {path} [{service}]", key, settings)
            out[key] = Resolved(
                coerce(settings[key], value, f"config file {path} [{service}]", typed=True), f"file {path}"
            )
    prefix = env_name(service, "")
    by_env = {env_name(service, name): name for name in settings}
    for variable, text in environ.items():
        if not variable.startswith(prefix):
            continue
        if variable not in by_env:
            raise _unknown(f"environment {variable}", variable[len(prefix) :].lower(), settings)
        name = by_env[variable]
        out[name] = Resolved(coerce(settings[name], text, f"environment {variable}"), f"env {variable}")
    for key, value in cli.items():
        if key not in settings:
            raise _unknown("--set", key, settings)
        out[key] = Resolved(coerce(settings[key], value, "command line"), "command line")
    missing = [name for name, r in out.items() if r.value is REQUIRED]
    if missing:
        name = missing[0]
        flag = f"{settings[name].flag}, " if settings[name].flag else ""
        raise SettingsError(
            f"{service}.{name} is required: give {flag}--set {name}=..., "
            f"{env_name(service, name)} or [{service}] {name} in the config file"
        )
    return out


def values(resolved: Mapping[str, Resolved]) -> dict[str, Any]:
    return {name: r.value for name, r in resolved.items()}


def parse_assignments(items: list[str] | None) -> dict[str, str]:
    """``["port=1", "flush_mode=SYNC"]`` (``--set``) -> {"port": "1", ...}."""
    out = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SettingsError(f"--set {item!r}: expected KEY=VALUE")
        out[key.strip().replace("-", "_")] = value
    return out


def format_value(value: Any) -> str:
    """A value as the text the environment takes (also the README's Default column)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, tuple):
        return ",".join(format_value(v) for v in value)
    if value is None:
        return ""
    if value is REQUIRED:
        return "(required)"
    return str(value)


# -- the command line ---------------------------------------------------------------------------------


def settings_parser(
    service: str,
    settings: Mapping[str, Setting],
    prog: str,
    description: str,
) -> argparse.ArgumentParser:
    """``--config FILE``, ``--set KEY=VALUE`` and each setting's own flag. A flag left out is not
    in the namespace (SUPPRESS), so the file and the environment are not overridden by a default."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog=f"Every setting is also read from the environment as {env_name(service, 'KEY')} and from "
        f"the [{service}] table of a TOML file (--config or {CONFIG_ENV}); the command line wins, "
        f"then the environment, then the file. `pyrmq config {service}` lists them all.",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help=f"TOML file with a [{service}] table (default: ${CONFIG_ENV} if set)",
    )
    parser.add_argument(
        "--set",
        dest="set_items",
        action="append",
        metavar="KEY=VALUE",
        help="any setting by its name, e.g. --set flush_interval_ms=200 (repeatable)",
    )
    for s in settings.values():
        if not s.flag:
            continue
        kwargs: dict[str, Any] = {
            "dest": s.name,
            "default": argparse.SUPPRESS,
            "help": f"{s.doc} (default {format_value(s.default)}; env {env_name(service, s.name)})".replace("%", "%%"),
        }
        if typing.get_origin(s.type) is tuple:
            kwargs["action"] = "append"
        elif isinstance(s.type, type) and issubclass(s.type, enum.Enum):
            kwargs["choices"] = [m.name for m in s.type]
        parser.add_argument(s.flag, **kwargs)
    return parser


def settings_from_args(
    service: str, settings: Mapping[str, Setting], args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The values of every setting: defaults < file < environment < ``--set`` < own flags."""
    cli: dict[str, Any] = parse_assignments(args.set_items)
    for name in settings:
        if name in vars(args):
            value = getattr(args, name)
            cli[name] = ",".join(value) if isinstance(value, list) else value
    return values(resolve(service, settings, cli, environ, args.config))
