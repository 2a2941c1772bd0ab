"""``pyrmq send``, ``consume`` and ``bench`` end to end, through ``services.launcher.cli.main`` in this
process (and once as ``python -m services.launcher.cli`` beside it), against a real cluster: ``pyrmq up``
(store, broker, scheduler, txcheck) on free loopback ports. One cluster for the module, so each
test creates its own topic (the broker does not create topics on demand) and uses its own group
names."""

from __future__ import annotations

import io
import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.launcher.cli import main
from tests.support.processes import Process, pyrmq_up_command
from tests.support.topics import create_topics_at

ROOT = Path(__file__).resolve().parents[1]
UP_READY = re.compile(r"^pyrmq up: store grpc=(?P<store>\S+) .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$")


@dataclass(frozen=True)
class Cluster:
    endpoint: str  # the broker of `pyrmq up`

    def topic(self, name: str) -> None:
        """Create the topic (MIXED: any message type), as `pyrmq topic create` does."""
        create_topics_at(self.endpoint, name)


INVISIBLE_S_MIN = 2  # the broker's shortest invisible time here (10 s by default): redelivery tests wait less


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    data_dir = tmp_path_factory.mktemp("client-cli") / "data"
    up = Process(
        pyrmq_up_command(data_dir, metrics_port=-1),
        ROOT,
        {"PYRMQ_BROKER_INVISIBLE_DURATION_MS_MIN": str(INVISIBLE_S_MIN * 1000)},
    )
    try:
        yield Cluster(up.wait_line(UP_READY)["clients"])
    finally:
        if up.popen.poll() is None:
            assert up.stop(signal.SIGTERM) == 0, up.log()
        up.kill()


def pyrmq(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``pyrmq ARGS``."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def ok(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, err = pyrmq(capsys, *args)
    assert code == 0, err
    return out


def ok_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    return json.loads(ok(capsys, *args, "--json"))


def fails(capsys: pytest.CaptureFixture[str], code: int, *args: str) -> str:
    """The one-line error of a command that must exit with ``code`` (argparse's usage aside)."""
    with pytest.raises(SystemExit) as exited:  # argparse errors exit; the commands return
        raise SystemExit(main(list(args)))
    out, err = capsys.readouterr()
    assert exited.value.code == code, (out, err)
    assert out == ""
    assert err.startswith("usage:") or len(err.strip().splitlines()) == 1, err
    return err.strip().splitlines()[-1]


def test_send_then_consume_returns_bodies_tags_keys_and_properties(cluster: Cluster, capsys) -> None:
    cluster.topic("CliSend")
    sent = ok_json(
        capsys,
        "send",
        "CliSend",
        "hello {n}",
        "--tag",
        "TagA",
        "--key",
        "order-{n}",
        "--key",
        "k2",
        "--property",
        "color=red",
        "--property",
        "size=3",
        "--count",
        "3",
        "--endpoint",
        cluster.endpoint,
    )
    assert sent["topic"] == "CliSend" and len(sent["messages"]) == 3
    ids = [m["message_id"] for m in sent["messages"]]
    assert len(set(ids)) == 3 and all(re.fullmatch(r"01[0-9A-F]{32}", i) for i in ids)
    assert all(isinstance(m["queue_id"], int) and m["queue_offset"] >= 0 for m in sent["messages"])

    got = ok_json(capsys, "consume", "CliSend", "--group", "CliSendGroup", "--max", "3", "--endpoint", cluster.endpoint)
    assert (got["topic"], got["group"], got["acked"]) == ("CliSend", "CliSendGroup", True)
    by_id = {m["message_id"]: m for m in got["messages"]}
    assert set(by_id) == set(ids)
    for n, m in enumerate(sent["messages"], start=1):
        received = by_id[m["message_id"]]
        assert received["body_text"] == f"hello {n}" and received["tag"] == "TagA"
        assert received["keys"] == [f"order-{n}", "k2"]
        assert received["properties"] == {"color": "red", "size": "3"}
        assert (received["queue_id"], received["queue_offset"]) == (m["queue_id"], m["queue_offset"])
        assert received["delivery_attempt"] == 1 and received["message_type"] == "NORMAL"
        assert received["acked"] is True


def test_priority_sends_are_consumed_highest_first(cluster: Cluster, capsys) -> None:
    create_topics_at(cluster.endpoint, "CliPriority", message_type="PRIORITY", queue_nums=10)
    for priority in (2, 9, 0, 5):
        sent = ok_json(
            capsys, "send", "CliPriority", f"p{priority}", "--priority", str(priority), "--endpoint", cluster.endpoint
        )
        assert sent["messages"][0]["queue_id"] == priority  # a PRIORITY topic's queue is the level
    got = ok_json(
        capsys, "consume", "CliPriority", "--group", "CliPriorityGroup", "--max", "4", "--endpoint", cluster.endpoint
    )
    assert [(m["priority"], m["message_type"]) for m in got["messages"]] == [
        (9, "PRIORITY"),
        (5, "PRIORITY"),
        (2, "PRIORITY"),
        (0, "PRIORITY"),
    ]
    assert "--priority (PRIORITY) is exclusive" in fails(
        capsys, 2, "send", "CliPriority", "x", "--priority", "1", "--group", "g", "--endpoint", cluster.endpoint
    )


def test_people_get_one_line_per_message(cluster: Cluster, capsys, monkeypatch) -> None:
    cluster.topic("CliText")
    table = ok(capsys, "send", "CliText", "first", "--tag", "TagT", "--endpoint", cluster.endpoint)
    [header, _, row] = table.splitlines()
    assert header.split() == ["MESSAGE", "ID", "QUEUE", "OFFSET"]
    message_id, queue, offset = row.split()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\x00\xffbinary")))
    ok(capsys, "send", "CliText", "-", "--endpoint", cluster.endpoint)

    lines = ok(
        capsys, "consume", "CliText", "--group", "CliTextGroup", "--max", "2", "--endpoint", cluster.endpoint
    ).splitlines()
    assert len(lines) == 3 and lines[-1] == "2 messages received and acked."
    [text_line] = [line for line in lines if line.startswith(message_id)]
    assert f"queue={queue}  offset={offset}  attempt=1  tag=TagT" in text_line and text_line.endswith("body: first")
    [binary_line] = [line for line in lines[:2] if line != text_line]
    assert binary_line.endswith("body: base64:AP9iaW5hcnk= (8 bytes)")


def test_tag_and_sql_filters(cluster: Cluster, capsys) -> None:
    cluster.topic("CliFilter")
    for tag, color in (("TagA", "red"), ("TagB", "red"), ("TagA", "blue"), ("TagC", "blue")):
        ok(
            capsys,
            "send",
            "CliFilter",
            f"{tag} {color}",
            "--tag",
            tag,
            "--property",
            f"color={color}",
            "--endpoint",
            cluster.endpoint,
        )
    tagged = ok_json(
        capsys,
        "consume",
        "CliFilter",
        "--group",
        "CliTags",
        "--tag-expression",
        "TagA || TagC",
        "--max",
        "3",
        "--endpoint",
        cluster.endpoint,
    )["messages"]
    assert sorted(m["body_text"] for m in tagged) == ["TagA blue", "TagA red", "TagC blue"]
    red = ok_json(
        capsys,
        "consume",
        "CliFilter",
        "--group",
        "CliSql",
        "--sql",
        "color = 'red' AND TAGS <> 'TagA'",
        "--max",
        "1",
        "--endpoint",
        cluster.endpoint,
    )["messages"]
    assert [m["body_text"] for m in red] == ["TagB red"]
    assert fails(
        capsys, 2, "consume", "CliFilter", "--group", "CliSql", "--sql", "color =", "--endpoint", cluster.endpoint
    ).startswith("pyrmq: error: ILLEGAL_FILTER_EXPRESSION: ")


def test_fifo_message_group_keeps_order_on_one_queue(cluster: Cluster, capsys) -> None:
    cluster.topic("CliFifo")
    ok(capsys, "group", "create", "CliFifoGroup", "--fifo", "--endpoint", cluster.endpoint)
    sent = ok_json(
        capsys, "send", "CliFifo", "step {n}", "--group", "order-7", "--count", "5", "--endpoint", cluster.endpoint
    )["messages"]
    assert len({m["queue_id"] for m in sent}) == 1
    assert [m["queue_offset"] for m in sent] == list(range(sent[0]["queue_offset"], sent[0]["queue_offset"] + 5))
    got = ok_json(
        capsys, "consume", "CliFifo", "--group", "CliFifoGroup", "--max", "5", "--endpoint", cluster.endpoint
    )["messages"]
    assert [m["body_text"] for m in got] == [f"step {n}" for n in range(1, 6)]
    assert {(m["message_group"], m["message_type"], m["queue_id"]) for m in got} == {
        ("order-7", "FIFO", sent[0]["queue_id"])
    }


def test_delayed_message_arrives_not_before_its_time(cluster: Cluster, capsys) -> None:
    cluster.topic("CliDelay")
    [sent] = ok_json(capsys, "send", "CliDelay", "later", "--delay-ms", "2000", "--endpoint", cluster.endpoint)[
        "messages"
    ]
    assert sent["queue_id"] is None and sent["queue_offset"] is None and sent["recall_handle"]
    deliver_at_ms = sent["deliver_at_ms"]
    [got] = ok_json(
        capsys,
        "consume",
        "CliDelay",
        "--group",
        "CliDelayGroup",
        "--max",
        "1",
        "--wait-seconds",
        "15",
        "--endpoint",
        cluster.endpoint,
    )["messages"]
    assert time.time() * 1000 >= deliver_at_ms
    assert got["store_timestamp_ms"] >= deliver_at_ms - 1000  # put back by the scheduler on its tick, never early
    assert (got["message_id"], got["message_type"], got["delivery_timestamp_ms"]) == (
        sent["message_id"],
        "DELAY",
        deliver_at_ms,
    )


def test_no_ack_redelivers_after_the_invisible_time(cluster: Cluster, capsys) -> None:
    cluster.topic("CliNoAck")
    [sent] = ok_json(capsys, "send", "CliNoAck", "again", "--endpoint", cluster.endpoint)["messages"]
    first = ok_json(
        capsys,
        "consume",
        "CliNoAck",
        "--group",
        "CliNoAckGroup",
        "--max",
        "1",
        "--no-ack",
        "--invisible-seconds",
        str(INVISIBLE_S_MIN),
        "--endpoint",
        cluster.endpoint,
    )
    assert first["acked"] is False and first["messages"][0]["acked"] is False
    assert first["messages"][0]["delivery_attempt"] == 1
    started = time.monotonic()
    [again] = ok_json(
        capsys,
        "consume",
        "CliNoAck",
        "--group",
        "CliNoAckGroup",
        "--max",
        "1",
        "--wait-seconds",
        "20",
        "--endpoint",
        cluster.endpoint,
    )["messages"]
    assert time.monotonic() - started > INVISIBLE_S_MIN - 1  # hidden until the invisible time ended
    assert (again["message_id"], again["delivery_attempt"], again["acked"]) == (sent["message_id"], 2, True)


def test_consume_stops_when_nothing_arrives(cluster: Cluster, capsys) -> None:
    cluster.topic("CliEmpty")
    # Both consumes wait the broker's shortest poll (5 s): the --json one runs meanwhile, as
    # `python -m services.launcher.cli` in a child process.
    as_json = subprocess.Popen(
        [sys.executable, "-m", "services.launcher.cli", "consume", "CliEmpty", "--group", "CliEmptyGroup"]
        + ["--wait-seconds", "0", "--endpoint", cluster.endpoint, "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    assert (
        ok(
            capsys,
            "consume",
            "CliEmpty",
            "--group",
            "CliEmptyGroup",
            "--wait-seconds",
            "1",
            "--endpoint",
            cluster.endpoint,
        )
        == "No message arrived within 5 s.\n"
    )  # the broker's shortest poll
    assert time.monotonic() - started < 15
    out, err = as_json.communicate(timeout=60)
    assert as_json.returncode == 0, err
    assert json.loads(out)["messages"] == []


def test_error_exit_codes(cluster: Cluster, capsys, tmp_path) -> None:
    cluster.topic("CliErr")
    assert fails(capsys, 4, "send", "CliErr", "x", "--endpoint", "127.0.0.1:1", "--timeout", "5").startswith(
        "pyrmq: error: 127.0.0.1:1: UNAVAILABLE"
    )
    assert fails(capsys, 4, "consume", "CliErr", "--group", "G", "--endpoint", "127.0.0.1:1").startswith(
        "pyrmq: error: 127.0.0.1:1: UNAVAILABLE"
    )
    assert fails(capsys, 2, "send", "bad/name", "x", "--endpoint", cluster.endpoint).startswith(
        "pyrmq: error: ILLEGAL_TOPIC: The specified topic: bad/name, contains illegal characters"
    )
    assert "ILLEGAL_MESSAGE_TAG" in fails(
        capsys, 2, "send", "CliErr", "x", "--tag", "a|b", "--endpoint", cluster.endpoint
    )
    assert "ILLEGAL_INVISIBLE_TIME" in fails(  # 1 s: below the broker's minimum (INVISIBLE_S_MIN)
        capsys, 2, "consume", "CliErr", "--group", "G", "--invisible-seconds", "1", "--endpoint", cluster.endpoint
    )
    assert fails(capsys, 3, "send", "CliNowhere", "x", "--endpoint", cluster.endpoint) == (
        "pyrmq: error: topic CliNowhere does not exist, and the broker does not create topics on demand "
        "(pyrmq topic create CliNowhere --type NORMAL)"
    )
    assert fails(capsys, 3, "consume", "CliNowhere", "--group", "G", "--endpoint", cluster.endpoint).startswith(
        "pyrmq: error: topic CliNowhere does not exist"
    )
    # Usage errors: argparse's usage and its message, exit 2.
    assert "BODY" in fails(capsys, 2, "send", "CliErr", "--endpoint", cluster.endpoint)
    assert "exclusive" in fails(capsys, 2, "send", "CliErr", "x", "--group", "g", "--delay-ms", "5")
    assert "not KEY=VALUE" in fails(capsys, 2, "send", "CliErr", "x", "--property", "novalue")
    assert "cannot read" in fails(capsys, 2, "send", "CliErr", "--file", str(tmp_path / "missing"))
    assert "not allowed with" in fails(
        capsys, 2, "consume", "CliErr", "--group", "G", "--sql", "a = 1", "--tag-expression", "A"
    )


def test_file_body_and_deliver_at_in_the_past(cluster: Cluster, capsys, tmp_path) -> None:
    cluster.topic("CliFile")
    body = tmp_path / "body.json"
    body.write_text('{"order": 7}')
    [sent] = ok_json(
        capsys,
        "send",
        "CliFile",
        "--file",
        str(body),
        "--deliver-at",
        "2020-01-01T00:00:00+00:00",
        "--endpoint",
        cluster.endpoint,
    )["messages"]
    assert sent["deliver_at_ms"] == 1_577_836_800_000 and sent["recall_handle"] is None  # due: stored at once
    [got] = ok_json(
        capsys, "consume", "CliFile", "--group", "CliFileGroup", "--max", "1", "--endpoint", cluster.endpoint
    )["messages"]
    assert got["body_text"] == '{"order": 7}' and got["queue_id"] == sent["queue_id"]


def test_bench_sends_and_consumes_every_message(cluster: Cluster, capsys) -> None:
    cluster.topic("CliBench")
    args = (
        "bench",
        "--topic",
        "CliBench",
        "--group",
        "CliBenchGroup",
        "--messages",
        "300",
        "--body-bytes",
        "100",
        "--in-flight",
        "3",
        "--batch",
        "4",
        "--endpoint",
        cluster.endpoint,
    )
    result = ok_json(capsys, *args)
    assert result["messages"] == result["sent"] == result["consumed"] == 300
    for phase in ("send", "consume"):
        figures = result[phase]
        assert figures["messages"] == 300 and figures["seconds"] > 0 and figures["msgs_per_s"] > 0
        assert 0 < figures["latency_ms"]["p50"] <= figures["latency_ms"]["p99"]
    assert result["send"]["requests"] == 75

    table = ok(capsys, *args, "--messages", "40", "--no-consume")
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.strip()}
    assert rows["PHASE"] == ["PHASE", "MESSAGES", "SECONDS", "MSGS/S", "MIB/S", "P50", "MS", "P99", "MS"]
    assert rows["send"][1] == "40" and "consume" not in rows
    assert "not consumed." in table
    # The earlier run's leftovers are not this run's: a consuming run counts only its own.
    again = ok_json(capsys, *args, "--messages", "20")
    assert again["consumed"] == 20
