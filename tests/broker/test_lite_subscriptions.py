"""The broker's lite subscription registry (services/broker/lite_subscriptions.py), on a manual
clock: the four sync actions, the per-client quota, expiry after 3 minutes without a sync, and
readiness (subscribed lite topics, arrivals, watch restarts; a key marked again while a pop ran
stays ready). Python's one-character PARTIAL_ADD (docs/v2-clients.md, pitfall 21)."""

from __future__ import annotations

import pytest

from services.broker.errors import Code, RequestError
from services.broker.lite_consumer import python_partial_add
from services.broker.lite_subscriptions import LiteAction, LiteSubscriptions
from services.domain.lite import lmq_name
from services.runtime.clock import ManualClock

P = "Parent"


def lmq(name: str) -> str:
    return lmq_name(P, name)


@pytest.fixture
def subs() -> LiteSubscriptions:
    return LiteSubscriptions(ManualClock(), lambda topic: ["broker-a", "broker-b"], quota=3, expire_ms=180_000)


def ready(subs: LiteSubscriptions, client_id: str = "c1") -> list[tuple[str, str]]:
    client = subs.client(client_id)
    assert client is not None
    return [key for key, _ in subs.take(client, 100)]


def test_actions(subs: LiteSubscriptions) -> None:
    subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["a", "b"])
    client = subs.client("c1")
    assert client is not None and client.lite_topics == {"a", "b"} and client.wake.is_set()
    assert sorted(ready(subs)) == [(g, lmq(n)) for g in ("broker-a", "broker-b") for n in ("a", "b")]  # backlogs
    subs.sync("c1", "G", P, LiteAction.PARTIAL_REMOVE, ["a", "zzz"])
    assert client.lite_topics == {"b"} and all(key[1] == lmq("b") for key in ready(subs))
    subs.sync("c1", "G", P, LiteAction.COMPLETE_ADD, ["c", "d"])
    assert client.lite_topics == {"c", "d"}
    subs.sync("c1", "G", P, LiteAction.COMPLETE_REMOVE, [])
    assert subs.client("c1") is None
    # binding another group or topic replaces the client's subscription
    subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["a"])
    subs.sync("c1", "G2", P, LiteAction.PARTIAL_ADD, ["x"])
    again = subs.client("c1")
    assert again is not None and (again.group, again.lite_topics) == ("G2", {"x"})


def test_quota_per_client(subs: LiteSubscriptions) -> None:
    subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["a", "b", "c"])
    with pytest.raises(RequestError) as caught:
        subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["d"])
    assert caught.value.code is Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
    subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["a"])  # already there: not counted again
    subs.sync("c2", "G", P, LiteAction.PARTIAL_ADD, ["a", "b", "c"])  # another client's own quota
    with pytest.raises(RequestError):
        subs.sync("c3", "G", P, LiteAction.COMPLETE_ADD, ["a", "b", "c", "d"])


def test_a_client_not_heard_from_for_3_minutes_is_dropped(subs: LiteSubscriptions) -> None:
    clock = subs._clock
    assert isinstance(clock, ManualClock)
    subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["a"])
    clock.advance_ms(170_000)
    subs.sync("c1", "G", P, LiteAction.COMPLETE_ADD, ["a"])  # the 30 s keep-alive
    clock.advance_ms(170_000)
    assert subs.client("c1") is not None
    clock.advance_ms(10_001)
    assert subs.client("c1") is None and subs.clients() == []
    subs.on_arrivals("broker-a", [lmq("a")])  # nobody to wake


def test_arrivals_mark_subscribers_ready_and_a_mark_during_a_pop_survives(subs: LiteSubscriptions) -> None:
    subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["a", "b"])
    subs.sync("c2", "G", P, LiteAction.PARTIAL_ADD, ["b"])
    c1, c2 = subs.client("c1"), subs.client("c2")
    assert c1 is not None and c2 is not None
    subs.examined(c1, subs.take(c1, 100))
    subs.examined(c2, subs.take(c2, 100))
    assert ready(subs, "c1") == [] and ready(subs, "c2") == []
    c1.wake.clear()
    subs.on_arrivals("broker-b", [lmq("b"), "OtherTopic", lmq("unsubscribed")])
    assert ready(subs, "c1") == [("broker-b", lmq("b"))] and ready(subs, "c2") == [("broker-b", lmq("b"))]
    assert c1.wake.is_set()
    taken = subs.take(c1, 100)
    subs.on_arrivals("broker-b", [lmq("b")])  # arrived while the pop ran
    subs.examined(c1, taken)
    assert ready(subs, "c1") == [("broker-b", lmq("b"))]
    subs.examined(c1, subs.take(c1, 100))
    subs.on_restart("broker-a")  # arrivals may have been missed there
    assert sorted(ready(subs, "c1")) == [("broker-a", lmq("a")), ("broker-a", lmq("b"))]


def test_terminated_clients_are_dropped_and_woken(subs: LiteSubscriptions) -> None:
    subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["a"])
    client = subs.client("c1")
    assert client is not None
    client.wake.clear()
    subs.drop_client("c1")
    assert subs.client("c1") is None and client.wake.is_set()


def test_python_partial_add_spells_one_name() -> None:
    assert python_partial_add(list("chat-1")) == ["chat-1"]
    assert python_partial_add(["ab", "c"]) == ["ab", "c"]


def test_counts_for_the_metrics(subs: LiteSubscriptions) -> None:
    assert subs.counts() == (0, 0)
    subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["a", "b"])
    subs.sync("c2", "G", P, LiteAction.PARTIAL_ADD, ["a"])
    assert subs.counts() == (2, 3)


def test_exclusive_groups_give_a_lite_topic_to_its_newest_subscriber(subs: LiteSubscriptions) -> None:
    assert subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["a", "b"], exclusive=True) == []
    subs.sync("other", "G2", P, LiteAction.PARTIAL_ADD, ["a"], exclusive=True)  # another group: no matter
    assert subs.sync("c2", "G", P, LiteAction.PARTIAL_ADD, ["a"], exclusive=True) == [("c1", "a")]
    c1, c2 = subs.client("c1"), subs.client("c2")
    assert c1 is not None and c2 is not None
    assert c1.lite_topics == {"b"} and c2.lite_topics == {"a"}
    subs.on_arrivals("broker-a", [lmq("a")])
    assert all(key[1] != lmq("a") for key in ready(subs, "c1"))
    # c1's keep-alive still names it (the Python client ignores the notice): told again, not given back
    assert subs.sync("c1", "G", P, LiteAction.COMPLETE_ADD, ["a", "b"], exclusive=True) == [("c1", "a")]
    assert c1.lite_topics == {"b"} and c2.lite_topics == {"a"}
    # a PARTIAL_ADD takes it back
    assert subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["a"], exclusive=True) == [("c2", "a")]
    assert c1.lite_topics == {"a", "b"} and c2.lite_topics == set()
    # shared groups: both keep it
    assert subs.sync("s1", "S", P, LiteAction.PARTIAL_ADD, ["a"]) == []
    assert subs.sync("s2", "S", P, LiteAction.PARTIAL_ADD, ["a"]) == []


def test_a_quota_per_call_overrides_the_default(subs: LiteSubscriptions) -> None:
    subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["a", "b", "c", "d", "e"], quota=5)
    with pytest.raises(RequestError):
        subs.sync("c1", "G", P, LiteAction.PARTIAL_ADD, ["f"], quota=5)


def test_wildcard_clients_get_every_lite_topic_of_their_parent() -> None:
    restarted: list[tuple[str, list[str]]] = []
    subs = LiteSubscriptions(
        ManualClock(),
        lambda topic: ["broker-a", "broker-b"],
        quota=3,
        expire_ms=180_000,
        on_wildcard_restart=lambda group, clients: restarted.append((group, [c.client_id for c in clients])),
    )
    with pytest.raises(RequestError) as caught:
        subs.sync("w1", "W", P, LiteAction.PARTIAL_ADD, ["a"], wildcard=True)
    assert caught.value.code is Code.BAD_REQUEST
    subs.sync("w1", "W", P, LiteAction.COMPLETE_ADD, ["ignored"], wildcard=True)
    client = subs.client("w1")
    assert client is not None and client.wildcard and client.lite_topics == set()
    subs.on_arrivals("broker-a", [lmq("anything"), lmq_name("OtherParent", "x")])
    assert ready(subs, "w1") == [("broker-a", lmq("anything"))]
    subs.on_restart("broker-b")
    assert restarted == [("broker-b", ["w1"])]
    subs.mark(client, "broker-b", [lmq("backlog")])
    assert ("broker-b", lmq("backlog")) in ready(subs, "w1")
    subs.sync("w1", "W", P, LiteAction.COMPLETE_REMOVE, [], wildcard=True)
    subs.on_arrivals("broker-a", [lmq("later")])
    assert subs.client("w1") is None
