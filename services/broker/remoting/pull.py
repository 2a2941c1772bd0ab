"""PULL_MESSAGE 11 and LITE_PULL_MESSAGE 361 (../shared/docs/remoting.md §2.3), with long polling
as RocketMQ's ``PullRequestHoldService``.

A pull is checked (group, topic, queue, subscription), its commit offset stored when the
COMMIT_OFFSET bit is set, then read once (``classic_pull.pull_once``). When the queue is caught
up and the SUSPEND bit is set, the request is held: it was parked on the broker group's
``ArrivalHub`` before the read (so an arrival between the read and the hold is not lost), and
the first arrival of its topic or ``suspendTimeoutMillis`` (at most ``SUSPEND_MS_MAX``) sends it
to a worker for another read. No thread waits meanwhile; a later pass that is still caught up
holds again until the time is up, then answers PULL_NOT_FOUND.

Subscriptions: with the SUBSCRIPTION bit the request's ``subscription`` / ``expressionType``
(TAG or SQL92; a bad one is SUBSCRIPTION_PARSE_FAILED 23); without it the one the group's
heartbeat registered: none is SUBSCRIPTION_NOT_EXIST (24), an older ``subVersion`` than the
request's is SUBSCRIPTION_NOT_LATEST (25).

The commit offset goes to ``classic_offsets.ClassicOffsets`` (memory, written to the store every
5 s, as RocketMQ's ConsumerOffsetManager), not to the store with each pull.

The SUCCESS body is the records as the CommitLog holds them, concatenated, never decoded unless a
filter needs a record's properties. The response header: ``suggestWhichBrokerId`` 0,
``nextBeginOffset``, ``minOffset``, ``maxOffset``; the remark is the store's status name.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from services.broker.broker_group_core import BrokerGroupCore
from services.broker.classic_pull import ALL, ClassicPullResult, ClassicPullStatus, PullFilter, pull_once
from services.broker.consumer import FilterType, Parked, parse_filter, validate_group
from services.broker.errors import BrokerError
from services.broker.remoting.context import RemotingContext
from services.broker.remoting.dispatch import (
    Dispatcher,
    Observe,
    RemotingError,
    required,
    required_int,
)
from services.broker.remoting.server import Channel, RemotingServer
from services.domain.remoting.codes import (
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    RequestCode,
    ResponseCode,
)
from services.domain.remoting.command import RemotingCommand
from services.domain.remoting.records import with_store_host

SUSPEND_MS_MAX = 30_000
_READING, _HELD, _DONE = 0, 1, 2
_CODES = {
    ClassicPullStatus.FOUND: ResponseCode.SUCCESS,
    ClassicPullStatus.RETRY_IMMEDIATELY: ResponseCode.PULL_RETRY_IMMEDIATELY,
    ClassicPullStatus.NOT_FOUND: ResponseCode.PULL_NOT_FOUND,
    ClassicPullStatus.OFFSET_MOVED: ResponseCode.PULL_OFFSET_MOVED,
}


@dataclass(slots=True, eq=False)
class PullTask:
    channel: Channel
    request: RemotingCommand
    core: BrokerGroupCore
    group: str
    topic: str
    queue_id: int
    offset: int
    max_nums: int
    message_filter: PullFilter
    deadline_s: float  # monotonic; 0: answer at once
    started_s: float  # monotonic, when the request came
    parked: Parked | None = None
    state: int = 0  # _READING, _HELD or _DONE (Pulls._lock)
    woken: bool = False  # an arrival came during the read in progress


class Pulls:
    def __init__(
        self, context: RemotingContext, server: RemotingServer, dispatcher: Dispatcher, observe: Observe | None = None
    ) -> None:
        self._context = context
        self._observe = observe
        self._server = server
        self._dispatcher = dispatcher
        self._lock = threading.Lock()  # the tasks' state and the held set (a leaf)
        self._held: set[PullTask] = set()

    @property
    def held(self) -> int:
        """Pulls waiting for an arrival now."""
        return len(self._held)

    def held_queues(self, group: str, topic: str) -> list[tuple[str, int]]:
        """(client address, queue id) of each pull of the group held now on ``topic``: which
        consumer pulls which queue (tests wait on a settled rebalance with it)."""
        with self._lock:
            return sorted(
                (t.channel.peer_address, t.queue_id) for t in self._held if t.group == group and t.topic == topic
            )

    def members_changed(self, group: str) -> None:
        """A group's members changed: its held pulls are answered now, so a queue the rebalance
        gives to another client is not held for the old one until its timeout."""
        with self._lock:
            tasks = [t for t in self._held if t.group == group]
        for task in tasks:
            self._expired(task)

    def close(self) -> None:
        """Release every held pull (the door is stopping: their connections close)."""
        with self._lock:
            held, self._held = self._held, set()
            for task in held:
                task.state = _DONE
        for task in held:
            if task.parked is not None:
                task.core.hub.unpark(task.parked)

    def register(self, dispatcher: Dispatcher) -> None:
        dispatcher.register(RequestCode.PULL_MESSAGE, self.pull)
        dispatcher.register(RequestCode.LITE_PULL_MESSAGE, self.pull)

    def pull(self, channel: Channel, request: RemotingCommand) -> RemotingCommand | None:
        fields = request.ext_fields
        group = required(fields, "consumerGroup")
        topic = required(fields, "topic")
        queue_id = required_int(fields, "queueId")
        offset = required_int(fields, "queueOffset")
        max_nums = required_int(fields, "maxMsgNums")
        sys_flag = required_int(fields, "sysFlag")
        commit_offset = required_int(fields, "commitOffset")
        suspend_ms = required_int(fields, "suspendTimeoutMillis")
        sub_version = required_int(fields, "subVersion")
        context = self._context
        validate_group(group)
        core = context.group_core(context.broker_name(channel, fields))
        core.offsets.check_queue(topic, queue_id)
        message_filter = self._filter(group, topic, sys_flag, sub_version, fields)
        if sys_flag & PULL_COMMIT_OFFSET and commit_offset >= 0:  # written to the store in rounds
            context.core.classic_offsets.commit(core.name, group, topic, queue_id, commit_offset)
        deadline_s = 0.0
        if sys_flag & PULL_SUSPEND:
            wait_ms = min(max(suspend_ms, 0), SUSPEND_MS_MAX)
            deadline_s = context.clock.monotonic_s() + wait_ms / 1000
        started_s = context.clock.monotonic_s()
        task = PullTask(
            channel, request, core, group, topic, queue_id, offset, max_nums, message_filter, deadline_s, started_s
        )
        return self._run(task)

    def _filter(self, group: str, topic: str, sys_flag: int, sub_version: int, fields: dict[str, str]) -> PullFilter:
        if sys_flag & PULL_SUBSCRIPTION:
            expression = fields.get("subscription") or "*"
            kind = (fields.get("expressionType") or "TAG").upper()
        else:
            registered = self._context.clients.subscription(group, topic)
            if registered is None:
                raise RemotingError(
                    ResponseCode.SUBSCRIPTION_NOT_EXIST,
                    f"the consumer's subscription not exist, group: {group} topic: {topic}",
                )
            if registered.sub_version < sub_version:
                raise RemotingError(
                    ResponseCode.SUBSCRIPTION_NOT_LATEST,
                    f"the consumer's subscription not latest, group: {group} topic: {topic}",
                )
            expression, kind = registered.expression, registered.expression_type.upper()
        if kind not in ("TAG", "SQL92"):
            raise RemotingError(
                ResponseCode.SYSTEM_ERROR, f"The broker does not support consumer to filter message by {kind}"
            )
        if kind == "TAG" and expression.strip() in ("", "*"):
            return ALL
        try:
            parsed = parse_filter(FilterType.SQL if kind == "SQL92" else FilterType.TAG, expression)
        except BrokerError as exc:
            raise RemotingError(ResponseCode.SUBSCRIPTION_PARSE_FAILED, exc.message) from None
        return PullFilter.of(parsed)

    # -- one pass, and the hold --------------------------------------------------------------------
    def _run(self, task: PullTask) -> RemotingCommand | None:
        """Read until there is an answer; None when the pull is held (answered later)."""
        hub = task.core.hub
        if task.deadline_s and task.parked is None:
            task.parked = hub.park((task.topic,), lambda: self._woken(task))
        while True:
            with self._lock:
                task.state, task.woken = _READING, False
            result = pull_once(
                task.core.store, task.topic, task.queue_id, task.offset, task.max_nums, task.message_filter
            )
            remaining_s = task.deadline_s - self._context.clock.monotonic_s() if task.deadline_s else 0.0
            if result.status is not ClassicPullStatus.NOT_FOUND or remaining_s <= 0:
                break
            with self._lock:
                if task.woken:  # an arrival during the read: read again at once
                    continue
                task.state = _HELD
                self._held.add(task)
            loop = self._server.loop
            loop.call_soon_threadsafe(loop.call_later, remaining_s, self._expired, task)
            return None
        with self._lock:
            task.state = _DONE
        if task.parked is not None:
            hub.unpark(task.parked)
            task.parked = None
        return self.answer(task.request, result, self._context.store_host(task.core.name))

    def _woken(self, task: PullTask) -> None:
        """An arrival of the task's topic (on the notifier's thread; must not block)."""
        with self._lock:
            if task.state == _READING:
                task.woken = True
                return
            if task.state != _HELD:
                return
            task.state = _READING
            self._held.discard(task)
        self._dispatcher.submit(lambda: self._resume(task))

    def _expired(self, task: PullTask) -> None:
        """The hold's time is up (on the loop)."""
        with self._lock:
            if task.state != _HELD:
                return
            task.state = _READING
            self._held.discard(task)
            task.deadline_s = 0.0  # the last pass answers whatever it finds
        self._dispatcher.submit(lambda: self._resume(task))

    def _resume(self, task: PullTask) -> None:
        try:
            response = self._run(task)
        except Exception as exc:  # noqa: BLE001 - a held pull is answered whatever happens
            response = task.request.response(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
            if task.parked is not None:
                task.core.hub.unpark(task.parked)
                task.parked = None
        if response is not None:
            task.channel.answer(response)
            if self._observe is not None:
                self._observe(task.request.code, response.code, self._context.clock.monotonic_s() - task.started_s)

    @staticmethod
    def answer(
        request: RemotingCommand, result: ClassicPullResult, store_host: tuple[bytes, int] | None = None
    ) -> RemotingCommand:
        ext = {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": str(result.next_begin_offset),
            "minOffset": str(result.min_offset),
            "maxOffset": str(result.max_offset),
        }
        body = with_store_host(result.records, store_host)
        return request.response(_CODES[result.status], result.store_status.value, ext_fields=ext, body=body)
