"""TAG expressions as FilterAPI.buildSubscriptionData reads them (../shared/docs/remoting.md §2.3
"Tag syntax"): "*" or "TagA || TagB", trimmed as Java's String.trim, codes = String.hashCode."""

from __future__ import annotations

import pytest

from services.domain.remoting.tags import (
    SUBSCRIBE_ALL,
    TagExpressionError,
    parse_tag_expression,
    tag_code,
)

# String.hashCode by hand: ((84*31 + 97)*31 + 103)*31 + 65 for "TagA".
TAG_A_CODE = ((84 * 31 + 97) * 31 + 103) * 31 + 65
TAG_B_CODE = TAG_A_CODE + 1  # "TagB": the last char one higher


def test_known_java_hash_codes():
    assert tag_code("TagA") == TAG_A_CODE == 2598919
    assert tag_code("hello") == 99162322
    assert tag_code("polygenelubricants") == -(2**31)  # the signed int Java returns
    assert tag_code("") == 0


@pytest.mark.parametrize("expression", [None, "", "*"])
def test_subscribe_all(expression):
    parsed = parse_tag_expression(expression)
    assert parsed is SUBSCRIBE_ALL
    assert parsed.sub_all and parsed.sub_string == "*"
    assert parsed.matches(None) and parsed.matches("anything") and parsed.matches_code(12345)


def test_tags_are_split_on_double_bars_and_trimmed():
    parsed = parse_tag_expression("TagA || TagB")
    assert parsed.sub_string == "TagA || TagB" and not parsed.sub_all
    assert parsed.tags == {"TagA", "TagB"}
    assert parsed.codes == {TAG_A_CODE, TAG_B_CODE}
    assert parsed.matches("TagA") and not parsed.matches("TagC") and not parsed.matches(None)
    assert parsed.matches_code(TAG_B_CODE) and not parsed.matches_code(0)


@pytest.mark.parametrize(
    "expression,tags",
    [
        ("TagA", {"TagA"}),
        ("TagA||", {"TagA"}),  # Java's split drops the trailing empty part
        ("||TagA", {"TagA"}),  # the leading empty part is kept, then dropped as empty
        ("TagA|||TagB", {"TagA", "|TagB"}),
        ("\tTagA\x0b || TagB\n", {"TagA", "TagB"}),  # String.trim: every char <= U+0020
        ("\u3000TagA", {"\u3000TagA"}),  # an ideographic space is not trimmed by Java
        ("TagA || TagA", {"TagA"}),
        (" ", set()),  # legal, matches nothing
        ("* || TagA", {"*", "TagA"}),  # "*" means all only when it is the whole expression
        ("TagA|TagB", {"TagA|TagB"}),
    ],
)
def test_java_split_and_trim(expression, tags):
    parsed = parse_tag_expression(expression)
    assert parsed.tags == tags
    assert parsed.codes == {tag_code(tag) for tag in tags}


def test_blank_expression_matches_nothing():
    parsed = parse_tag_expression("  ")
    assert not parsed.sub_all and not parsed.matches("TagA") and not parsed.matches_code(0)


@pytest.mark.parametrize("expression", ["||", "||||"])
def test_nothing_left_after_the_split_is_an_error(expression):
    with pytest.raises(TagExpressionError, match="subString split error"):
        parse_tag_expression(expression)
    assert issubclass(TagExpressionError, ValueError)
