"""Command-line plumbing shared by the jobs: Spark session, a rich progress display, summaries.

``python -m pipeline.jobs <export|rebuild|audit|stats> ...`` (or ``python -m
pipeline.jobs.<name>``, or ``pyrmq pipeline <name>``) lands in ``main``. Each job module has a
``run(spark, ...) -> summary`` (no printing; tests call it) and a ``main(argv) -> exit code``.
The progress display polls Spark's status tracker: tasks done / total of the running stages.
Output goes through ``console`` (rich); this is the only module of the jobs that reads the
wall clock (``Stopwatch``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

console = Console()
err_console = Console(stderr=True)
JOBS = ("export", "rebuild", "audit", "stats")
PROGRESS_POLL_S = 0.5


class Stopwatch:
    def __init__(self) -> None:
        self.started = time.monotonic()

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


def now_ms() -> int:
    return int(time.time() * 1000)


def parse_time_ms(text: str | None) -> int | None:
    """Epoch ms, or an ISO-8601 time (UTC unless it says otherwise)."""
    if text is None:
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not epoch ms or an ISO-8601 time: {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--master",
        default=os.environ.get("PYRMQ_SPARK_MASTER", "local[2]"),
        help="Spark master (default local[2]; PYRMQ_SPARK_MASTER)",
    )
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark settings")
    parser.add_argument("--no-progress", action="store_true", help="no progress display")


def session(args: argparse.Namespace, app: str) -> SparkSession:
    """A SparkSession for a job, with the pipeline's sources registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import pipeline

    builder = (
        SparkSession.builder.master(args.master)
        .appName(f"pyrmq-{app}")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if args.master.startswith("local"):
        builder = (
            builder.config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
        )
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--conf expects KEY=VALUE, got {item!r}")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pipeline.register(spark)
    return spark


class RateColumn(ProgressColumn):
    """Completed units per second, e.g. ``12.5 tasks/s`` (blank until rich has a speed)."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.1f} {self.unit}/s")


@contextmanager
def progress(spark: SparkSession, description: str, enabled: bool = True) -> Iterator[None]:
    """Show tasks done / total of Spark's running stages until the block ends."""
    if not enabled:
        yield
        return
    tracker = spark.sparkContext.statusTracker()
    stop = threading.Event()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn("tasks"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(description, total=None)

        def poll() -> None:
            while not stop.wait(PROGRESS_POLL_S):
                stages = [info for s in tracker.getActiveStageIds() if (info := tracker.getStageInfo(s)) is not None]
                if stages:
                    bar.update(
                        task,
                        total=sum(s.numTasks for s in stages),
                        completed=sum(s.numCompletedTasks for s in stages),
                        description=f"{description} (stage {', '.join(str(s.stageId) for s in stages)})",
                    )

        thread = threading.Thread(target=poll, name="job-progress", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(2)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> Table:
    out = Table(title=title, title_justify="left")
    for i, header in enumerate(headers):
        out.add_column(header, justify="left" if i == 0 else "right")
    for row in rows:
        out.add_row(*(f"{v:,}" if isinstance(v, int) else f"{v:,.1f}" if isinstance(v, float) else str(v) for v in row))
    return out


def run_job(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    try:
        return main(argv)
    except KeyboardInterrupt:
        err_console.print("interrupted")
        return 130


def main(argv: list[str] | None = None) -> int:
    """``pipeline.jobs <job> [args]``: what ``pyrmq pipeline <job>`` calls."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in JOBS:
        err_console.print(f"usage: pipeline.jobs {{{'|'.join(JOBS)}}} [--help]")
        return 2
    module = importlib.import_module(f"pipeline.jobs.{argv[0]}")
    return run_job(module.main, argv[1:])
