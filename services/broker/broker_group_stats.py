"""The broker's metrics over every broker group it serves (issue 17).

Each ``BrokerGroupCore`` has its own send queue, receipt renewer and store; a dashboard wants the
broker's figures, and a topic's consumer lag over all the groups that hold it. So the
collectors in metrics.py read these sums instead of the home group's alone:

* the send queues' counters and gauges added up (the largest batch: the largest of any group);
* the renewers' counters added up;
* consumer lag, in-flight, ready and dead-lettered messages of each (consumer group, topic), and
  the open transactions of each topic, added up over the groups' stores, asked in parallel. A
  group whose store does not answer in time is left out of that scrape (logged); if none
  answers, the scrape has no consumer figures (the collector logs it), as with one group.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from typing import TypeVar

from services.broker.broker_groups import BrokerGroups
from services.broker.put_coalescer import CoalescerStats
from services.broker.renewal import RenewalStats
from services.store.client.model import ConsumerStats, ConsumerStatsReport

log = logging.getLogger(__name__)

MAXIMA = {"batch_messages_max"}  # fields that are a peak, not a count
Stats = TypeVar("Stats", CoalescerStats, RenewalStats)  # dataclasses of int fields


def _sum_dataclasses(kind: type[Stats], items: list[Stats]) -> Stats | None:
    if not items:
        return None
    values: dict[str, int] = {}
    for field in fields(kind):
        column = [getattr(item, field.name) for item in items]
        values[field.name] = max(column) if field.name in MAXIMA else sum(column)
    return kind(**values)


def send_queue_stats(broker_groups: BrokerGroups) -> Callable[[], CoalescerStats | None]:
    return lambda: _sum_dataclasses(CoalescerStats, [core.sink.stats() for core in broker_groups.cores()])


def renewal_stats(broker_groups: BrokerGroups) -> Callable[[], RenewalStats | None]:
    return lambda: _sum_dataclasses(
        RenewalStats, [core.renewer.stats() for core in broker_groups.cores() if core.renewer is not None]
    )


def merge_reports(reports: list[ConsumerStatsReport]) -> ConsumerStatsReport:
    """One report: each (consumer group, topic)'s figures and each topic's half messages summed."""
    rows: dict[tuple[str, str], list[int]] = {}
    halves: dict[str, int] = {}
    for report in reports:
        for row in report.consumers:
            total = rows.setdefault((row.group, row.topic), [0, 0, 0, 0])
            for i, value in enumerate((row.lag_messages, row.inflight_messages, row.ready_messages, row.dlq_messages)):
                total[i] += value
        for topic, count in report.half_messages.items():
            halves[topic] = halves.get(topic, 0) + count
    return ConsumerStatsReport(
        [ConsumerStats(group, topic, *values) for (group, topic), values in sorted(rows.items())], halves
    )


def consumer_stats(broker_groups: BrokerGroups) -> Callable[[float], ConsumerStatsReport]:
    def report(timeout_s: float) -> ConsumerStatsReport:
        cores = broker_groups.cores()
        if len(cores) == 1:
            return cores[0].store.consumer_stats_report(timeout_s)
        with ThreadPoolExecutor(max_workers=min(len(cores), 8), thread_name_prefix="group-stats") as pool:
            futures = {core.name: pool.submit(core.store.consumer_stats_report, timeout_s) for core in cores}
        reports: list[ConsumerStatsReport] = []
        failed: list[tuple[str, Exception]] = []
        for name, future in futures.items():
            try:
                reports.append(future.result())
            except Exception as exc:  # noqa: BLE001 - one group away must not blank the others
                failed.append((name, exc))
        if not reports:
            raise failed[0][1]
        for name, error in failed:
            log.warning("consumer stats of broker group %s left out of this scrape: %s", name, error)
        return merge_reports(reports)

    return report
