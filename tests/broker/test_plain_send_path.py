"""The producer's fast path for usual messages (``Producer._build_plain``) against the full checks.

For any message, the fast path either answers exactly what ``build_properties`` answers (same
type, same properties in the same order) or steps aside (None), and it always steps aside when
the full checks refuse the message, so every refusal keeps its exact code. Hypothesis draws
messages near every rule's edge: whitespace and control characters, ``|`` in tags, reserved
property names, long groups, astral characters, type conflicts.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.broker.config import BrokerConfig
from services.broker.errors import BrokerError
from services.broker.model import IncomingMessage
from services.broker.producer import Producer
from services.broker.put_coalescer import DirectPutSink
from services.broker.topics import TopicRegistry
from services.domain.delivery import MessageType
from services.runtime.clock import ManualClock
from tests.support.store_double import StoreDouble

NOW_MS = 1_700_000_000_123
PEER = "10.1.2.3:50123"
CONFIG = BrokerConfig(
    body_size_max_bytes=64,
    user_properties_size_max_bytes=96,
    message_group_size_max_bytes=16,
    user_property_count_max=3,
)

# Characters around every rule: plain, space and Java whitespace, non-breaking space (not Java
# whitespace), control characters (C0, DEL, C1), the tag separator, astral and 2-byte ones.
ALPHABET = st.sampled_from(
    list("ab7-_.") + [" ", "\t", "\u00a0", "\u2003", "\x00", "\x1f", "\x7f", "\x85", "|", "\U0001f600", "é"]
)
GOOD = st.text(st.sampled_from("abc7-_."), min_size=1, max_size=8)
ANY = st.text(ALPHABET, max_size=12)
FIELDS = ["body", "user", "tag", "keys", "id", "type", "group", "delivery", "trace", "host", "priority", "born"]


@st.composite
def messages(draw) -> IncomingMessage:
    """A clean message with none, one or every field drawn from the odd values."""
    odd = draw(st.sampled_from([set(), set(FIELDS)] + [{name} for name in FIELDS]))

    def pick(name, clean, broad):
        return draw(broad if name in odd else clean)

    group = pick("group", st.one_of(st.none(), GOOD), st.one_of(st.none(), ANY, st.just("g" * 16)))
    return IncomingMessage(
        topic="TopicTest",
        body=pick("body", st.just(b"x"), st.sampled_from([b"", b"y" * 64, b"z" * 65])),
        user_properties=pick(
            "user",
            st.dictionaries(GOOD, GOOD, max_size=2),
            st.dictionaries(
                st.one_of(ANY, st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "__SHARDINGKEY", ""])), ANY, max_size=4
            ),
        ),
        tag=pick("tag", st.one_of(st.none(), GOOD), st.one_of(st.just(""), ANY)),
        keys=pick("keys", st.lists(GOOD, max_size=2), st.lists(ANY, max_size=3)),
        message_id=pick("id", st.just("0102FC0000000146A20B13E20600000000"), ANY),
        message_type=pick(
            "type", st.just(MessageType.FIFO if group else MessageType.NORMAL), st.sampled_from(list(MessageType))
        ),
        born_timestamp_ms=pick("born", st.just(1_700_000_000_000), st.none()),
        born_host=pick("host", st.just("192.168.0.7"), ANY),
        message_group=group,
        delivery_timestamp_ms=pick("delivery", st.none(), st.just(NOW_MS + 5000)),
        delivery_attempt=draw(st.sampled_from([0, 3])),
        trace_context=pick("trace", st.none(), st.one_of(GOOD, ANY)),
        priority=pick("priority", st.none(), st.just(1)),
    )


@pytest.fixture(scope="module")
def store_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StoreDouble]:
    """One store for the module: building a message's properties does not reach it."""
    double = StoreDouble(tmp_path_factory.mktemp("store"), ManualClock(NOW_MS))
    yield double
    double.close()


def producer(store_client: StoreDouble) -> Producer:
    return Producer(
        CONFIG,
        TopicRegistry(CONFIG, store_client, store_client.clock),
        DirectPutSink(store_client.put_messages),
        store_client.clock,
    )


def fast_path_agrees(store_client: StoreDouble, message: IncomingMessage) -> None:
    p = producer(store_client)
    try:
        expected = p.build_properties(message, PEER, NOW_MS)
    except BrokerError:
        expected = None
    fast = p._build_plain(message, NOW_MS)
    if expected is None:
        assert fast is None, "the fast path accepted a message the full checks refuse"
        return
    if fast is not None:
        assert fast[0] is expected[0]
        assert list(fast[1].items()) == list(expected[1].items())


@settings(max_examples=600, deadline=None)
@given(messages())
def test_fast_path_answers_as_the_full_checks_or_steps_aside(store_client, message):
    fast_path_agrees(store_client, message)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None)
@given(messages())
def test_fast_path_answers_as_the_full_checks_on_many_more_messages(store_client, message):
    """make soak: the same property on 10,000 messages (make test draws 600)."""
    fast_path_agrees(store_client, message)


def test_the_usual_message_takes_the_fast_path(store_client):
    message = IncomingMessage(
        topic="TopicTest",
        body=b"hello",
        tag="TagA",
        keys=["order-1"],
        message_id="0102FC0000000146A20B13E20600000000",
        message_type=MessageType.NORMAL,
        born_timestamp_ms=1_700_000_000_000,
        born_host="192.168.0.7",
        user_properties={"color": "red"},
    )
    fast = producer(store_client)._build_plain(message, NOW_MS)
    assert fast is not None and fast[0] is MessageType.NORMAL
    assert fast[1] == producer(store_client).build_properties(message, PEER, NOW_MS)[1]
    fifo = IncomingMessage(
        topic="TopicTest",
        body=b"hello",
        message_id="X1",
        message_group="g1",
        message_type=MessageType.FIFO,
        born_host="h",
    )
    assert producer(store_client)._build_plain(fifo, NOW_MS)[0] is MessageType.FIFO
