"""fastjson-style JSON: the reader RocketMQ's config files need and the writer that matches them."""

from __future__ import annotations

import pytest

from services.store.errors import FastjsonDecodeError
from services.store.metadata.fastjson import Bean, dumps, loads
from tests.support.metadata_samples import CONSUMER_OFFSET_48, DELAY_OFFSET_48_COMPACT


def test_reader_accepts_unquoted_integer_keys_tabs_and_newlines() -> None:
    document = loads(CONSUMER_OFFSET_48)
    assert document == {
        "offsetTable": {
            "TopicTest@please_rename_unique_group_name": {0: 6, 1: 3, 2: 3, 3: 2},
            "%RETRY%please_rename_unique_group_name@please_rename_unique_group_name": {0: 0},
        }
    }
    inner = document["offsetTable"]["TopicTest@please_rename_unique_group_name"]
    assert all(type(key) is int for key in inner)
    assert loads(DELAY_OFFSET_48_COMPACT) == {"offsetTable": {1: 1}}


def test_reader_accepts_plain_json_and_fastjson_leniencies() -> None:
    assert loads('{"a": [1, -2, 3.5, true, false, null], "b": {"0": "x"}}') == {
        "a": [1, -2, 3.5, True, False, None],
        "b": {"0": "x"},
    }
    assert loads('\ufeff{-1:7,name:"v"}') == {-1: 7, "name": "v"}
    assert loads('"\\u00e9\\t\\"x\\""') == 'é\t"x"'
    assert loads("{\f\b}") == {}


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"k":"{1:2,3:4}"}', {"k": "{1:2,3:4}"}),
        ('{"k":"a\\",1:2"}', {"k": 'a",1:2'}),
        ('{"x\\\\":"{1:",2:"}"}', {"x\\": "{1:", 2: "}"}),
        ('["{0:1", {0:1}]', ["{0:1", {0: 1}]),
    ],
)
def test_reader_leaves_look_alike_keys_inside_strings_alone(text: str, expected: object) -> None:
    assert loads(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "{",
        "{1:}",
        '{"a" 1}',
        "[1,2",
        "[1,]",
        "{1:2,}",
        "{} {}",
        "{'a':1}",
        "01",
        "__import__('os').system('true')",
        "{a-b:1}",
        "[" * 100 + "]" * 100,
    ],
)
def test_reader_rejects_malformed_text(text: str) -> None:
    with pytest.raises(FastjsonDecodeError):
        loads(text)


def test_writer_snapshot_of_a_small_offset_table() -> None:
    document = Bean(offsetTable={"TopicTest@g": {0: 6, 1: 3}, "%RETRY%g@g": {0: 0}})
    assert dumps(document) == (
        '{\n\t"offsetTable":{\n\t\t"TopicTest@g":{0:6,1:3\n\t\t},\n\t\t"%RETRY%g@g":{0:0\n\t\t}\n\t}\n}'
    )
    assert dumps(document, pretty=False) == '{"offsetTable":{"TopicTest@g":{0:6,1:3},"%RETRY%g@g":{0:0}}}'


def test_writer_bean_map_list_and_set_rules() -> None:
    bean = Bean(
        zeta=1, alpha={"b": 2, "a": 1}, gone=None, items=["x", Bean(k=True)], tags=("t1", "t2"), empty={}, none_list=[]
    )
    assert dumps(bean) == (
        "{\n"
        '\t"alpha":{\n\t\t"b":2,\n\t\t"a":1\n\t},\n'  # map: insertion order
        '\t"empty":{},\n'
        '\t"items":[\n\t\t"x",\n\t\t{\n\t\t\t"k":true\n\t\t}\n\t],\n'
        '\t"none_list":[],\n'
        '\t"tags":["t1","t2"],\n'  # Set: compact
        '\t"zeta":1\n'
        "}"
    )


def test_writer_escapes_like_fastjson() -> None:
    assert dumps('q"b\\s/\b\t\n\f\r\x01\x7f\u2028é') == ('"q\\"b\\\\s/\\b\\t\\n\\f\\r\\u0001\\u007F\\u2028é"')
    assert loads(dumps("a\x00\x1f\u2029z")) == "a\x00\x1f\u2029z"


def test_writer_refuses_what_fastjson_files_never_hold() -> None:
    with pytest.raises(TypeError):
        dumps(1.5)
    with pytest.raises(TypeError):
        dumps({(1, 2): 3})


def test_writer_then_reader_is_identity_on_a_nested_document() -> None:
    document = {"a": {0: 1, -5: 2}, "b": ["x", {"y": None}], "c": "{1:2}"}
    assert loads(dumps(document)) == {"a": {0: 1, -5: 2}, "b": ["x", {}], "c": "{1:2}"}
