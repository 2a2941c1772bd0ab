"""fastjson's JSON forms (../shared/docs/remoting.md §2.6, §2.7): compact, sorted, nulls left
out, Java doubles, fastjson's escaping in its native and BrowserCompatible modes, non-string map
keys bare or raw objects (native) or stringified (BrowserCompatible); and reading all of them."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import pytest

from services.domain.remoting.fastjson_codec import (
    BodyError,
    ObjectKey,
    as_int,
    fastjson_dumpb,
    fastjson_dumps,
    fastjson_loads,
    java_double,
    key_object,
    quote,
)


@dataclass(frozen=True, order=True)
class Queue:
    topic: str
    queue_id: int

    def fastjson_fields(self) -> dict[str, object]:
        return {"topic": self.topic, "queueId": self.queue_id, "absent": None}


class Model(enum.Enum):
    CLUSTERING = 1


def test_compact_sorted_and_nulls_left_out():
    assert fastjson_dumps({"b": 1, "a": [1, None, "x"], "c": None, "d": True, "e": False}) == (
        '{"a":[1,null,"x"],"b":1,"d":true,"e":false}'
    )


def test_beans_enums_and_sets():
    assert fastjson_dumps(Queue("T", 3)) == '{"queueId":3,"topic":"T"}'
    assert fastjson_dumps([Model.CLUSTERING]) == '["CLUSTERING"]'
    assert fastjson_dumps({"s": {3, 1, 2}, "f": frozenset({"b", "a"})}) == '{"f":["a","b"],"s":[1,2,3]}'


@pytest.mark.parametrize(
    "value,text",
    [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (0.5, "0.5"),
        (123.456, "123.456"),
        (0.001, "0.001"),
        (1e-4, "1.0E-4"),
        (1.2345e-5, "1.2345E-5"),
        (9999999.0, "9999999.0"),
        (1e7, "1.0E7"),
        (12345678.9, "1.23456789E7"),
        (-2.5e10, "-2.5E10"),
        (1e21, "1.0E21"),
        (float("nan"), "null"),
        (float("inf"), "null"),
        (-math.inf, "null"),
    ],
)
def test_doubles_as_java_prints_them(value, text):
    assert java_double(value) == text
    assert fastjson_dumps([value]) == f"[{text}]"


def test_native_escaping():
    # '"' and '\' and \b \t \n \f \r short; other controls, U+007F..U+009F, U+2028/9 as \uXXXX;
    # '/' and the rest of Unicode as they are.
    assert quote('a"b\\c/\b\t\n\f\r') == '"a\\"b\\\\c/\\b\\t\\n\\f\\r"'
    assert quote("\x00\x01\x0b\x1f") == '"\\u0000\\u0001\\u000B\\u001F"'
    assert quote("\x7f\x9f\xa0é\u2028\u2029€😀") == '"\\u007F\\u009F\xa0é\\u2028\\u2029€😀"'


def test_browser_compatible_escaping():
    # also '/' as '\/', every char from U+007F as \uXXXX (UTF-16 units, upper-case hex).
    assert quote('a"b\\c/\b\t\n\f\r', True) == '"a\\"b\\\\c\\/\\b\\t\\n\\f\\r"'
    assert quote("\x00\x1f", True) == '"\\u0000\\u001F"'
    assert quote("\x7fé€😀", True) == '"\\u007F\\u00E9\\u20AC\\uD83D\\uDE00"'
    assert quote("plain-ascii_1.2:3", True) == '"plain-ascii_1.2:3"'


def test_browser_compatible_quotes_longs_beyond_2_pow_53():
    values = [2**53 - 1, 2**53, -(2**53), 7]
    assert fastjson_dumps(values) == "[9007199254740991,9007199254740992,-9007199254740992,7]"
    assert (
        fastjson_dumps(values, browser_compatible=True) == '[9007199254740991,"9007199254740992","-9007199254740992",7]'
    )


def test_non_string_keys():
    data = {1: "b", 0: "a"}
    assert fastjson_dumps(data) == '{0:"a",1:"b"}'
    assert fastjson_dumps(data, browser_compatible=True) == '{"0":"a","1":"b"}'
    table = {Queue("T", 1): 5, Queue("T", 0): 4}
    assert fastjson_dumps(table) == '{{"queueId":0,"topic":"T"}:4,{"queueId":1,"topic":"T"}:5}'
    assert fastjson_dumps(table, browser_compatible=True) == (
        '{"{\\"queueId\\":0,\\"topic\\":\\"T\\"}":4,"{\\"queueId\\":1,\\"topic\\":\\"T\\"}":5}'
    )


def test_utf8_body():
    assert fastjson_dumpb({"k": "é"}) == '{"k":"é"}'.encode()
    assert fastjson_dumpb({"k": "é"}, browser_compatible=True) == b'{"k":"\\u00E9"}'


def test_unwritable_values_raise_type_error():
    with pytest.raises(TypeError):
        fastjson_dumps({"k": object()})


def test_loads_standard_json():
    assert fastjson_loads(b'{"a":[1,2.5,"x",true,null]}\n') == {"a": [1, 2.5, "x", True, None]}


def test_loads_bare_numeric_and_identifier_keys():
    assert fastjson_loads('{0:"a", 1 : "b"}') == {0: "a", 1: "b"}
    assert fastjson_loads("{brokerName:'x'}".replace("'", '"')) == {"brokerName": "x"}
    assert fastjson_loads('{"a":{0:"x"},"b":[{1:"y"}]}') == {"a": {0: "x"}, "b": [{1: "y"}]}


def test_loads_raw_object_keys():
    parsed = fastjson_loads('{"t":{{"queueId":0,"topic":"T"}:4, {"topic":"T","queueId":1} : 5}}')
    keys = list(parsed["t"])
    assert all(isinstance(key, ObjectKey) for key in keys)
    assert [key_object(key) for key in keys] == [{"queueId": 0, "topic": "T"}, {"queueId": 1, "topic": "T"}]
    assert parsed["t"][keys[1]] == 5


def test_key_object_reads_the_stringified_form():
    parsed = fastjson_loads('{"{\\"queueId\\":0,\\"topic\\":\\"T\\"}":4}')
    (key,) = parsed
    assert key_object(key) == {"queueId": 0, "topic": "T"}
    assert key_object("plain") is None and key_object("{broken") is None and key_object(3) is None


def test_loads_round_trips_what_dumps_writes():
    data = {"a": {0: "x", 10: "y"}, "b": [1.5, None, "é\u2028/"], "c": {Queue("T", 2): {"n": 1}}}
    native = fastjson_loads(fastjson_dumps(data))
    assert native["a"] == {0: "x", 10: "y"} and native["b"] == [1.5, None, "é\u2028/"]
    assert [key_object(k) for k in native["c"]] == [{"queueId": 2, "topic": "T"}]
    browser = fastjson_loads(fastjson_dumps(data, browser_compatible=True))
    assert browser["a"] == {"0": "x", "10": "y"} and browser["b"] == native["b"]
    assert [key_object(k) for k in browser["c"]] == [{"queueId": 2, "topic": "T"}]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "{0:}",
        '{0:"a"',
        '{0:"a"} trailing',
        '{{"a":1}}',
        "[1,]",
        '{"a" 1}',
        "nul",
        b"\xff\xfe",
        "[" * 100_000 + "]" * 100_000,
        "{0:" + "[" * 300 + "]" * 300 + "}",
    ],
)
def test_bad_text_raises_body_error(text):
    with pytest.raises(BodyError):
        fastjson_loads(text)
    assert issubclass(BodyError, ValueError)


def test_as_int_reads_java_longs_in_every_form():
    assert as_int(5, "x") == 5 and as_int("9007199254740993", "x") == 9007199254740993 and as_int(3.0, "x") == 3
    for bad in ("abc", 2.5, None, True, [1]):
        with pytest.raises(BodyError, match="x"):
            as_int(bad, "x")
