"""The end-to-end checker on hand-made histories: each category is detected, a clean history passes."""

from __future__ import annotations

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d

from tests.faults.checker import (
    FAIL,
    INFO,
    OK,
    Bounds,
    Delivery,
    History,
    classify_code,
    classify_rpc_error,
    key_of_body,
    make_body,
)


def sent(
    history: History,
    writer: str,
    counter: int,
    outcome: str = OK,
    *,
    topic: str = "T",
    group: str | None = None,
    deliver_at_ms: int | None = None,
    at: tuple[float, float] | None = None,
) -> tuple[bytes, str]:
    """A completed send; ``at``: its (invoke, complete) monotonic times."""
    body = make_body(f"{writer}-{counter}", history.seed)
    send = history.invoke(writer, counter, topic, body, group, deliver_at_ms)
    message_id = f"ID-{writer}-{counter}"
    history.complete(send, outcome, "" if outcome == OK else "x", message_id if outcome == OK else "")
    if at is not None:
        send.invoke_t, send.complete_t = at
    return body, message_id


def read(
    history: History,
    body: bytes,
    message_id: str,
    *,
    offset: int = -1,
    queue: int = 0,
    attempt: int = 1,
    topic: str = "T",
    wall_ms: int | None = None,
) -> None:
    history.deliver(
        Delivery(
            message_id,
            topic,
            queue,
            offset,
            body,
            attempt=attempt,
            **({"wall_ms": wall_ms} if wall_ms is not None else {}),
        )
    )


def clean_history() -> History:
    history = History(seed=7)
    for w in ("w0", "w1"):
        for c in range(5):
            body, mid = sent(history, w, c, group=f"{w}-g")
            read(history, body, mid, offset=c, queue=int(w[1]))
            history.consumer_acked([mid])
    return history


def test_clean_history_passes() -> None:
    report = clean_history().check()
    assert report.violations() == {} and report.acked == 10 and report.delivered == 10
    assert not report.duplicates_by_id and not report.duplicates_by_body and not report.unconsumed
    assert report.seed == 7 and "lost 0" in report.summary()


def test_lost_is_split_into_prefix_middle_and_suffix() -> None:
    history = History()
    messages = [sent(history, "w", c) for c in range(6)]
    for c in (2, 4):
        read(history, *messages[c])
    report = history.check()
    assert [k.split()[0] for k in report.lost_prefix] == ["w-0", "w-1"]
    assert [k.split()[0] for k in report.lost_middle] == ["w-3"]
    assert [k.split()[0] for k in report.lost_suffix] == ["w-5"]
    assert set(report.violations()) == {"lost-prefix", "lost-middle", "lost-suffix"}


def test_split_at_faults_makes_the_tail_before_a_kill_a_suffix() -> None:
    history = History()
    before = [sent(history, "w", c) for c in range(4)]
    history.fault("master#0")  # 2 and 3 were the unreplicated tail
    after = [sent(history, "w", c) for c in range(4, 6)]
    for m in (*before[:2], *after):
        read(history, *m)
    assert [k.split()[0] for k in history.check().lost_middle] == ["w-2", "w-3"]
    report = history.check(split_at_faults=True)
    assert [k.split()[0] for k in report.lost_suffix] == ["w-2", "w-3"]
    assert not report.lost_middle and not report.lost_prefix


def test_a_writer_with_nothing_read_loses_a_prefix_and_failed_or_info_sends_are_not_lost() -> None:
    history = History()
    sent(history, "w", 0)
    sent(history, "w", 1, FAIL)
    sent(history, "w", 2, INFO)
    history.invoke("w", 3, "T", b"w-3|x")  # never completed: indeterminate
    report = history.check()
    assert [k.split()[0] for k in report.lost] == ["w-0"] and report.lost_prefix
    assert report.failed == 1 and report.indeterminate == 2


def test_unexpected_corrupt_aborted_and_recovered() -> None:
    history = History()
    body, mid = sent(history, "w", 0)
    read(history, body[:-1] + bytes([body[-1] ^ 1]), mid)  # one bit flipped
    failed_body, _ = sent(history, "w", 1, FAIL)
    read(history, failed_body, "ID-stored-anyway")
    info_body, _ = sent(history, "w", 2, INFO)
    read(history, info_body, "ID-info")
    read(history, b"zz-9|never sent", "ID-ghost")
    read(history, b"no separator", "ID-ghost2")
    report = history.check()
    assert [c.split()[0] for c in report.corrupt] == ["w-0"]
    assert [a.split()[0] for a in report.aborted] == ["w-1"]
    assert report.recovered == ["w-2"]
    assert [u.split()[0] for u in report.unexpected] == ["ID-ghost", "ID-ghost2"]
    assert set(report.violations()) == {"corrupt", "aborted", "unexpected"}


def test_duplicates_by_id_redeliveries_and_by_body() -> None:
    history = History()
    body, mid = sent(history, "w", 0)
    read(history, body, mid, offset=0)
    read(history, body, mid, offset=0, attempt=2)  # redelivered after its invisible time
    body1, mid1 = sent(history, "w", 1)
    read(history, body1, mid1, offset=1)
    read(history, body1, mid1, offset=1)  # same attempt: a silent duplicate
    read(history, body1, "ID-second-copy", offset=2)  # the value stored twice
    report = history.check()
    assert report.duplicates_by_id == {mid: 1, mid1: 1}
    assert report.redeliveries == {mid: 1}
    assert report.duplicates_by_body == {"w-1": sorted([mid1, "ID-second-copy"])}
    assert report.violations() == {}  # legal at least once; the test decides how many are allowed


def test_fifo_order_violation_per_message_group() -> None:
    history = History()
    a = [sent(history, "p", c, group="g1") for c in range(4)]
    b = [sent(history, "q", c, group="g2") for c in range(2)]
    for i in (0, 2, 1, 3):  # g1: 2 delivered before the earlier 1
        read(history, *a[i])
    for i in (0, 1):
        read(history, *b[i])
    read(history, *a[1])  # a later redelivery of 1 does not matter
    report = history.check()
    assert report.order_violations == ["T/g1: p-2 delivered before earlier p-1"]


def test_fifo_ignores_lost_and_unacked_members() -> None:
    history = History()
    m = [sent(history, "p", c, group="g") for c in range(3)]
    sent(history, "p", 3, INFO, group="g")
    read(history, *m[0])
    read(history, *m[2])  # 1 is lost, not an order violation
    report = history.check()
    assert report.order_violations == [] and [k.split()[0] for k in report.lost_middle] == ["p-1"]


def test_inconsistent_offsets_early_and_unconsumed() -> None:
    history = History()
    body0, mid0 = sent(history, "w", 0)
    body1, mid1 = sent(history, "w", 1)
    read(history, body0, mid0, offset=5)
    read(history, body1, mid1, offset=5)  # two ids at one (queue, offset)
    body2, mid2 = sent(history, "w", 2, deliver_at_ms=10_000)
    read(history, body2, mid2, offset=6, wall_ms=9_000)
    history.consumer_acked([mid0, mid2])
    body3, mid3 = sent(history, "w", 3)
    read(history, body3, mid3, offset=7)
    history.consumer_ack_unknown([mid3])  # maybe acked: need not come back
    report = history.check()
    assert report.inconsistent_offsets == [f"T/0@5: {mid0} then {mid1}"]
    assert report.early == ["w-2 delivered 1000 ms before its time"]
    assert report.unconsumed == [mid1]


def test_rto_from_fault_and_restart_to_first_ok() -> None:
    history = History()
    sent(history, "w", 0)
    fault = history.fault("store")
    sent(history, "w", 1, INFO)
    history.restarted(fault)
    sent(history, "w", 2)
    [rto] = history.check().rto
    assert rto.fault == "store" and 0 <= rto.restart_to_first_ok_s <= rto.fault_to_first_ok_s < 1
    assert history.check().rto_p99() == rto.restart_to_first_ok_s
    history2 = History()
    history2.restarted(history2.fault("x"))
    assert history2.check().rto[0].restart_to_first_ok_s is None and history2.check().rto_p99() is None


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (d.OK, OK),
        (d.BAD_REQUEST, FAIL),
        (d.ILLEGAL_TOPIC, FAIL),
        (d.MESSAGE_BODY_TOO_LARGE, FAIL),
        (d.MESSAGE_PROPERTIES_TOO_LARGE, FAIL),
        (d.TOO_MANY_REQUESTS, FAIL),
        (d.UNAUTHORIZED, FAIL),
        (d.TOPIC_NOT_FOUND, FAIL),
        (d.NOT_IMPLEMENTED, FAIL),
        (d.INTERNAL_SERVER_ERROR, INFO),
        (d.PROXY_TIMEOUT, INFO),
        (d.MASTER_PERSISTENCE_TIMEOUT, INFO),
        (d.HA_NOT_AVAILABLE, INFO),
    ],
)
def test_classify_codes(code: int, outcome: str) -> None:
    assert classify_code(code) == outcome


def test_transport_errors_are_indeterminate_and_bodies_name_their_value() -> None:
    class Unavailable(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNAVAILABLE

    assert classify_rpc_error(Unavailable()) == INFO
    body = make_body("w3-17", 42)
    assert key_of_body(body) == "w3-17" and body == make_body("w3-17", 42) and body != make_body("w3-17", 43)
    assert key_of_body(b"\xff\xfe|") is None


# -- the chaos categories (issue 30)


def test_a_lost_ack_completed_after_its_masters_term_ended_is_fenced() -> None:
    """Master 0 (epoch 1) until t=10, none until 12, then master 1 (epoch 2): a lost ack sent
    under master 0 and answered after its term ended is a fenced ack; a lost one within one term
    is lost only; a kept one across the change is counted, not a violation."""
    history = History()
    history.role(0, 1, t=0.0)
    history.role(0, 1, t=5.0)  # a repeat (the watch saw another key change): dropped
    history.role(None, 1, t=10.0)
    history.role(1, 2, t=12.0)
    sent(history, "w", 0, at=(9.5, 11.0))  # answered while the group had no master: not kept
    sent(history, "w", 1, at=(9.8, 12.5))  # answered under master 1, not kept
    sent(history, "w", 2, at=(3.0, 3.1))  # lost within one term: lost, not fenced
    kept = sent(history, "w", 3, at=(9.9, 12.6))  # across the change, but kept: legal
    after = sent(history, "w", 4, at=(13.0, 13.1))
    for m in (kept, after):
        read(history, *m)
    report = history.check()
    assert [f.split()[0] for f in report.fenced_acks] == ["w-0", "w-1"]
    assert "no live master" in report.fenced_acks[0] and "master 1 (epoch 2)" in report.fenced_acks[1]
    assert report.acked_across_role_change == 3 and report.roles_recorded == 3
    assert {k.split()[0] for k in report.lost} == {"w-0", "w-1", "w-2"}
    assert "fenced-ack" in report.violations()


def test_fenced_acks_need_a_recorded_election_history() -> None:
    history = History()
    sent(history, "w", 0, at=(9.5, 11.0))
    report = history.check()
    assert report.lost and not report.fenced_acks and report.roles_recorded == 0
    assert report.acked_across_role_change == 0


def test_duplicates_are_counted_and_judged_against_the_bound() -> None:
    history = History()
    for c in range(3):
        body, mid = sent(history, "w", c)
        read(history, body, mid, offset=c)
        read(history, body, mid, offset=c)  # each delivered twice
    body, _ = sent(history, "w", 3)
    read(history, body, "ID-a", offset=3)
    read(history, body, "ID-b", offset=4)  # one value stored twice
    history.fault("kill-master")
    report = history.check()
    assert report.duplicate_deliveries == 4 and report.duplicates_allowed is None
    assert "duplicates-over-bound" not in report.violations()
    within = history.check(bounds=Bounds(duplicates_per_fault_max=4, duplicates_ratio_max=0.0))
    assert within.duplicates_allowed == 4 and "duplicates-over-bound" not in within.violations()
    over = history.check(bounds=Bounds(duplicates_per_fault_max=3, duplicates_ratio_max=0.0))
    assert over.violations()["duplicates-over-bound"] == ["4 > 3"]
    assert Bounds(duplicates_per_fault_max=10, duplicates_ratio_max=0.005).duplicates_allowed(1000, 2) == 25


def test_delay_messages_are_counted_never_early_never_lost() -> None:
    history = History()
    on_time = sent(history, "d", 0, deliver_at_ms=10_000)
    read(history, *on_time, wall_ms=10_250)
    early = sent(history, "d", 1, deliver_at_ms=10_000)
    read(history, *early, wall_ms=9_990)
    sent(history, "d", 2, deliver_at_ms=20_000)  # acked, never delivered
    normal = sent(history, "n", 0)
    read(history, *normal)
    report = history.check()
    assert (report.delay_acked, report.delay_delivered) == (3, 2)
    assert [k.split()[0] for k in report.delay_lost] == ["d-2"]
    assert report.early == ["d-1 delivered 10 ms before its time"]
    assert report.delay_late_p99_ms == 250
    assert {"early", "lost-suffix"} <= set(report.violations())


def test_consumer_offsets_moving_back_beyond_the_bound() -> None:
    """Offsets 0..9 of one queue delivered and acked; after a failover the group's offset moves
    back to 7 (3 behind the highest delivered: within a bound of 3), then to 2 (beyond it)."""
    history = History()
    messages = [sent(history, "w", c) for c in range(10)]
    for c, m in enumerate(messages):
        read(history, *m, offset=c)
        history.consumer_acked([m[1]])
    for c in (7, 8):
        read(history, *messages[c], offset=c)  # the group delivers acked ones again, as first attempts
    read(history, *messages[9], offset=9, attempt=2)  # a retry: from the retry topic, no offset judged
    report = history.check(bounds=Bounds(offset_rewind_max=3))
    assert len(report.acked_redelivered) == 3 and report.offset_rewinds == [2, 1]
    assert not report.offset_rewind_over
    read(history, *messages[2], offset=2)
    report = history.check(bounds=Bounds(offset_rewind_max=3))
    assert report.offset_rewinds == [2, 1, 7] and report.offset_rewind_max == 3
    assert report.offset_rewind_over == ["T/0: ID-w-2 at offset 2, acked, delivered again 7 behind 9"]
    assert "offset-rewind" in report.violations()
    assert "offset-rewind" not in history.check().violations()  # no bound given: counted only


def test_a_delivery_before_the_ack_is_not_a_rewind() -> None:
    history = History()
    body, mid = sent(history, "w", 0)
    read(history, body, mid, offset=0)
    read(history, body, mid, offset=0)  # the consumer had not acked yet: a redelivery, not a rewind
    history.consumer_acked([mid])
    report = history.check(bounds=Bounds(offset_rewind_max=0))
    assert not report.acked_redelivered and not report.offset_rewinds and report.duplicate_deliveries == 1


def test_failover_quantiles_longest_gap_and_faults_applied() -> None:
    """Two faults: failover is fault -> first ok completed after it; the longest gap runs to the
    first ok after the heal."""
    history = History()
    first = history.fault("pause-master", t=100.0)
    history.healed(first, t=106.0)
    for c, done in enumerate((100.5, 103.0, 107.0, 107.5)):
        sent(history, "w", c, at=(done - 0.01, done))
    second = history.fault("kill-master", t=110.0)
    history.healed(second, t=111.0)
    sent(history, "w", 4, at=(111.9, 112.0))
    report = history.check()
    assert report.faults_applied == {"pause-master": 1, "kill-master": 1}
    assert [round(r.fault_to_first_ok_s or 0, 3) for r in report.rto] == [0.5, 2.0]
    assert [round(r.longest_gap_s or 0, 3) for r in report.rto] == [4.0, 2.0]
    assert report.failover(0.5) == report.rto[1].fault_to_first_ok_s
    assert report.failover(0.99, "gap") == report.rto[0].longest_gap_s
    assert report.operations == 5 and report.acked == 5
    unhealed = History()
    unhealed.fault("x", t=1.0)
    assert unhealed.check().rto[0].longest_gap_s is None and unhealed.check().failover(0.5) is None
