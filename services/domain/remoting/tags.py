"""TAG subscription expressions as a remoting consumer sends them (../shared/docs/remoting.md
§2.3 PULL_MESSAGE "Tag syntax"; RocketMQ's ``FilterAPI.buildSubscriptionData``).

``"*"`` (or an empty or missing expression) subscribes to every message. Otherwise the
expression is split on ``"||"``; each part is trimmed as Java's ``String.trim`` does (every
character up to U+0020, not Unicode spaces) and kept if not empty. The broker matches a message
by the Java ``String.hashCode`` of its tag (the ``codeSet``; services/domain/format/java_compat.py);
the client then re-checks the tag text, so matching the text exactly on the broker is fine.

Java's ``split`` drops trailing empty parts, so an expression made only of ``"||"`` leaves no
part at all and ``FilterAPI`` throws "subString split error": here that is a
:class:`TagExpressionError` (a ValueError), answered SUBSCRIPTION_PARSE_FAILED (23). An
expression of only blanks (``" "``) is legal and matches nothing, as in Java.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from services.domain.format.java_compat import java_string_hash

SUB_ALL = "*"
_JAVA_TRIM = "".join(chr(c) for c in range(0x21))  # String.trim(): chars <= ' '
_SPLIT = re.compile(r"\|\|")


class TagExpressionError(ValueError):
    """A TAG expression FilterAPI refuses ("subString split error")."""


@dataclass(frozen=True, slots=True)
class TagExpression:
    """A parsed TAG expression: ``sub_all`` or the tags and their Java hash codes."""

    sub_string: str  # as FilterAPI keeps it: "*" for a subscribe-all
    tags: frozenset[str]
    codes: frozenset[int]

    @property
    def sub_all(self) -> bool:
        return self.sub_string == SUB_ALL

    def matches(self, tag: str | None) -> bool:
        """Whether a message with ``tag`` (None: no tag) is delivered."""
        return self.sub_string == SUB_ALL or (tag is not None and tag in self.tags)

    def matches_code(self, tags_code: int) -> bool:
        """Whether a ConsumeQueue unit's tags code passes (``ExpressionMessageFilter``)."""
        return self.sub_string == SUB_ALL or tags_code in self.codes


SUBSCRIBE_ALL = TagExpression(SUB_ALL, frozenset(), frozenset())


@functools.lru_cache(maxsize=4096)
def parse_tag_expression(sub_string: str | None) -> TagExpression:
    """``FilterAPI.buildSubscriptionData`` for a TAG expression (cached: consumers repeat theirs).

    Raises TagExpressionError when nothing is left after the split (``"||"``)."""
    if not sub_string or sub_string == SUB_ALL:
        return SUBSCRIBE_ALL
    parts = _SPLIT.split(sub_string)
    while parts and not parts[-1]:  # Java's split drops trailing empty strings
        parts.pop()
    if not parts:
        raise TagExpressionError(f"subString split error: {sub_string!r}")
    tags = [tag for tag in (part.strip(_JAVA_TRIM) for part in parts) if tag]
    return TagExpression(sub_string, frozenset(tags), frozenset(java_string_hash(tag) for tag in tags))


def tag_code(tag: str) -> int:
    """The Java ``String.hashCode`` of one tag, as a ``codeSet`` entry holds it (signed int)."""
    return java_string_hash(tag)
