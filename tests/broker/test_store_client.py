"""PutCoalescer: concurrent sends share one PutMessages; one bad message cannot sink a batch."""

from __future__ import annotations

import threading
import time

import pytest

from services.broker.errors import Code, FlowControlError, StoreCallError
from services.broker.put_coalescer import DirectPutSink, PendingPut, PutCoalescer
from services.runtime.clock import SystemClock
from services.runtime.process import free_ports
from services.store.client.errors import StoreUnavailableError
from services.store.client.model import MessageToPut, PutOutcome, PutStatus
from services.store.client.transport import GrpcTransport


def msg(i: int, body: bytes = b"x", system: bool = False) -> MessageToPut:
    return MessageToPut(topic="T", queue_id=0, body=body, properties={"UNIQ_KEY": str(i)}, allow_system_topic=system)


class GatedStore:
    """Records calls; the first call blocks until ``gate`` is set (so a queue can build up)."""

    def __init__(self, refuse_if=None) -> None:
        self.calls: list[tuple[list[str], bool]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.refuse_if = refuse_if

    def put(self, messages: list[MessageToPut], allow_system_topics: bool, timeout_s=None) -> list[PutOutcome]:
        self.calls.append(([m.properties["UNIQ_KEY"] for m in messages], allow_system_topics))
        self.entered.set()
        self.gate.wait(5)
        if self.refuse_if and any(self.refuse_if(m) for m in messages):
            error = "message 1 of the batch: bad; nothing written"
            return [PutOutcome(PutStatus.MESSAGE_ILLEGAL, error=error) for _ in messages]
        return [PutOutcome(PutStatus.PUT_OK, queue_offset=int(m.properties["UNIQ_KEY"])) for m in messages]


def test_queued_sends_go_out_as_one_put_in_order():
    store = GatedStore()
    coalescer = PutCoalescer(store.put)
    first = coalescer.submit(msg(0))
    runner = threading.Thread(target=coalescer.run_once)
    runner.start()
    assert store.entered.wait(5)  # put #1 (message 0) is in flight ...
    rest = [coalescer.submit(msg(i)) for i in range(1, 11)]  # ... while 10 more queue up
    store.gate.set()
    runner.join()
    assert coalescer.run_once() == 10
    assert store.calls == [(["0"], False), ([str(i) for i in range(1, 11)], False)]
    assert [p.wait(1).queue_offset for p in [first, *rest]] == list(range(11))
    stats = coalescer.stats()
    assert (stats.put_calls, stats.messages, stats.batches, stats.batch_messages_max) == (2, 11, 2, 10)


def test_dispatcher_thread_coalesces_concurrent_senders():
    store = GatedStore()
    store.gate.set()

    def put(messages: list[MessageToPut], allow_system_topics: bool, timeout_s=None) -> list[PutOutcome]:
        time.sleep(0.002)  # a store RPC takes time (without the GIL): others queue meanwhile
        return store.put(messages, allow_system_topics)

    coalescer = PutCoalescer(put)
    coalescer.start()
    try:
        barrier = threading.Barrier(32)
        results: list[int] = []

        def sender(i: int) -> None:
            barrier.wait()
            results.append(coalescer.submit(msg(i)).wait(5).queue_offset)

        threads = [threading.Thread(target=sender, args=(i,)) for i in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == list(range(32))
        assert len(store.calls) < 32  # typically 2-4 calls for 32 concurrent sends
    finally:
        coalescer.close()


def test_a_lone_send_is_put_on_its_own_thread():
    # Leader/follower: with nothing in flight, the waiting sender sends its batch itself (no
    # hand-off to the dispatcher thread, which is not even started here).
    store = GatedStore()
    store.gate.set()
    coalescer = PutCoalescer(store.put)
    threads: list[str] = []
    original = store.put

    def put(messages: list[MessageToPut], allow_system_topics: bool, timeout_s=None) -> list[PutOutcome]:
        threads.append(threading.current_thread().name)
        return original(messages, allow_system_topics)

    store.put = put  # type: ignore[method-assign]
    coalescer._store_put = put
    pending = [coalescer.submit(msg(i)) for i in range(3)]
    assert [p.wait(1).queue_offset for p in pending] == [0, 1, 2]
    assert store.calls == [(["0", "1", "2"], False)]  # the first wait sent all three
    assert threads == [threading.current_thread().name]


def test_a_send_queued_behind_a_leader_is_sent_by_the_dispatcher():
    store = GatedStore()
    senders: list[str] = []

    def put(messages: list[MessageToPut], allow_system_topics: bool, timeout_s=None) -> list[PutOutcome]:
        senders.append(threading.current_thread().name)
        return store.put(messages, allow_system_topics)

    coalescer = PutCoalescer(put)
    coalescer.start()
    try:
        first = coalescer.submit(msg(0))
        leader = threading.Thread(target=first.wait, args=(5,), name="leader")
        leader.start()
        assert store.entered.wait(5)  # the leader's put is in flight ...
        second = coalescer.submit(msg(1))  # ... this one queues behind it, and its sender
        results: list[int] = []  # waits (a put is in flight: it does not lead)
        follower = threading.Thread(target=lambda: results.append(second.wait(5).queue_offset), name="follower")
        follower.start()
        time.sleep(0.1)  # the follower is waiting now (nothing to see it by): then the leader's put returns
        store.gate.set()
        leader.join(5)
        follower.join(5)
        assert results == [1]
        assert store.calls == [(["0"], False), (["1"], False)]
        assert senders == ["leader", "put-dispatcher"]
    finally:
        coalescer.close()


def test_batches_respect_message_and_byte_limits():
    store = GatedStore()
    store.gate.set()
    coalescer = PutCoalescer(store.put, batch_messages_max=3, batch_bytes_max=10, queue_messages_max=100)
    for i in range(5):
        coalescer.submit(msg(i))
    coalescer.submit(msg(5, body=b"x" * 9))
    coalescer.submit(msg(6, body=b"x" * 10))  # a message of the full size still goes, alone
    while coalescer.run_once():
        pass
    assert [ids for ids, _ in store.calls] == [["0", "1", "2"], ["3", "4"], ["5"], ["6"]]


def test_system_topic_writes_are_never_batched_with_client_messages():
    store = GatedStore()
    store.gate.set()
    coalescer = PutCoalescer(store.put)
    for i, system in enumerate([False, False, True, True, False]):
        coalescer.submit(msg(i, system=system))
    while coalescer.run_once():
        pass
    assert store.calls == [(["0", "1"], False), (["2", "3"], True), (["4"], False)]


def test_a_batch_refused_as_a_whole_is_re_put_one_by_one():
    store = GatedStore(refuse_if=lambda m: m.properties["UNIQ_KEY"] == "1")
    store.gate.set()
    coalescer = PutCoalescer(store.put)
    pending = [coalescer.submit(msg(i)) for i in range(3)]
    coalescer.run_once()
    outcomes = [p.wait(1) for p in pending]
    assert [o.status for o in outcomes] == [PutStatus.PUT_OK, PutStatus.MESSAGE_ILLEGAL, PutStatus.PUT_OK]
    assert [ids for ids, _ in store.calls] == [["0", "1", "2"], ["0"], ["1"], ["2"]]
    assert coalescer.stats().isolated_batches == 1


def test_store_failure_fails_every_waiter_of_the_batch():
    def broken(messages, allow, timeout_s=None):
        raise StoreCallError("store unreachable")

    coalescer = PutCoalescer(broken)
    pending = [coalescer.submit(msg(i)) for i in range(3)]
    coalescer.run_once()
    for p in pending:
        with pytest.raises(StoreCallError):
            p.wait(1)


def test_a_bug_in_the_store_client_fails_the_batch_and_keeps_the_dispatcher():
    calls = []

    def buggy(messages, allow, timeout_s=None):
        calls.append(len(messages))
        if len(calls) == 1:
            raise KeyError("oops")
        return [PutOutcome(PutStatus.PUT_OK) for _ in messages]

    coalescer = PutCoalescer(buggy)
    first = coalescer.submit(msg(0))
    coalescer.run_once()
    with pytest.raises(StoreCallError, match="KeyError"):
        first.wait(1)
    second = coalescer.submit(msg(1))
    coalescer.run_once()
    assert second.wait(1).ok


def test_full_queue_is_flow_control():
    coalescer = PutCoalescer(GatedStore().put, batch_messages_max=2, queue_messages_max=2, queue_bytes_max=100)
    coalescer.submit(msg(0))
    coalescer.submit(msg(1))
    with pytest.raises(FlowControlError) as caught:
        coalescer.submit(msg(2))
    assert caught.value.code == Code.TOO_MANY_REQUESTS
    big = PutCoalescer(GatedStore().put, queue_bytes_max=100)
    big.submit(msg(0, body=b"x" * 150))  # alone it may exceed the byte bound ...
    with pytest.raises(FlowControlError):
        big.submit(msg(1, body=b"x"))  # ... but nothing joins it


def test_wait_times_out_with_proxy_timeout():
    pending = PendingPut(msg(0))
    with pytest.raises(StoreCallError) as caught:
        pending.wait(0.01)
    assert caught.value.code == Code.PROXY_TIMEOUT


def test_close_drains_then_refuses():
    store = GatedStore()
    store.gate.set()
    coalescer = PutCoalescer(store.put)
    pending = [coalescer.submit(msg(i)) for i in range(5)]
    coalescer.start()
    coalescer.close()
    assert all(p.wait(1).ok for p in pending)
    with pytest.raises(StoreCallError):
        coalescer.submit(msg(9))


def test_direct_sink_puts_each_message_alone():
    store = GatedStore()
    store.gate.set()
    sink = DirectPutSink(store.put)
    assert sink.submit(msg(0)).wait(0).ok and sink.submit(msg(1)).wait(0).ok
    assert [ids for ids, _ in store.calls] == [["0"], ["1"]]
    assert sink.stats().put_calls == 2


def test_sends_waiting_past_the_limit_are_refused_unsent():
    """RocketMQ's TIMEOUT_CLEAN_QUEUE: a send queued longer than queue_wait_max_ms is refused
    with TOO_MANY_REQUESTS before it reaches the store (a definite failure), the rest go out."""
    store = GatedStore()
    store.gate.set()
    now = [100.0]
    coalescer = PutCoalescer(store.put, queue_wait_max_ms=200, monotonic_s=lambda: now[0])
    old = [coalescer.submit(msg(i)) for i in range(3)]
    now[0] += 0.150
    fresh = [coalescer.submit(msg(i)) for i in range(3, 5)]
    now[0] += 0.100  # the first three waited 250 ms, the last two 100 ms
    assert coalescer.run_once() == 2
    for pending in old:
        with pytest.raises(FlowControlError) as info:
            pending.wait(1)
        assert info.value.code == Code.TOO_MANY_REQUESTS and "TIMEOUT_CLEAN_QUEUE" in info.value.message
    assert [p.wait(1).queue_offset for p in fresh] == [3, 4]
    assert store.calls == [(["3", "4"], False)]  # the refused ones never reached the store
    assert coalescer.stats().shed == 3 and coalescer.stats().queued_messages == 0


def test_shedding_is_off_at_zero():
    store = GatedStore()
    store.gate.set()
    now = [0.0]
    coalescer = PutCoalescer(store.put, queue_wait_max_ms=0, monotonic_s=lambda: now[0])
    pending = coalescer.submit(msg(7))
    now[0] += 60
    assert coalescer.run_once() == 1 and pending.wait(1).queue_offset == 7


def test_no_shedding_while_the_store_client_waits_for_a_new_master():
    """A replica set failing over: sends queued behind the one being retried are not refused as
    TOO_MANY_REQUESTS; they go to the new master once it answers. Shedding resumes after."""
    store = GatedStore()
    store.gate.set()
    now = [100.0]
    failing_over = [True]
    failovers = [0]
    coalescer = PutCoalescer(
        store.put,
        queue_wait_max_ms=200,
        monotonic_s=lambda: now[0],
        store_failing_over=lambda: failing_over[0],
        store_failovers=lambda: failovers[0],
    )
    waiting = [coalescer.submit(msg(i)) for i in range(3)]
    now[0] += 2.0  # a failover's worth of waiting
    assert coalescer.run_once() == 3
    assert [p.wait(1).queue_offset for p in waiting] == [0, 1, 2] and coalescer.stats().shed == 0
    behind = coalescer.submit(msg(3))  # queued during the failover, sent after it
    now[0] += 2.0
    failing_over[0] = False
    failovers[0] += 1  # the store client retried: what waited through it is not stale
    assert coalescer.run_once() == 1 and behind.wait(1).queue_offset == 3
    late = coalescer.submit(msg(4))
    now[0] += 0.3  # an ordinary 300 ms wait, after the failover: shed as before
    assert coalescer.run_once() == 0
    with pytest.raises(FlowControlError):
        late.wait(1)


def test_a_transport_closed_while_waiting_for_its_store_says_unavailable():
    """The master view closes the old master's transport when the master changes; a broker
    waiting on it at start must move to the new one, not die of "Cannot invoke RPC on closed
    channel" (found by chaos: a broker started while the master was paused past its lease)."""
    [port] = free_ports(1)
    transport = GrpcTransport(f"127.0.0.1:{port}")  # nobody listens: the wait goes on
    threading.Timer(0.3, transport.close).start()
    with pytest.raises(StoreUnavailableError, match="closed"):
        transport.wait_ready(10.0, lambda: False, SystemClock())
