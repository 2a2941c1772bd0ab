"""The operator's reads and resets over every broker group (issue 17): ``pyrmq status``,
``consumer progress``, ``consumer reset`` and ``message query`` see the whole cluster, not only
the broker's home group.

Each call asks every group of the cluster (``TopicPlacement.cluster_broker_groups``: those registered
in etcd, else the home group) through that group's ``AdminService`` and merges the answers; every
queue, reset and message found carries its group (``broker_name``), since queue ids start at 0
in each group. A group whose store cannot answer:

* status: is reported in ``ClusterStatus.broker_groups`` with the error, and the others' data is
  shown (so ``pyrmq status`` still shows the rest of a cluster with a group down);
* progress and message queries: is named in ``unreachable`` (lag and results are then partial,
  and say so);
* reset: fails the call once every other group is reset (a reset is idempotent: run it again);

and when no group answers at all, the first group's error is the call's, as with one group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from services.broker.admin import (
    AdminService,
    BrokerGroupStatus,
    ClusterStatus,
    ConsumerProgress,
    GroupTopicStatus,
    QueueReset,
    ResetPosition,
    TopicStatus,
)
from services.broker.errors import FAILURES, BrokerError, Code, NotFoundError, StoreCallError, as_broker_error
from services.store.client.model import StoredMessage

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class FoundMessages:
    messages: list[tuple[str, StoredMessage]]  # (broker group, message), oldest first per group
    unreachable: tuple[str, ...]  # groups whose store did not answer


class ClusterAdmin:
    def __init__(
        self, cluster_broker_groups: Callable[[], list[str]], admin: Callable[[str], AdminService], home: str
    ) -> None:
        self._cluster_broker_groups = cluster_broker_groups
        self._admin = admin
        self._home = home

    def _each(self, call: Callable[[AdminService], T]) -> tuple[list[tuple[str, T]], dict[str, BrokerError]]:
        """``call`` on every group: (group, answer) of those that answered, group -> error of
        those whose store failed or that said "not found". No group answered: its error."""
        answers: list[tuple[str, T]] = []
        errors: dict[str, BrokerError] = {}
        for broker_group in self._cluster_broker_groups():
            try:
                answers.append((broker_group, call(self._admin(broker_group))))
            except FAILURES as caught:
                exc = as_broker_error(caught)
                if not isinstance(exc, (StoreCallError, NotFoundError)):
                    raise  # a bad request: every group would say the same
                errors[broker_group] = exc
        if not answers:
            raise self._first_error(errors)
        return answers, errors

    @staticmethod
    def _unreachable(errors: dict[str, BrokerError]) -> tuple[str, ...]:
        return tuple(sorted(broker_group for broker_group, exc in errors.items() if isinstance(exc, StoreCallError)))

    @staticmethod
    def _first_error(errors: dict[str, BrokerError]) -> BrokerError:
        """No group answered: a store failure before a "not found" (which may be a down group's)."""
        failures = [exc for exc in errors.values() if isinstance(exc, StoreCallError)]
        return failures[0] if failures else next(iter(errors.values()))

    # -- status --------------------------------------------------------------------------------
    def cluster_status(self, include_system: bool = False) -> ClusterStatus:
        answers, errors = self._each(lambda admin: admin.cluster_status(include_system))
        topics: dict[str, TopicStatus] = {}
        group_rows: dict[tuple[str, str], GroupTopicStatus] = {}
        states: list[BrokerGroupStatus] = []
        for broker_group, status in answers:
            states.append(BrokerGroupStatus(broker_group, status.store_address, ""))
            for topic in status.topics:
                queues = [replace(q, broker_name=broker_group) for q in topic.queues]
                merged = topics.get(topic.topic.name)
                topics[topic.topic.name] = (
                    TopicStatus(topic.topic, queues, (broker_group,), topic.lite_topic_count)
                    if merged is None
                    else TopicStatus(
                        merged.topic,
                        merged.queues + queues,
                        (*merged.broker_groups, broker_group),
                        merged.lite_topic_count + topic.lite_topic_count,
                    )
                )
            for row in status.groups:
                progress = [replace(q, broker_name=broker_group) for q in row.queues]
                had = group_rows.get((row.group, row.topic))
                group_rows[(row.group, row.topic)] = (
                    replace(row, queues=progress)
                    if had is None
                    else GroupTopicStatus(
                        row.group,
                        row.topic,
                        had.queues + progress,
                        had.inflight_messages + row.inflight_messages,
                        had.lite_topic_count + row.lite_topic_count,
                        had.lite_lag + row.lite_lag,
                    )
                )
        states += [BrokerGroupStatus(broker_group, "", str(exc)) for broker_group, exc in errors.items()]
        consumed = {group for group, topic in group_rows if topic}
        rows = [row for key, row in sorted(group_rows.items()) if key[1] or key[0] not in consumed]
        home = next((s.store_address for s in states if s.name == self._home), states[0].store_address)
        states.sort(key=lambda state: state.name)
        return ClusterStatus(home, sorted(topics.values(), key=lambda t: t.topic.name), rows, states)

    # -- consumer progress and reset ------------------------------------------------------------
    def consumer_progress(self, group: str, topic: str = "") -> ConsumerProgress:
        answers, errors = self._each(lambda admin: admin.consumer_progress(group, topic))
        queues = [replace(q, broker_name=name) for name, progress in answers for q in progress.queues]
        queues.sort(key=lambda q: (q.topic, q.lite_topic, q.broker_name, q.queue_id))
        return ConsumerProgress(group, queues, self._unreachable(errors))

    def reset_consumer_offset(
        self,
        group: str,
        topic: str,
        *,
        timestamp_ms: int | None = None,
        position: ResetPosition | None = None,
        offset: int | None = None,
    ) -> list[QueueReset]:
        answers, errors = self._each(
            lambda admin: admin.reset_consumer_offset(
                group, topic, timestamp_ms=timestamp_ms, position=position, offset=offset
            )
        )
        unreachable = self._unreachable(errors)
        if unreachable:
            log.warning("reset of %s on %s: broker groups %s did not answer", group, topic, unreachable)
            raise StoreCallError(
                f"reset group {group} on topic {topic} in {', '.join(g for g, _ in answers)}, but broker group(s) "
                f"{', '.join(unreachable)} did not answer: run it again once they are back",
                Code.INTERNAL_SERVER_ERROR,
            )
        return [replace(r, broker_name=name) for name, resets in answers for r in resets]

    # -- messages -------------------------------------------------------------------------------
    def query_by_key(self, topic: str, key: str, max_num: int = 0) -> FoundMessages:
        answers, errors = self._each(lambda admin: admin.query_by_key(topic, key, max_num))
        return self._found(answers, errors, max_num)

    def query_by_id(self, message_id: str, topic: str = "", max_num: int = 0) -> FoundMessages:
        answers, errors = self._each(lambda admin: admin.query_by_id(message_id, topic, max_num))
        return self._found(answers, errors, max_num)

    def _found(
        self, answers: list[tuple[str, list[StoredMessage]]], errors: dict[str, BrokerError], max_num: int
    ) -> FoundMessages:
        messages = [(broker_group, message) for broker_group, found in answers for message in found]
        return FoundMessages(messages[: max_num or None], self._unreachable(errors))
