"""fastjson 1.2.x flavoured JSON: the dialect of RocketMQ's ``store/config/*.json`` files.

RocketMQ (develop and 4.9.x) writes these files with ``JSON.toJSONString(obj, true)`` of
fastjson 1.2.83. ``dumps`` reproduces that output for the value kinds the files use; the
Python type of a value picks the Java serializer it stands for:

| Python value              | Java serializer (1.2.83)       | pretty output                               |
|---|---|---|
| ``Bean`` (a dict)          | ``JavaBeanSerializer``         | keys sorted; ``None`` skipped; NL+indent after ``{`` and after each ``,``; NL before ``}`` |
| ``dict``                   | ``MapSerializer``              | iteration order; NL+indent before each *string* key only; ``int`` keys unquoted; NL before ``}`` iff the map is non-empty; ``None`` values skipped |
| ``list``                   | ``ListSerializer`` (ArrayList) | NL+indent before each item; NL before ``]``; ``[]`` when empty |
| ``tuple``                  | ``CollectionCodec`` (Set) and primitive arrays | always compact ``[a,b]``, no indent step |
| ``str``/``int``/``bool``/``None`` | String/Long/Boolean/null | fastjson's escaping (below) |

NL+indent is ``"\\n"`` followed by one tab per nesting level; there is no space after ``:``.
So ``{0:6,1:3}`` inside a map at depth 2 ends ``{0:6,1:3\\n\\t\\t}`` (the quirk seen in real
4.8 ``consumerOffset.json`` files). Strings escape ``"`` and ``\\``, ``\\b \\t \\n \\f \\r``
as letters, other C0 controls and U+007F..U+009F as ``\\u00XX`` (upper-case hex), U+2028/9 as
``\\u2028``/``\\u2029``; ``/`` and non-ASCII are written raw (UTF-8).

Guesses and limits (fastjson facts the writer cannot see from a Python value):
* A ``Bean`` stands for a class whose getters are exactly its keys: an empty ``Bean`` is
  written ``{}``; Java writes ``{}`` only for a class with no getters at all.
* Floats are refused (no metadata field is a float; Java's ``Double.toString`` differs).
* ``$ref`` back-references are never written and are not resolved by ``loads``.

``loads`` accepts plain JSON plus what fastjson's default parser features allow and its
writer produces: unquoted integer keys (returned as ``int``), unquoted identifier keys,
tabs/newlines/``\\f``/``\\b`` as whitespace, raw control characters inside strings and a
leading BOM. It never evaluates its input.
"""

from __future__ import annotations

import re
from json import JSONDecodeError
from json.decoder import scanstring  # type: ignore[attr-defined]  # there at runtime; typeshed omits it
from typing import Any

from services.store.errors import FastjsonDecodeError

NESTING_DEPTH_MAX = 64  # metadata files nest at most 6 levels deep


class Bean(dict):  # type: ignore[type-arg]
    """A Java bean: written with keys in alphabetical order and ``None`` values omitted."""

    __slots__ = ()


# -- writer -------------------------------------------------------------------------------

_ESCAPE = re.compile('[\x00-\x1f"\\\\\x7f-\x9f\u2028\u2029]')
_ESCAPE_SHORT = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    return _ESCAPE_SHORT.get(char) or f"\\u{ord(char):04X}"


def quote(text: str) -> str:
    """``text`` as fastjson writes a string: double quotes, fastjson's escapes."""
    return '"' + _ESCAPE.sub(_escape_char, text) + '"'


def dumps(value: Any, *, pretty: bool = True) -> str:
    """fastjson 1.2.83 ``JSON.toJSONString(value, pretty)`` of ``value`` (types in the table)."""
    out: list[str] = []

    def newline(depth: int) -> None:
        if pretty:
            out.append("\n" + "\t" * depth)

    def write(item: Any, depth: int) -> None:
        if depth > NESTING_DEPTH_MAX:
            raise ValueError("value nests too deeply")
        if item is None:
            out.append("null")
        elif item is True:
            out.append("true")
        elif item is False:
            out.append("false")
        elif isinstance(item, int):
            out.append(str(item))
        elif isinstance(item, str):
            out.append(quote(item))
        elif isinstance(item, Bean):
            write_bean(item, depth)
        elif isinstance(item, dict):
            write_map(item, depth)
        elif isinstance(item, list):
            write_list(item, depth)
        elif isinstance(item, tuple):
            out.append("[")
            for index, element in enumerate(item):
                if index:
                    out.append(",")
                write(element, depth)
            out.append("]")
        else:
            raise TypeError(f"cannot write {type(item).__name__} as fastjson")

    def write_bean(bean: Bean, depth: int) -> None:
        if not bean:
            out.append("{}")
            return
        out.append("{")
        newline(depth + 1)
        first = True
        for key in sorted(bean):
            field_value = bean[key]
            if field_value is None:
                continue
            if not first:
                out.append(",")
                newline(depth + 1)
            out.append(quote(key) + ":")
            write(field_value, depth + 1)
            first = False
        newline(depth)
        out.append("}")

    def write_map(mapping: dict[Any, Any], depth: int) -> None:
        out.append("{")
        first = True
        for key, entry_value in mapping.items():
            if entry_value is None:
                continue
            if not first:
                out.append(",")
            if isinstance(key, str):
                newline(depth + 1)
                out.append(quote(key) + ":")
            elif isinstance(key, int) and not isinstance(key, bool):
                out.append(f"{key}:")
            else:
                raise TypeError(f"cannot write a {type(key).__name__} map key")
            write(entry_value, depth + 1)
            first = False
        if mapping:
            newline(depth)
        out.append("}")

    def write_list(items: list[Any], depth: int) -> None:
        if not items:
            out.append("[]")
            return
        out.append("[")
        for index, element in enumerate(items):
            if index:
                out.append(",")
            newline(depth + 1)
            write(element, depth + 1)
        newline(depth)
        out.append("]")

    write(value, 0)
    return "".join(out)


# -- reader -------------------------------------------------------------------------------

_WHITESPACE = re.compile(r"[ \t\n\r\f\b]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_BARE_KEY = re.compile(r"(-?[0-9]+)|([A-Za-z_$][A-Za-z0-9_$]*)")
_LITERALS = (("true", True), ("false", False), ("null", None))


def loads(text: str) -> Any:
    """Parse fastjson output (or plain JSON). Raises ``FastjsonDecodeError``."""
    parser = _Parser(text)
    pos = parser.skip(1 if text.startswith("\ufeff") else 0)
    value, pos = parser.value(pos, 0)
    pos = parser.skip(pos)
    if pos != len(text):
        raise FastjsonDecodeError("extra data after the value", pos)
    return value


class _Parser:
    """Recursive descent over ``text``; every method takes and returns a position."""

    def __init__(self, text: str) -> None:
        self.text = text

    def skip(self, pos: int) -> int:
        match = _WHITESPACE.match(self.text, pos)
        assert match is not None  # the pattern matches the empty string
        return match.end()

    def expect(self, pos: int, char: str) -> int:
        pos = self.skip(pos)
        if not self.text.startswith(char, pos):
            raise FastjsonDecodeError(f"expected {char!r}", pos)
        return pos + 1

    def value(self, pos: int, depth: int) -> tuple[Any, int]:
        if depth > NESTING_DEPTH_MAX:
            raise FastjsonDecodeError("nesting too deep", pos)
        pos = self.skip(pos)
        char = self.text[pos : pos + 1]
        if char == "{":
            return self.object(pos + 1, depth + 1)
        if char == "[":
            return self.array(pos + 1, depth + 1)
        if char == '"':
            return self.string(pos)
        for word, literal in _LITERALS:
            if self.text.startswith(word, pos):
                return literal, pos + len(word)
        match = _NUMBER.match(self.text, pos)
        if match is None:
            raise FastjsonDecodeError("expected a value", pos)
        if match.group(1) or match.group(2):
            return float(match.group()), match.end()
        return int(match.group()), match.end()

    def string(self, pos: int) -> tuple[str, int]:
        try:
            text, end = scanstring(self.text, pos + 1, False)
        except JSONDecodeError as exc:
            raise FastjsonDecodeError(exc.msg, exc.pos) from None
        return text, end

    def key(self, pos: int) -> tuple[str | int, int]:
        if self.text.startswith('"', pos):
            return self.string(pos)
        match = _BARE_KEY.match(self.text, pos)
        if match is None:
            raise FastjsonDecodeError("expected a key", pos)
        if match.group(1) is not None:
            return int(match.group(1)), match.end()
        return match.group(2), match.end()

    def object(self, pos: int, depth: int) -> tuple[dict[Any, Any], int]:
        result: dict[Any, Any] = {}
        pos = self.skip(pos)
        if self.text.startswith("}", pos):
            return result, pos + 1
        while True:
            key, pos = self.key(self.skip(pos))
            pos = self.expect(pos, ":")
            result[key], pos = self.value(pos, depth)
            pos = self.skip(pos)
            if self.text.startswith(",", pos):
                pos += 1
            elif self.text.startswith("}", pos):
                return result, pos + 1
            else:
                raise FastjsonDecodeError("expected ',' or '}'", pos)

    def array(self, pos: int, depth: int) -> tuple[list[Any], int]:
        result: list[Any] = []
        pos = self.skip(pos)
        if self.text.startswith("]", pos):
            return result, pos + 1
        while True:
            item, pos = self.value(pos, depth)
            result.append(item)
            pos = self.skip(pos)
            if self.text.startswith(",", pos):
                pos += 1
            elif self.text.startswith("]", pos):
                return result, pos + 1
            else:
                raise FastjsonDecodeError("expected ',' or ']'", pos)
