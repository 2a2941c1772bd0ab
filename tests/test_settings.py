"""Settings (services/runtime/settings.py): defaults < TOML file < environment < command line, for every
service; unknown keys and bad values refused with their source named; the README's table is the
rendered catalogue; a service and ``pyrmq up`` started from a config file use it."""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

import grpc
import pytest
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2 as s
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc

from services.broker.__main__ import load_config as broker_config
from services.launcher.config_cli import CATALOG, markdown_table
from services.runtime import settings
from services.runtime.settings import SettingsError, coerce, format_value
from services.scheduler.__main__ import load_config as scheduler_config
from services.store.__main__ import load_config as store_config
from services.store.config import FlushMode
from services.txcheck.__main__ import load_config as txcheck_config
from tests.support.processes import Process, store_command
from tests.support.v2_requests import METADATA

README = Path(__file__).resolve().parents[1] / "README.md"


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_layers_in_order_defaults_file_environment_command_line(tmp_path: Path) -> None:
    config = write(
        tmp_path / "pyrmq.toml", '[store]\ndata_dir = "/srv/a"\nport = 1\nflush_interval_ms = 7\nmetrics_port = 2\n'
    )
    env = {"PYRMQ_STORE_PORT": "3", "PYRMQ_STORE_METRICS_PORT": "4"}
    got = store_config(["--config", str(config), "--port", "5"], environ=env)
    assert got.port == 5  # command line over environment over file
    assert got.metrics_port == 4  # environment over file
    assert got.flush_interval_ms == 7  # file over default
    assert got.flush_thorough_interval_ms == 10_000  # default
    assert got.store_root == Path("/srv/a/store") and got.store_host == "127.0.0.1:5"


def test_the_config_file_may_come_from_PYRMQ_CONFIG(tmp_path: Path) -> None:
    config = write(tmp_path / "c.toml", "[broker]\nconsumer_receive_batch_size = 64\nput_coalescing_enable = false\n")
    got = broker_config([], environ={"PYRMQ_CONFIG": str(config)})
    assert got.consumer_receive_batch_size == 64 and got.put_coalescing_enable is False


def test_set_reaches_every_setting_and_own_flags_win(tmp_path: Path) -> None:
    got = store_config(
        [
            "--data-dir",
            str(tmp_path),
            "--set",
            "flush_mode=SYNC",
            "--set",
            "warm-mapped-files=yes",
            "--set",
            "port=9",
            "--port",
            "10",
        ],
        environ={},
    )
    assert got.flush_mode is FlushMode.SYNC and got.warm_mapped_files is True and got.port == 10


def test_the_broker_auto_creates_topics_only_when_told(tmp_path: Path) -> None:
    # Off by default, as RocketMQ 5's proxy: an unknown topic is TOPIC_NOT_FOUND.
    assert broker_config([], environ={}).auto_create_topic_enable is False
    assert broker_config(["--auto-create-topic"], environ={}).auto_create_topic_enable is True
    on = {"PYRMQ_BROKER_AUTO_CREATE_TOPIC_ENABLE": "true"}
    assert broker_config([], environ=on).auto_create_topic_enable is True
    assert broker_config(["--no-auto-create-topic"], environ=on).auto_create_topic_enable is False
    with pytest.raises(SystemExit):  # one or the other
        broker_config(["--auto-create-topic", "--no-auto-create-topic"], environ={})


def test_text_values_are_read_as_the_setting_type(tmp_path: Path) -> None:
    env = {
        "PYRMQ_BROKER_CONSUMER_RETRY_DELAYS_MS": "1000, 2_000,3000",
        "PYRMQ_BROKER_VALIDATE_MESSAGE_TYPE": "off",
        "PYRMQ_BROKER_PRODUCER_BACKOFF_MULTIPLIER": "1.5",
    }
    got = broker_config([], environ=env)
    assert got.consumer_retry_delays_ms == (1000, 2000, 3000) and got.validate_message_type is False
    assert got.producer_backoff_multiplier == 1.5
    txcheck = txcheck_config(["--broker-address", "a:1", "--broker-address", "b:2,c:3"], environ={})
    assert txcheck.broker_addresses == ("a:1", "b:2", "c:3")
    scheduler = scheduler_config(
        [],
        environ={
            "PYRMQ_SCHEDULER_DATA_DIR": str(tmp_path),
            "PYRMQ_SCHEDULER_TIMER_PRECISION_MS": "500",
            "PYRMQ_SCHEDULER_TIMER_LOOKAHEAD_MS": "100",
        },
    )
    assert scheduler.root == tmp_path.resolve() / "scheduler" and scheduler.timer_precision_ms == 500


@pytest.mark.parametrize(
    "argv, env, file_text, message",
    [
        (
            [],
            {"PYRMQ_STORE_DATA_DIR": "/d", "PYRMQ_STORE_FLUSH_MOD": "SYNC"},
            None,
            r"environment PYRMQ_STORE_FLUSH_MOD: unknown setting 'flush_mod'; did you mean flush_mode\?",
        ),
        (
            [],
            {"PYRMQ_STORE_DATA_DIR": "/d"},
            "[store]\nflush_intervl_ms = 3\n",
            r"config file .*\[store\]: unknown setting 'flush_intervl_ms'; did you mean flush_interval_ms\?",
        ),
        (
            [],
            {"PYRMQ_STORE_DATA_DIR": "/d", "PYRMQ_STORE_PORT": "ten"},
            None,
            r"environment PYRMQ_STORE_PORT: port = 'ten': invalid literal",
        ),
        ([], {"PYRMQ_STORE_DATA_DIR": "/d", "PYRMQ_STORE_FLUSH_MODE": "FAST"}, None, r"not one of ASYNC, SYNC"),
        ([], {"PYRMQ_STORE_DATA_DIR": "/d", "PYRMQ_STORE_CHECK_CRC_ON_RECOVER": "maybe"}, None, r"not a boolean"),
        ([], {"PYRMQ_STORE_DATA_DIR": "/d"}, '[store]\nport = "10911"\n', r"port = '10911': not an integer"),
        ([], {"PYRMQ_STORE_DATA_DIR": "/d"}, "[store]\nport = 1.5\n", r"not an integer"),
        ([], {"PYRMQ_STORE_DATA_DIR": "/d"}, "[store\nport = 1\n", r"not valid TOML"),
        ([], {"PYRMQ_STORE_DATA_DIR": "/d"}, "store = 3\n", r"\[store\] must be a table"),
        ([], {}, None, r"store\.data_dir is required: give --data-dir, --set data_dir=\.\.\., PYRMQ_STORE_DATA_DIR"),
        (["--set", "novalue"], {"PYRMQ_STORE_DATA_DIR": "/d"}, None, r"expected KEY=VALUE"),
        (["--set", "nope=1"], {"PYRMQ_STORE_DATA_DIR": "/d"}, None, r"--set: unknown setting 'nope'"),
    ],
)
def test_bad_settings_are_refused_naming_their_source(tmp_path: Path, argv, env, file_text, message) -> None:
    if file_text is not None:
        argv = [*argv, "--config", str(write(tmp_path / "bad.toml", file_text))]
    with pytest.raises(SettingsError, match=message):
        store_config(argv, environ=env)


def test_a_missing_config_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="config file .*missing.toml"):
        broker_config(["--config", str(tmp_path / "missing.toml")], environ={})


def test_a_value_the_config_class_refuses_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must be positive"):
        txcheck_config([], environ={"PYRMQ_TXCHECK_CHECK_MAX": "0"})


def test_another_services_variables_are_not_this_ones(tmp_path: Path) -> None:
    got = txcheck_config([], environ={"PYRMQ_STORE_PORT": "1", "PYRMQ_SCHEDULER_NOPE": "x"})
    assert got.port == 10914


@pytest.mark.parametrize("service", list(CATALOG))
def test_every_setting_is_documented_and_its_default_reads_back_from_text(service: str) -> None:
    for setting in CATALOG[service].values():
        assert setting.doc, f"{service}.{setting.name} has no comment in its config class"
        if setting.default is settings.REQUIRED:
            continue
        assert coerce(setting, format_value(setting.default), "test") == setting.default, setting.name


def test_the_readme_table_is_the_rendered_catalogue() -> None:
    text = README.read_text()
    begin, end = "<!-- settings:begin (pyrmq config --markdown) -->\n", "<!-- settings:end -->"
    assert begin in text and end in text
    assert text[text.index(begin) + len(begin) : text.index(end)] == markdown_table(), (
        "regenerate the README's table: pyrmq config --markdown"
    )


def test_the_toml_example_parses_and_uncommented_is_valid(tmp_path: Path) -> None:
    from services.launcher.config_cli import toml_example

    text = []
    for line in toml_example().splitlines():
        if line.startswith("["):
            text.append(line)
        elif line.startswith("# ") and re.match(r"# \w+ = ", line):
            text.append(line[2:].replace('"..."  # required', f'"{tmp_path}"'))
    config = write(tmp_path / "all.toml", "\n".join(text) + "\n")
    assert len([line for line in text if " = " in line]) == sum(len(c) for c in CATALOG.values())
    assert store_config(["--config", str(config)], environ={}).store_root == tmp_path.resolve() / "store"
    assert broker_config(["--config", str(config)], environ={}).port == 8081
    assert scheduler_config(["--config", str(config)], environ={}).timer_precision_ms == 1000
    assert txcheck_config(["--config", str(config)], environ={}).check_max == 15


def test_a_store_process_reads_its_file_and_environment(tmp_path: Path, processes: list[Process]) -> None:
    config = write(
        tmp_path / "pyrmq.toml", f'[store]\ndata_dir = "{tmp_path / "from-file"}"\nport = 0\nmetrics_port = -1\n'
    )
    store = Process(
        [sys.executable, "-m", "services.store", "--config", str(config)], tmp_path, {"PYRMQ_STORE_FLUSH_MODE": "SYNC"}
    )
    processes.append(store)
    ready = store.wait_line(re.compile(r"^pyrmq-store ready grpc=\S+ metrics=(?P<metrics>\S+) data=(?P<data>\S+)$"))
    assert ready["data"] == str((tmp_path / "from-file" / "store").resolve()) and ready["metrics"] == "off"
    assert store.stop(signal.SIGTERM) == 0
    assert "flush SYNC" in store.log()


def test_a_service_with_a_bad_setting_exits_2_saying_why(tmp_path: Path, processes: list[Process]) -> None:
    broker = Process([sys.executable, "-m", "services.broker"], tmp_path, {"PYRMQ_BROKER_PORTT": "1"})
    processes.append(broker)
    assert broker.popen.wait(60) == 2
    assert broker.lines.get(timeout=10) is None  # stdout closed without a ready line
    assert (
        "bad configuration: environment PYRMQ_BROKER_PORTT: unknown setting 'portt'; did you mean port?"
        in broker.wait_log("did you mean")
    )


def test_pyrmq_up_passes_the_file_to_every_service(tmp_path: Path, processes: list[Process]) -> None:
    config = write(
        tmp_path / "cluster.toml",
        f'[store]\ndata_dir = "{tmp_path / "cluster"}"\nport = 0\n'
        "metrics_port = 0\n[broker]\nport = 0\nremoting_port = 0\nauto_create_topic_enable = true\n"
        "auto_create_topic_queue_nums = 3\n",
    )
    up = Process(
        [
            sys.executable,
            "-m",
            "services.launcher.cli",
            "up",
            "--config",
            str(config),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        tmp_path,
    )
    processes.append(up)
    ready = up.wait_line(
        re.compile(
            r"^pyrmq up: store grpc=\S+ metrics=\S+ data=(?P<data>\S+) .* remoting=\S+:(?P<remoting>\d+) .*"
            r"\(RocketMQ clients: endpoints (?P<clients>\S+)\)$"
        )
    )
    assert ready["data"] == str((tmp_path / "cluster" / "store").resolve())
    assert int(ready["remoting"]) not in (0, 9876)  # [broker] remoting_port = 0: any free one
    table = up.wait_line(re.compile(r"^\s+configuration:\s+(?P<file>\S+)$"))
    assert table["file"] == str(config.resolve())
    with grpc.insecure_channel(ready["clients"]) as channel:
        route = s_grpc.MessagingServiceStub(channel).QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name="FromTheFile")), metadata=METADATA, timeout=10
        )
    assert route.status.code == d.OK and len(route.message_queues) == 3
    assert up.stop(signal.SIGTERM) == 0, up.log()
    assert {p.name for p in (tmp_path / "logs").iterdir()} == {
        "store.log",
        "broker.log",
        "scheduler.log",
        "txcheck.log",
    }
    assert "store service stopped" in (tmp_path / "logs" / "store.log").read_text()


def test_json_logs_are_one_object_per_line(tmp_path: Path, processes: list[Process]) -> None:
    store = Process(
        store_command(tmp_path, metrics_port=-1),
        tmp_path,
        {"PYRMQ_STORE_LOG_FORMAT": "json"},
    )
    processes.append(store)
    store.wait_line(re.compile(r"^pyrmq-store ready "))
    assert store.stop(signal.SIGTERM) == 0
    lines = [json.loads(line) for line in store.log().splitlines() if line.startswith("{")]
    events = [line["message"] for line in lines if line["logger"] == "services.store"]
    assert all(set(line) >= {"ts", "level", "logger", "message", "service"} for line in lines)
    assert {line["service"] for line in lines} == {"store"}
    assert events[0].startswith("starting store") and "store service stopped" in events
    assert any(e.startswith("store serving gRPC") for e in events) and any(
        e.startswith("received SIGTERM") for e in events
    )


def test_a_bad_log_level_is_a_bad_configuration(tmp_path: Path, processes: list[Process]) -> None:
    txcheck = Process([sys.executable, "-m", "services.txcheck"], tmp_path, {"PYRMQ_TXCHECK_LOG_LEVEL": "LOUD"})
    processes.append(txcheck)
    assert txcheck.popen.wait(60) == 2
