"""services/domain/sql_filter.py: RocketMQ SQL92 filters (grammar, three-valued semantics, limits)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.domain.sql_filter import (
    DEPTH_MAX,
    EXPRESSION_LENGTH_MAX,
    NESTING_MAX,
    SqlFilterError,
    compile_sql,
    parse_double,
    parse_long,
    tokenize,
)

PROPS = {
    "a": "10",
    "b": "-3",
    "f": "1.5",
    "color": "red",
    "TAGS": "TagA",
    "s": "hello world",
    "flag": "TRUE",
    "x": "abc",
    "q": "it's",
    "big": "9223372036854775807",
    "dotted.key": "v",
    "sp": " 7 ",
    "n": "NaN",
}
T, F, U = True, False, None  # U: UNKNOWN (NULL), which does not match

EXAMPLES = [
    # numbers: the property is parsed as the literal's type (long / double)
    ("a = 10", T),
    ("a = 10L", T),
    ("a = '10'", T),
    ("a = 10.0", T),
    ("a > 5", T),
    ("a >= 10", T),
    ("a < 10", F),
    ("a <= 10", T),
    ("a <> 10", F),
    ("5 < a", T),
    ("b < 0", T),
    ("b = -3", T),
    ("b > -4", T),
    ("-3 = b", T),
    ("f = 1.5", T),
    ("f > 1.0", T),
    ("f > 1", U),
    ("f = 1", U),
    ("a > b", T),
    ("a < 1e2", T),
    ("big = 9223372036854775807", T),
    ("big > 9223372036854775806", T),
    ("-9223372036854775808 < b", T),
    ("sp = 7", U),
    ("sp = 7.0", T),
    ("n > 1.0", T),
    ("+a > 5", T),
    ("-a < 0", U),
    ("a > -(-5)", T),
    # strings
    ("color = 'red'", T),
    ("color = 'Red'", F),
    ("color <> 'blue'", T),
    ("'red' = color", T),
    ("q = 'it''s'", T),
    ("TAGS = 'TagA'", T),
    ("TAGS IN ('TagA', 'TagB')", T),
    ("dotted.key = 'v'", T),
    ("color IN ('red', 'blue')", T),
    ("color NOT IN ('red')", F),
    ("color NOT IN ('x', 'y', 'z', 'w', 'v')", T),
    # a string that is not a number is UNKNOWN next to a number
    ("x > 1", U),
    ("x = 1", U),
    ("x <> 1", U),
    ("x > 1 OR color = 'red'", T),
    ("x > 1 AND color = 'red'", U),
    ("x > 1 AND color = 'blue'", F),
    # absent properties
    ("missing = 1", U),
    ("missing = 'x'", U),
    ("'x' = missing", U),
    ("missing <> 1", U),
    ("NOT (missing = 1)", U),
    ("missing > 1", U),
    ("missing IN ('x')", U),
    ("missing NOT IN ('x')", U),
    ("missing BETWEEN 1 AND 2", U),
    ("missing NOT BETWEEN 1 AND 2", U),
    ("missing IS NULL", T),
    ("missing IS NOT NULL", F),
    ("a IS NULL", F),
    ("a IS NOT NULL", T),
    ("missing = other", U),
    # BETWEEN
    ("a BETWEEN 5 AND 10", T),
    ("a BETWEEN 11 AND 20", F),
    ("a NOT BETWEEN 11 AND 20", T),
    ("a NOT BETWEEN 5 AND 10", F),
    ("a BETWEEN -5 AND 10.5", T),
    ("f BETWEEN 1.0 AND 2.0", T),
    # CONTAINS / STARTSWITH / ENDSWITH: FALSE (not UNKNOWN) for an absent property, as RocketMQ
    ("s CONTAINS 'lo w'", T),
    ("s NOT CONTAINS 'lo w'", F),
    ("s STARTSWITH 'hell'", T),
    ("s ENDSWITH 'world'", T),
    ("s NOT STARTSWITH 'hell'", F),
    ("s NOT ENDSWITH 'x'", T),
    ("s CONTAINS ''", F),
    ("s NOT CONTAINS ''", F),
    ("missing CONTAINS 'a'", F),
    ("missing NOT CONTAINS 'a'", F),
    ("NOT (missing CONTAINS 'a')", T),
    # booleans
    ("TRUE", T),
    ("FALSE", F),
    ("NULL", U),
    ("NOT NULL", U),
    ("flag = TRUE", T),
    ("color = FALSE", T),
    ("flag", F),
    ("missing", U),
    ("NOT flag", T),
    ("NOT missing", U),
    ("a = 10 = TRUE", T),
    ("(a = 10) = 1", F),
    # three-valued AND / OR / NOT
    ("TRUE OR missing = 1", T),
    ("missing = 1 OR TRUE", T),
    ("FALSE AND missing = 1", F),
    ("missing = 1 AND FALSE", F),
    ("missing = 1 AND TRUE", U),
    ("missing = 1 OR FALSE", U),
    ("NOT (missing = 1 OR FALSE)", U),
    ("NOT (a = 10 AND color = 'red')", F),
    ("NOT NOT (a = 10)", T),
    ("a = 1 OR a = 2 OR a = 10", T),
    ("a = 10 AND color = 'red' AND TAGS = 'TagA'", T),
    ("a = 1 OR a = 10 AND color = 'blue'", F),
    ("(a = 1 OR a = 10) AND color = 'red'", T),
    # NOT binds to one operand, as in RocketMQ: (NOT a) = 'x'
    ("NOT a = 'x'", F),
    ("NOT a = 'true'", T),
    # keywords ignore case; comments and blanks
    ("color in ('red') and a between 1 and 10", T),
    ("a is not null", T),
    ("A = 10", U),
    ("a = 10 /* comment */ AND -- to the end of the line\n color = 'red'", T),
    ("\ta\n=\r10\f", T),
]


@pytest.mark.parametrize("expression, expected", EXAMPLES, ids=[e for e, _ in EXAMPLES])
def test_examples(expression, expected):
    sql = compile_sql(expression)
    assert sql.evaluate(PROPS) is expected
    assert sql.matches(PROPS) is (expected is True)


ERRORS = [
    ("", "empty expression", 0),
    ("   ", "empty expression", 0),
    ("-- only a comment\n", "empty expression", 0),
    ("a >", "expected a value", 3),
    ("a = NULL", "NULL cannot be compared", 2),
    ("a > 'x'", "compared", 2),
    ("5", "boolean value", 0),
    ("'x'", "boolean value", 0),
    ("-a", "boolean value", 0),
    ("NOT 5", "boolean value", 0),
    ("a BETWEEN 5 AND 1", "low bound", 2),
    ("a BETWEEN 'a' AND 'b'", "compared", 2),
    ("a IN ()", "a string", 6),
    ("a IN (1, 2)", "a string", 6),
    ("'x' IN ('x')", "IN needs a property", 4),
    ("a CONTAINS 5", "a string", 11),
    ("a = 1 b = 2", "expected AND, OR", 6),
    ("a == 1", "expected a value", 3),
    ("a != 1", "unexpected character", 2),
    ("(a = 1", "expected ')'", 6),
    ("a = 1)", "expected AND, OR", 5),
    ("a = 'open", "unexpected character", 4),
    ("a LIKE 'x'", "expected AND, OR", 2),
    ("9223372036854775808 = a", "out of range", 0),
    ("1e999 > a", "out of range", 0),
    ("TRUE = 1", "cannot be compared", 5),
    ("a > TRUE", "compared", 2),
    ("(a = 1) > 2", "compared", 8),
    ("a IS 5", "expected NULL", 5),
    ("a = 1 AND", "expected a value", 9),
    ("@", "unexpected character", 0),
    ("é = 1", "unexpected character", 0),
    ("a = \u0661", "unexpected character", 4),
    ("a = 1 --no line break", "expected AND, OR", 6),
    ("__import__('os').system('true')", "unexpected character", 16),
    ("a = 1; b = 2", "unexpected character", 5),
    ("a = 0x10", "expected AND, OR", 5),
]


@pytest.mark.parametrize("expression, reason, position", ERRORS, ids=[e for e, _, _ in ERRORS])
def test_errors_name_the_position(expression, reason, position):
    with pytest.raises(SqlFilterError) as err:
        compile_sql(expression)
    assert reason in err.value.reason and err.value.position == position
    assert str(err.value).endswith(f"at position {position}")
    assert isinstance(err.value, ValueError)


def test_limits_refuse_hostile_input_without_exhausting_the_stack():
    hostile = [
        "(" * 10_000 + "a" + ")" * 10_000,
        "NOT " * 1_000 + "a",
        "-" * 4_000 + "1 = a",
        "a" + " = 1" * 1_000,
        "a" * (EXPRESSION_LENGTH_MAX + 1),
    ]
    for text in hostile:
        with pytest.raises(SqlFilterError):
            compile_sql(text)
    assert compile_sql("(" * NESTING_MAX + "a = 1" + ")" * NESTING_MAX).matches({"a": "1"})
    with pytest.raises(SqlFilterError, match="nested"):
        compile_sql("(" * (NESTING_MAX + 1) + "a = 1" + ")" * (NESTING_MAX + 1))
    # Long AND / OR chains are flattened: one level however long.
    chain = " OR ".join(f"a = {i}" for i in range(350))
    assert len(chain) <= EXPRESSION_LENGTH_MAX and compile_sql(chain).matches({"a": "349"})
    equalities = "a" + " = TRUE" * (DEPTH_MAX - 1)
    compile_sql(equalities)
    with pytest.raises(SqlFilterError, match="deeper"):
        compile_sql(equalities + " = TRUE")


def test_compiled_filters_are_cached():
    assert compile_sql("a > 1 AND b < 2") is compile_sql("a > 1 AND b < 2")
    assert compile_sql("a > 1 AND b < 2").expression == "a > 1 AND b < 2"


def test_tokens_and_java_number_parsing():
    assert [(t.kind, t.value) for t in tokenize("a.b>=-1.5e3 AND 'x''y' IN 7L")] == [
        ("name", "a.b"),
        (">=", None),
        ("-", None),
        ("number", 1500.0),
        ("AND", None),
        ("string", "x'y"),
        ("IN", None),
        ("number", 7),
        ("end", None),
    ]
    assert parse_long("+42") == 42 and parse_long("-9223372036854775808") == -(1 << 63)
    assert parse_long("9223372036854775808") is None and parse_long(" 1") is None and parse_long("1_0") is None
    assert parse_long("1.0") is None and parse_long("\u0661") is None
    assert parse_double(" 1.5 ") == 1.5 and parse_double("1e3") == 1000.0 and parse_double("2.5f") == 2.5
    assert parse_double(".5") == 0.5 and parse_double("-Infinity") == float("-inf")
    assert parse_double("1_0") is None and parse_double("inf") is None and parse_double("0x10") is None


# -- property-based --------------------------------------------------------------------------------

NAMES = ["a", "b", "color", "TAGS", "missing"]
VALUES = ["1", "-2", "10", "0", "x", "", "3.5", "red", " 7", "NaN", "true", "9223372036854775807"]
PROPERTIES = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), max_size=len(NAMES))
SOUP = [
    "a",
    "b",
    "color",
    "TAGS",
    "x.y",
    "$_",
    "1",
    "-2",
    "3.5",
    "1e5",
    "9223372036854775808",
    "'red'",
    "''",
    "'",
    "TRUE",
    "FALSE",
    "NULL",
    "AND",
    "OR",
    "NOT",
    "BETWEEN",
    "IN",
    "IS",
    "CONTAINS",
    "STARTSWITH",
    "ENDSWITH",
    "(",
    ")",
    ",",
    "=",
    "<>",
    "<",
    "<=",
    ">",
    ">=",
    "+",
    "-",
    "--",
    "/*",
    "*/",
    "\n",
    ".",
    "@",
    "é",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(SOUP), max_size=25), st.sampled_from(["", " "]), PROPERTIES)
def test_token_soup_compiles_or_raises_sql_filter_error(tokens, separator, properties):
    text = separator.join(tokens)
    try:
        sql = compile_sql(text)
    except SqlFilterError as exc:
        assert 0 <= exc.position <= len(text)
        return
    assert sql.evaluate(properties) in (True, False, None)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), PROPERTIES)
def test_any_text_compiles_or_raises_sql_filter_error(text, properties):
    try:
        sql = compile_sql(text)
    except SqlFilterError:
        return
    assert sql.matches(properties) in (True, False)


# Generated valid expressions against a small reference evaluator of the documented semantics.


def _long(value: str | None) -> int | None:
    return int(value) if value is not None and re.fullmatch(r"[+-]?[0-9]+", value) else None


def _comparison(draw_args):
    name, op, number = draw_args
    text = f"{name} {op} {number}"

    def reference(props):
        value = _long(props.get(name))
        if value is None:
            return None
        return {
            "=": value == number,
            "<>": value != number,
            "<": value < number,
            "<=": value <= number,
            ">": value > number,
            ">=": value >= number,
        }[op]

    return text, reference


def _in(draw_args):
    name, values, negated = draw_args
    text = f"{name} {'NOT ' if negated else ''}IN ({', '.join(repr(v) for v in values)})"
    return text, lambda props: None if props.get(name) is None else (props[name] in values) != negated


def _is_null(draw_args):
    name, negated = draw_args
    return f"{name} IS {'NOT ' if negated else ''}NULL", lambda props: (props.get(name) is None) != negated


def _and(a, b):
    return False if a is False or b is False else (None if a is None or b is None else True)


def _or(a, b):
    return True if a is True or b is True else (None if a is None or b is None else False)


LEAVES = st.one_of(
    st.tuples(st.sampled_from(NAMES), st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), st.integers(-3, 12)).map(
        _comparison
    ),
    st.tuples(st.sampled_from(NAMES), st.lists(st.sampled_from(VALUES), min_size=1, max_size=3), st.booleans()).map(
        _in
    ),
    st.tuples(st.sampled_from(NAMES), st.booleans()).map(_is_null),
)


def _extend(children):
    def combine(args):
        op, (left_text, left), (right_text, right) = args
        function = _and if op == "AND" else _or
        return f"({left_text}) {op} ({right_text})", lambda props: function(left(props), right(props))

    negated = children.map(
        lambda c: (f"NOT ({c[0]})", lambda props, f=c[1]: None if f(props) is None else not f(props))
    )
    return st.one_of(st.tuples(st.sampled_from(["AND", "OR"]), children, children).map(combine), negated)


@settings(max_examples=300, deadline=None)
@given(st.recursive(LEAVES, _extend, max_leaves=12), PROPERTIES)
def test_generated_expressions_follow_the_three_valued_reference(expression, properties):
    text, reference = expression
    assert compile_sql(text).evaluate(properties) is reference(properties), text


def test_chained_is_null_tests_each_read_their_own_operand():
    """``a IS NULL IS NOT NULL``: each IS test binds the operand it was parsed with (a closure over
    the parser's loop variable made the outer test call itself: RecursionError on every message)."""
    assert compile_sql("a IS NULL IS NOT NULL").evaluate({}) is True
    assert compile_sql("a IS NOT NULL IS NULL").evaluate({"a": "1"}) is False
