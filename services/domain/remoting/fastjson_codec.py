"""JSON text in the forms fastjson 1.2.x writes and reads, for remoting bodies
(../shared/docs/remoting.md §2.6 route JSON, §2.7 "fastjson quirks").

Writing (:func:`fastjson_dumps`), as ``JSON.toJSONString`` does with RocketMQ's defaults:

* Compact: no whitespace anywhere (the Go client's route parser breaks on it, §2.6).
* Bean fields (a value's ``fastjson_fields()``) and map keys in sorted order; a None value in a
  bean or a map is left out (fastjson omits nulls); None in a list is ``null``.
* ``bool`` as ``true``/``false``; an ``enum.Enum`` as its name; a float as Java's
  ``Double.toString`` prints it (fastjson's RyuDouble: ``1.0``, ``1.0E7``, ``1.0E-4``), NaN and
  infinities as ``null``.
* A map key that is not a string: written bare in the native form (``{0:"addr"}``, and a bean
  key as a raw JSON object, ``{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}``); with
  ``browser_compatible`` (the form namesrv sends clients of version >= 401) it is written as a
  JSON string holding that text (``{"0":"addr"}``), as fastjson does for BrowserCompatible.
* Strings escaped as fastjson escapes them. Native: ``"`` and ``\\``, ``\\b \\t \\n \\f \\r``,
  the other controls, U+007F..U+009F, U+2028 and U+2029 as ``\\uXXXX`` (uppercase hex); other
  text stays UTF-8. BrowserCompatible: also ``/`` as ``\\/`` and every character from U+007F
  up as ``\\uXXXX`` (UTF-16 units); longs beyond +-(2^53-1) become strings.

Reading (:func:`fastjson_loads`): standard JSON, plus what fastjson writes and standard JSON has
not: unquoted numeric or identifier map keys, and JSON objects (or arrays) as map keys, returned
as hashable :class:`ObjectKey` values. A map key that is a string holding a JSON object (the
stringified form fastjson >= 1.2.66 also reads) stays a string; :func:`key_object` reads both.
"""

from __future__ import annotations

import enum
import json
import json.decoder
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

JS_SAFE_INTEGER_MAX = 9007199254740991  # 2^53 - 1: BrowserCompatible quotes longs beyond it
NESTING_MAX = 256


# The C string scanner json.loads uses (untyped in typeshed): (text, index after the opening
# quote, strict) -> (string, index after the closing quote).
_scanstring: Callable[[str, int, bool], tuple[str, int]] = getattr(json.decoder, "scanstring")  # noqa: B009


class BodyError(ValueError):
    """A remoting JSON body that does not parse, or does not have the shape its code needs."""


# -- writing ----------------------------------------------------------------------------------

_NATIVE_SPECIAL = re.compile('[\x00-\x1f"\\\\\x7f-\x9f\u2028\u2029]')
_BROWSER_SPECIAL = re.compile('[\x00-\x1f"/\\\\\x7f-\U0010ffff]')
_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _unit_escape(ch: str) -> str:
    code = ord(ch)
    if code > 0xFFFF:  # a UTF-16 surrogate pair, each unit escaped
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"
    return f"\\u{code:04X}"


def _escape(match: re.Match[str]) -> str:
    ch = match.group()  # "/" only ever matches in BrowserCompatible
    return _SHORT.get(ch) or _unit_escape(ch)


def quote(text: str, browser_compatible: bool = False) -> str:
    """``text`` as a fastjson string literal, quotes included."""
    if browser_compatible:
        if _BROWSER_SPECIAL.search(text) is None:
            return f'"{text}"'
        return '"' + _BROWSER_SPECIAL.sub(_escape, text) + '"'
    if _NATIVE_SPECIAL.search(text) is None:
        return f'"{text}"'
    return '"' + _NATIVE_SPECIAL.sub(_escape, text) + '"'


def java_double(value: float) -> str:
    """Java's ``Double.toString`` (fastjson's RyuDouble): shortest digits, scientific notation
    (``1.0E7``) outside [1E-3, 1E7); NaN and the infinities are ``null`` in fastjson's output."""
    if math.isnan(value) or math.isinf(value):
        return "null"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    full = whole + fraction
    digits = full.lstrip("0")
    point = len(whole) + (int(exp_text) if exp_text else 0) - (len(full) - len(digits))
    digits = digits.rstrip("0") or "0"
    exp10 = point - 1
    if -3 <= exp10 < 7:
        if exp10 < 0:
            return f"{sign}0.{'0' * (-exp10 - 1)}{digits}"
        if len(digits) <= exp10 + 1:
            return f"{sign}{digits}{'0' * (exp10 + 1 - len(digits))}.0"
        return f"{sign}{digits[: exp10 + 1]}.{digits[exp10 + 1 :]}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exp10}"


def _sorted_items(mapping: Mapping[Any, object]) -> list[tuple[Any, object]]:
    items = [(k, v) for k, v in mapping.items() if v is not None]
    try:
        items.sort(key=lambda item: item[0])
    except TypeError:  # keys of mixed kinds: keep their order
        pass
    return items


def _write(obj: object, out: list[str], browser: bool, depth: int) -> None:
    if depth > NESTING_MAX:
        raise ValueError(f"nesting deeper than {NESTING_MAX}")
    if isinstance(obj, str):
        out.append(quote(obj, browser))
    elif obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, enum.Enum):
        out.append(quote(obj.name, browser))
    elif isinstance(obj, int):
        if browser and not -JS_SAFE_INTEGER_MAX <= obj <= JS_SAFE_INTEGER_MAX:
            out.append(f'"{obj}"')
        else:
            out.append(str(obj))
    elif isinstance(obj, float):
        out.append(java_double(obj))
    elif isinstance(obj, Mapping):
        _write_map(obj, out, browser, depth)
    elif hasattr(obj, "fastjson_fields"):
        _write_map(obj.fastjson_fields(), out, browser, depth)
    elif isinstance(obj, (list, tuple)):
        _write_list(obj, out, browser, depth)
    elif isinstance(obj, (set, frozenset)):
        values = list(obj)
        try:
            values.sort()
        except TypeError:
            pass
        _write_list(values, out, browser, depth)
    else:
        raise TypeError(f"cannot write {type(obj).__name__} as fastjson")


def _write_list(values: list[Any] | tuple[Any, ...], out: list[str], browser: bool, depth: int) -> None:
    out.append("[")
    for i, value in enumerate(values):
        if i:
            out.append(",")
        _write(value, out, browser, depth + 1)
    out.append("]")


def _write_map(mapping: Mapping[Any, object], out: list[str], browser: bool, depth: int) -> None:
    out.append("{")
    first = True
    for key, value in _sorted_items(mapping):
        if not first:
            out.append(",")
        first = False
        if isinstance(key, str):
            out.append(quote(key, browser))
        elif browser:  # NON_STRINGKEY_AS_STRING: the key's default JSON text, as a string
            out.append(quote(fastjson_dumps(key), True))
        else:
            _write(key, out, False, depth + 1)
        out.append(":")
        _write(value, out, browser, depth + 1)
    out.append("}")


def fastjson_dumps(obj: object, *, browser_compatible: bool = False) -> str:
    """``obj`` as fastjson writes it (module docstring): compact, sorted, nulls omitted."""
    out: list[str] = []
    _write(obj, out, browser_compatible, 0)
    return "".join(out)


def fastjson_dumpb(obj: object, *, browser_compatible: bool = False) -> bytes:
    """:func:`fastjson_dumps` encoded UTF-8, as a body."""
    return fastjson_dumps(obj, browser_compatible=browser_compatible).encode("utf-8", "surrogatepass")


# -- reading ----------------------------------------------------------------------------------


class ObjectKey(tuple[tuple[str, Any], ...]):
    """A JSON object used as a map key (fastjson's ``Map<MessageQueue, X>``): its fields as
    sorted ``(name, value)`` pairs, nested objects and arrays made hashable."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self)


_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_CONSTANTS: dict[str, object] = {"true": True, "false": False, "null": None}


def _frozen(value: object) -> object:
    if isinstance(value, dict):
        return ObjectKey(sorted(((k, _frozen(v)) for k, v in value.items()), key=lambda item: str(item[0])))
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value


class _Parser:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, pos: int, what: str) -> BodyError:
        return BodyError(f"{what} at character {pos}: {self.text[pos : pos + 40]!r}")

    def skip(self, pos: int) -> int:
        match = _WS.match(self.text, pos)
        assert match is not None  # the pattern matches the empty string
        return match.end()

    def value(self, pos: int, depth: int) -> tuple[object, int]:
        if depth > NESTING_MAX:
            raise self.fail(pos, f"nesting deeper than {NESTING_MAX}")
        text = self.text
        pos = self.skip(pos)
        ch = text[pos : pos + 1]
        if ch == "{":
            return self.object(pos + 1, depth)
        if ch == "[":
            return self.array(pos + 1, depth)
        if ch == '"':
            try:
                return _scanstring(text, pos + 1, False)
            except ValueError as exc:
                raise self.fail(pos, f"bad string ({exc})") from None
        number = _NUMBER.match(text, pos)
        if number:
            literal = number.group()
            parsed: object = float(literal) if number.group(1) or number.group(2) else int(literal)
            return parsed, number.end()
        ident = _IDENT.match(text, pos)
        if ident and ident.group() in _CONSTANTS:
            return _CONSTANTS[ident.group()], ident.end()
        raise self.fail(pos, "expected a JSON value")

    def key(self, pos: int, depth: int) -> tuple[object, int]:
        ident = _IDENT.match(self.text, pos)
        if ident and ident.group() not in _CONSTANTS:  # an unquoted name
            return ident.group(), ident.end()
        key, pos = self.value(pos, depth + 1)
        if isinstance(key, (dict, list)):
            key = _frozen(key)
        return key, pos

    def object(self, pos: int, depth: int) -> tuple[dict[Any, Any], int]:
        text = self.text
        result: dict[Any, Any] = {}
        pos = self.skip(pos)
        if text[pos : pos + 1] == "}":
            return result, pos + 1
        while True:
            key, pos = self.key(self.skip(pos), depth)
            pos = self.skip(pos)
            if text[pos : pos + 1] != ":":
                raise self.fail(pos, "expected ':' after a key")
            value, pos = self.value(pos + 1, depth + 1)
            result[key] = value
            pos = self.skip(pos)
            ch = text[pos : pos + 1]
            if ch == "}":
                return result, pos + 1
            if ch != ",":
                raise self.fail(pos, "expected ',' or '}'")
            pos += 1

    def array(self, pos: int, depth: int) -> tuple[list[Any], int]:
        text = self.text
        result: list[Any] = []
        pos = self.skip(pos)
        if text[pos : pos + 1] == "]":
            return result, pos + 1
        while True:
            value, pos = self.value(pos, depth + 1)
            result.append(value)
            pos = self.skip(pos)
            ch = text[pos : pos + 1]
            if ch == "]":
                return result, pos + 1
            if ch != ",":
                raise self.fail(pos, "expected ',' or ']'")
            pos += 1


def fastjson_loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse a body in any of fastjson's forms (module docstring); BodyError if it does not."""
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BodyError(f"body is not UTF-8: {exc}") from None
    try:
        return json.loads(text)  # the common case, in C
    except RecursionError:
        raise BodyError("body nests too deep") from None
    except ValueError:
        pass
    parser = _Parser(text)
    value, pos = parser.value(0, 0)
    pos = parser.skip(pos)
    if pos != len(text):
        raise parser.fail(pos, "unexpected text after the JSON value")
    return value


def key_object(key: object) -> dict[str, Any] | None:
    """The fields of a map key that holds an object: an :class:`ObjectKey` (the raw-object form)
    or a string holding a JSON object (the stringified form); None for any other key."""
    if isinstance(key, ObjectKey):
        return key.as_dict()
    if isinstance(key, str) and key.startswith("{"):
        try:
            value = fastjson_loads(key)
        except BodyError:
            return None
        return value if isinstance(value, dict) else None
    return None


def expect(value: object, kind: type | tuple[type, ...], what: str) -> Any:
    """``value`` if it is of ``kind`` (a bool is not a number here), else BodyError naming
    ``what``: the typed parsers' one check."""
    if not isinstance(value, kind) or (
        isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,))
    ):
        raise BodyError(f"{what}: expected {getattr(kind, '__name__', kind)}, got {type(value).__name__} {value!r:.60}")
    return value


def as_int(value: object, what: str) -> int:
    """A Java int or long field: a JSON number, or a string of digits (a BrowserCompatible long,
    the C++ client's ``subVersion``); BodyError naming ``what`` otherwise."""
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise BodyError(f"{what}: {value!r:.60} is not an integer") from None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return expect(value, int, what)
