"""SQL92 property filters: RocketMQ's ``filter`` module (SelectorParser.jj, ComparisonExpression,
UnaryExpression, LogicExpression) as a tokenizer, a recursive-descent parser and an evaluator
over a message's properties. Never ``eval``; no I/O.

``compile_sql(expression)`` returns a cached ``SqlFilter`` (``matches(properties) -> bool``) or
raises ``SqlFilterError`` (a ValueError naming the 0-based position).

Grammar, loosest first; keywords are case-insensitive, property names case-sensitive. As in
RocketMQ, NOT applies to one operand: ``NOT a = 'x'`` is ``(NOT a) = 'x'`` (not what you
meant); write ``NOT (a = 'x')`` or ``a <> 'x'``::

    selector   := or_expr END                          -- must be boolean (see "bare property")
    or_expr    := and_expr ( OR and_expr )*
    and_expr   := equality ( AND equality )*
    equality   := comparison ( '=' comparison | '<>' comparison | IS [NOT] NULL )*
    comparison := unary ( ('>' | '>=' | '<' | '<=') unary
                        | [NOT] (CONTAINS | STARTSWITH | ENDSWITH) string
                        | [NOT] BETWEEN unary AND unary
                        | [NOT] IN '(' string (',' string)* ')' )*
    unary      := '+' unary | '-' unary | NOT unary | primary
    primary    := string | integer | decimal | TRUE | FALSE | NULL | identifier | '(' or_expr ')'

Tokens: blanks `` \\t\\n\\r\\f``; comments ``-- ...`` to a line break and ``/* ... */``; strings
in single quotes (``''`` is a quote); integers ``0`` or ``[1-9][0-9]*`` with an optional ``L`` (a
Java long; ``-`` before it makes a negative literal); decimals ``5.5``, ``5.``, ``.5``, ``5E10``,
``5.5e-3`` (a Java double); identifiers ``[A-Za-z_$][A-Za-z0-9_$.]*`` (the dot is a pyrmq
extension: RocketMQ's ID token has none).

Semantics. Property values are strings; an absent property is NULL. Predicates have three
values, TRUE, FALSE and UNKNOWN (NULL); a message matches only when the selector is TRUE.

* AND / OR / NOT: the SQL (JMS) tables: FALSE AND UNKNOWN = FALSE, TRUE OR UNKNOWN = TRUE,
  NOT UNKNOWN = UNKNOWN (so ``NOT (a = 'x')`` does not match a message without ``a``).
* ``=`` / ``<>`` (NOT ``=``): UNKNOWN if a side is NULL. A string next to a number is parsed as
  that number's type (Java Long.valueOf for an integer literal, Double.valueOf for a decimal;
  ``a = 5`` is UNKNOWN for a = '5.0' or 'x'); next to a boolean it is TRUE iff 'true' ignoring
  case. A boolean next to a number is FALSE.
* ``>`` ``>=`` ``<`` ``<=``: UNKNOWN if a side is NULL or a string does not parse as the number
  (``a > 1`` is UNKNOWN for a = '1.5': write ``a > 1.0``); two strings (``a > b``) compare as
  doubles. Literal operands must be numbers.
* ``BETWEEN x AND y`` is ``>= x AND <= y`` (constant bounds need x <= y); ``NOT BETWEEN`` is
  ``< x OR > y``. ``IN`` / ``NOT IN`` need a property on the left; UNKNOWN when it is absent.
* ``IS NULL`` / ``IS NOT NULL``: never UNKNOWN.
* ``CONTAINS`` / ``STARTSWITH`` / ``ENDSWITH`` and their NOT forms: FALSE (not UNKNOWN) when
  the left side is absent or not a string, or the literal is empty, exactly as RocketMQ.
* bare property used as a predicate (``a AND b = 1``): UNKNOWN if absent, else FALSE (a string
  is never a boolean: RocketMQ's boolean cast).

Deliberate differences from RocketMQ, which throws mid-evaluation (and then skips the message)
where this module says UNKNOWN for one comparison: ``a > 5 OR b = 'y'`` matches b = 'y' even
when a = 'x'. Also ``=`` is symmetric in NULL (RocketMQ: ``'x' = a`` is FALSE and ``a = b`` is
TRUE when both are absent); integer literals parse a property as a long (RocketMQ: as an int
when the literal fits one); the decimal literal 0.0 is accepted (RocketMQ refuses it).

Limits, so hostile input cannot exhaust the stack: ``EXPRESSION_LENGTH_MAX`` characters,
``NESTING_MAX`` nested parentheses / unary operators, ``DEPTH_MAX`` levels of expression tree
(AND / OR chains are flattened: ``a=1 OR a=2 OR ...`` is one level).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

EXPRESSION_LENGTH_MAX = 4096
NESTING_MAX = 64
DEPTH_MAX = 64
COMPILED_CACHE_MAX = 256
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1

Value = str | int | float | bool | None
Evaluate = Callable[[Mapping[str, str]], Value]


class SqlFilterError(ValueError):
    """Not a valid SQL92 filter; ``position`` is a 0-based index into the expression."""

    def __init__(self, reason: str, position: int) -> None:
        super().__init__(f"{reason} at position {position}")
        self.reason = reason
        self.position = position


# -- tokens ----------------------------------------------------------------------------------------

KEYWORDS = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS", "CONTAINS", "STARTSWITH", "ENDSWITH"}
)
_TOKEN = re.compile(
    r"""
    (?P<blank>[ \t\n\r\f]+ | --[^\n\r]*(?:\r\n|\n|\r) | /\*.*?\*/)
  | (?P<decimal>(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
  | (?P<integer>(?:0|[1-9][0-9]*)[lL]?)
  | (?P<string>'(?:''|[^'])*')
  | (?P<name>[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<op><>|<=|>=|[=<>(),+-])
""",
    re.VERBOSE | re.DOTALL,
)


class Token(NamedTuple):
    kind: str  # "number", "string", "name", a keyword ("AND"), an operator ("<="), "end"
    value: Value
    position: int


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    position = 0
    while position < len(text):
        found = _TOKEN.match(text, position)
        if found is None:
            raise SqlFilterError(f"unexpected character {text[position]!r}", position)
        kind, image = found.lastgroup, found.group()
        if kind == "decimal":
            if math.isinf(number := float(image)):
                raise SqlFilterError(f"decimal literal {image} is out of range", position)
            tokens.append(Token("number", number, position))
        elif kind == "integer":
            tokens.append(Token("number", int(image.rstrip("lL")), position))
        elif kind == "string":
            tokens.append(Token("string", image[1:-1].replace("''", "'"), position))
        elif kind == "name":
            keyword = image.upper()
            tokens.append(Token(keyword, None, position) if keyword in KEYWORDS else Token("name", image, position))
        elif kind == "op":
            tokens.append(Token(image, None, position))
        position = found.end()
    tokens.append(Token("end", None, len(text)))
    return tokens


# -- values ----------------------------------------------------------------------------------------

_JAVA_LONG = re.compile(r"[+-]?[0-9]+")
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_JAVA_TRIMMED = "".join(map(chr, range(33)))  # String.trim() drops every char <= ' '


def parse_long(text: str) -> int | None:
    """Java Long.valueOf, or None."""
    number = int(text) if _JAVA_LONG.fullmatch(text) else None
    return number if number is not None and LONG_MIN <= number <= LONG_MAX else None


def parse_double(text: str) -> float | None:
    """Java Double.valueOf (hex floats aside), or None."""
    text = text.strip(_JAVA_TRIMMED)
    return float(text.rstrip("fFdD")) if _JAVA_DOUBLE.fullmatch(text) else None


def _is_number(value: Value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _coerce(text: str, other: Value) -> Value:
    """``text`` read as the type of ``other`` (a string next to a boolean or a number)."""
    if isinstance(other, bool):
        return text.lower() == "true"
    if isinstance(other, float):
        return parse_double(text)
    return parse_long(text) if isinstance(other, int) else text


def _compare_numbers(left: int | float, right: int | float) -> int:
    """Java's compareTo; a long next to a double is widened (NaN is above everything)."""
    if isinstance(left, float) or isinstance(right, float):
        left, right = float(left), float(right)
        if math.isnan(left) or math.isnan(right):
            return math.isnan(left) - math.isnan(right)
    return (left > right) - (left < right)


def equal(left: Value, right: Value) -> bool | None:
    if isinstance(left, str) and not isinstance(right, str):
        left = _coerce(left, right)
    elif isinstance(right, str) and not isinstance(left, str):
        right = _coerce(right, left)
    if left is None or right is None:
        return None  # absent, or not a number
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    return _compare_numbers(left, right) == 0 if _is_number(left) else left == right  # type: ignore[arg-type]


def order(left: Value, right: Value) -> int | None:
    """<0, 0 or >0 as left is below, equal to or above right; None for UNKNOWN."""
    if isinstance(left, str) and isinstance(right, str):
        left, right = parse_double(left), parse_double(right)
    elif isinstance(left, str):
        left = _coerce(left, right)
    elif isinstance(right, str):
        right = _coerce(right, left)
    if not (_is_number(left) and _is_number(right)):
        return None
    return _compare_numbers(left, right)  # type: ignore[arg-type]


# -- expression tree -------------------------------------------------------------------------------

CONSTANT, PROPERTY, BOOLEAN, OTHER = "constant", "property", "boolean", "other"


@dataclass(frozen=True, slots=True)
class Node:
    kind: str  # CONSTANT (a literal), PROPERTY, BOOLEAN (a predicate) or OTHER (-a)
    evaluate: Evaluate
    depth: int = 1
    value: Value = None  # CONSTANT only
    logic: str = ""  # "AND" / "OR": a flattened chain of ``operands``
    operands: tuple[Evaluate, ...] = ()


def _chain(operands: tuple[Evaluate, ...], decisive: bool) -> Evaluate:
    """AND (decisive False) or OR (decisive True) over any number of operands."""

    def evaluate(properties: Mapping[str, str]) -> bool | None:
        unknown = False
        for operand in operands:
            result = operand(properties)
            if result is decisive:
                return decisive
            unknown = unknown or result is None
        return None if unknown else not decisive

    return evaluate


_ORDERINGS: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}
_TEXT_TESTS: dict[str, Callable[[str, str], bool]] = {
    "CONTAINS": lambda value, search: search in value,
    "STARTSWITH": str.startswith,
    "ENDSWITH": str.endswith,
}


def _node(evaluate: Evaluate, position: int, *children: Node, kind: str = BOOLEAN) -> Node:
    depth = 1 + max((c.depth for c in children), default=0)
    if depth > DEPTH_MAX:
        raise SqlFilterError(f"expression nested deeper than {DEPTH_MAX} levels", position)
    return Node(kind, evaluate, depth)


def _logic(op: str, left: Node, right: Node, position: int) -> Node:
    """``left op right``; a side that is already an ``op`` chain is merged into this one."""
    operands: tuple[Evaluate, ...] = ()
    depth = 0
    for side in (left, right):
        flat = side.logic == op
        operands += side.operands if flat else (side.evaluate,)
        depth = max(depth, side.depth if flat else side.depth + 1)
    if depth > DEPTH_MAX:
        raise SqlFilterError(f"expression nested deeper than {DEPTH_MAX} levels", position)
    return Node(BOOLEAN, _chain(operands, op == "OR"), depth, logic=op, operands=operands)


def _boolean(node: Node, position: int) -> Node:
    """RocketMQ's asBooleanExpression: a predicate, TRUE / FALSE / NULL, or a cast property."""
    if node.kind == BOOLEAN or (node.kind == CONSTANT and (node.value is None or isinstance(node.value, bool))):
        return node
    if node.kind == PROPERTY:
        read = node.evaluate
        return _node(lambda properties: None if read(properties) is None else False, position, node)
    raise SqlFilterError("expression does not result in a boolean value", position)


def _not(node: Node, position: int) -> Node:
    read = node.evaluate
    return _node(lambda properties: None if (v := read(properties)) is None else not v, position, node)


def _check_ordered(node: Node, position: int) -> None:
    """RocketMQ's checkLessThanOperand: literals must be numbers, predicates are refused."""
    if node.kind == BOOLEAN or (node.kind == CONSTANT and not _is_number(node.value)):
        raise SqlFilterError("only numbers and properties can be compared with < <= > >= BETWEEN", position)


def _ordering(op: str, left: Node, right: Node, position: int) -> Node:
    _check_ordered(left, position)
    _check_ordered(right, position)
    test, read_left, read_right = _ORDERINGS[op], left.evaluate, right.evaluate

    def evaluate(properties: Mapping[str, str]) -> bool | None:
        compared = order(read_left(properties), read_right(properties))
        return None if compared is None else test(compared)

    return _node(evaluate, position, left, right)


def _equality(left: Node, right: Node, position: int) -> Node:
    if any(n.kind == CONSTANT and n.value is None for n in (left, right)):
        raise SqlFilterError("NULL cannot be compared with '=' or '<>' (use IS [NOT] NULL)", position)
    if left.kind == CONSTANT == right.kind and isinstance(left.value, bool) and not isinstance(right.value, bool):
        raise SqlFilterError(f"{left.value!r} cannot be compared with {right.value!r}", position)
    read_left, read_right = left.evaluate, right.evaluate
    return _node(lambda properties: equal(read_left(properties), read_right(properties)), position, left, right)


def _text_test(op: str, negated: bool, left: Node, search: str, position: int) -> Node:
    test, read = _TEXT_TESTS[op], left.evaluate

    def evaluate(properties: Mapping[str, str]) -> bool:
        value = read(properties)
        return bool(search) and isinstance(value, str) and test(value, search) != negated

    return _node(evaluate, position, left)


def _in(negated: bool, left: Node, values: frozenset[str], position: int) -> Node:
    if left.kind != PROPERTY:
        raise SqlFilterError("IN needs a property on its left", position)
    read = left.evaluate
    return _node(
        lambda properties: None if (v := read(properties)) is None else (v in values) != negated, position, left
    )


def _minus(node: Node, position: int) -> Node:
    if node.kind == CONSTANT and _is_number(node.value):
        value = -node.value  # type: ignore[operator]
        if isinstance(value, int) and not LONG_MIN <= value <= LONG_MAX:
            raise SqlFilterError(f"integer literal {value} is out of range", position)
        return Node(CONSTANT, lambda _properties: value, value=value)
    read = node.evaluate  # never a number here: a property, a predicate or a string
    return _node(
        lambda properties: -v if _is_number(v := read(properties)) else None,  # type: ignore[operator]
        position,
        node,
        kind=OTHER,
    )


# -- parser ----------------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self._tokens = tokenize(text)
        self._index = 0
        self._nesting = 0

    @property
    def _token(self) -> Token:
        return self._tokens[self._index]

    def _take(self, *kinds: str) -> Token | None:
        token = self._token
        if token.kind not in kinds:
            return None
        self._index += 1
        return token

    def _expect(self, kind: str, wanted: str) -> Token:
        token = self._take(kind)
        if token is None:
            raise self._unexpected(wanted)
        return token

    def _unexpected(self, wanted: str) -> SqlFilterError:
        token = self._token
        seen = (
            "the end"
            if token.kind == "end"
            else repr(token.value if token.kind in ("name", "string", "number") else token.kind)
        )
        return SqlFilterError(f"expected {wanted}, found {seen}", token.position)

    def selector(self) -> Node:
        if self._token.kind == "end":
            raise SqlFilterError("empty expression", 0)
        node = _boolean(self._or_expr(), 0)
        if self._token.kind != "end":
            raise self._unexpected("AND, OR or the end")
        return node

    def _or_expr(self) -> Node:
        start = self._token.position
        left = self._and_expr()
        while (token := self._take("OR")) is not None:
            right = _boolean(self._and_expr(), token.position)
            left = _logic("OR", _boolean(left, start), right, token.position)
        return left

    def _and_expr(self) -> Node:
        start = self._token.position
        left = self._equality_expr()
        while (token := self._take("AND")) is not None:
            right = _boolean(self._equality_expr(), token.position)
            left = _logic("AND", _boolean(left, start), right, token.position)
        return left

    def _equality_expr(self) -> Node:
        left = self._comparison()
        while True:
            if (token := self._take("=", "<>")) is not None:
                left = _equality(left, self._comparison(), token.position)
                left = left if token.kind == "=" else _not(left, token.position)
            elif (token := self._take("IS")) is not None:
                negated = self._take("NOT") is not None
                self._expect("NULL", "NULL")
                left = _node(_is_null_test(left.evaluate, negated), token.position, left)
            else:
                return left

    def _comparison(self) -> Node:
        left = self._unary()
        while True:
            position = self._token.position
            if (token := self._take(">", ">=", "<", "<=")) is not None:
                left = _ordering(token.kind, left, self._unary(), position)
                continue
            # NOT here only with one of these after it (RocketMQ's LOOKAHEAD(2))
            negated = self._token.kind == "NOT" and self._tokens[self._index + 1].kind in (
                "CONTAINS",
                "STARTSWITH",
                "ENDSWITH",
                "BETWEEN",
                "IN",
            )
            self._index += negated
            if (token := self._take("CONTAINS", "STARTSWITH", "ENDSWITH")) is not None:
                left = _text_test(token.kind, negated, left, str(self._expect("string", "a string").value), position)
            elif self._take("BETWEEN") is not None:
                left = self._between(negated, left, position)
            elif self._take("IN") is not None:
                self._expect("(", "'('")
                values = {str(self._expect("string", "a string").value)}
                while self._take(",") is not None:
                    values.add(str(self._expect("string", "a string").value))
                self._expect(")", "',' or ')'")
                left = _in(negated, left, frozenset(values), position)
            else:
                return left

    def _between(self, negated: bool, value: Node, position: int) -> Node:
        low = self._unary()
        self._expect("AND", "AND")
        high = self._unary()
        for node in (value, low, high):
            _check_ordered(node, position)
        if low.kind == CONSTANT == high.kind and _compare_numbers(low.value, high.value) > 0:  # type: ignore[arg-type]
            raise SqlFilterError(f"BETWEEN {low.value} AND {high.value}: the low bound is above the high one", position)
        if negated:
            return _logic("OR", _ordering("<", value, low, position), _ordering(">", value, high, position), position)
        return _logic("AND", _ordering(">=", value, low, position), _ordering("<=", value, high, position), position)

    def _unary(self) -> Node:
        token = self._token
        if token.kind not in ("+", "-", "NOT", "("):
            return self._primary()
        self._nesting += 1
        if self._nesting > NESTING_MAX:
            raise SqlFilterError(f"more than {NESTING_MAX} nested parentheses or unary operators", token.position)
        self._index += 1
        if token.kind == "(":
            node = self._or_expr()
            self._expect(")", "')'")
        else:
            node = self._unary()
            if token.kind == "NOT":
                node = _not(_boolean(node, token.position), token.position)
            elif token.kind == "-":
                node = _minus(node, token.position)
        self._nesting -= 1
        return node

    def _primary(self) -> Node:
        token = self._token
        self._index += 1
        if token.kind == "number":
            # 9223372036854775808 only as the magnitude of -9223372036854775808, Long.MIN_VALUE
            after_minus = self._index >= 2 and self._tokens[self._index - 2].kind == "-"
            if (
                isinstance(token.value, int)
                and token.value > LONG_MAX
                and not (token.value == -LONG_MIN and after_minus)
            ):
                raise SqlFilterError(f"integer literal {token.value} is out of range", token.position)
            return Node(CONSTANT, lambda _properties: token.value, value=token.value)
        if token.kind in ("string", "TRUE", "FALSE", "NULL"):
            value = {"TRUE": True, "FALSE": False, "NULL": None}.get(token.kind, token.value)
            return Node(CONSTANT, lambda _properties: value, value=value)
        if token.kind == "name":
            name = str(token.value)
            return Node(PROPERTY, lambda properties: properties.get(name))
        self._index -= 1
        raise self._unexpected("a value, a property or '('")


@dataclass(frozen=True, slots=True)
class SqlFilter:
    """A compiled expression: ``matches`` is TRUE-only; ``evaluate`` gives the three values."""

    expression: str
    _evaluate: Evaluate

    def evaluate(self, properties: Mapping[str, str]) -> bool | None:
        result = self._evaluate(properties)
        return result if isinstance(result, bool) else None

    def matches(self, properties: Mapping[str, str]) -> bool:
        return self._evaluate(properties) is True


def _is_null_test(read: Callable[[Mapping[str, str]], object], negated: bool) -> Callable[[Mapping[str, str]], bool]:
    """``x IS [NOT] NULL`` over the operand's reader, bound per test (``a IS NULL IS NOT NULL``
    chains two of them; a closure over the parser's loop variable made the outer test call itself)."""
    if negated:
        return lambda properties: read(properties) is not None
    return lambda properties: read(properties) is None


@functools.lru_cache(maxsize=COMPILED_CACHE_MAX)
def compile_sql(expression: str) -> SqlFilter:
    """Parse ``expression``; raises SqlFilterError. Cached (errors are not)."""
    if not isinstance(expression, str):
        raise TypeError(f"expression must be a str, not {type(expression).__name__}")
    if len(expression) > EXPRESSION_LENGTH_MAX:
        raise SqlFilterError(f"expression longer than {EXPRESSION_LENGTH_MAX} characters", EXPRESSION_LENGTH_MAX)
    return SqlFilter(expression, _Parser(expression).selector().evaluate)
