"""deploy/: the compose file is what the service table renders, parses as compose expects, and its
services' own command lines make a working cluster when run as local processes on loopback."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import jsonschema
import yaml
from apache.rocketmq.v2 import definition_pb2 as d
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc
from google.protobuf.timestamp_pb2 import Timestamp
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from services.compose import render_compose, scrape_targets
from services.topology import SERVICES
from tests.support.processes import Process, pyrmq_up_command
from tests.support.topics import create_topics_at
from tests.support.v2_requests import (
    Stream,
    end,
    message,
    producer_settings,
    push_consumer_settings,
    receive,
    send_ok,
)

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
READY = re.compile(r"^pyrmq-(?P<name>\w+) ready ")


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_the_compose_file_is_the_rendered_service_table() -> None:
    assert (DEPLOY / "docker-compose.yml").read_text() == render_compose(), (
        "regenerate it: pyrmq compose > deploy/docker-compose.yml"
    )


def test_compose_file_is_valid_against_the_compose_specification() -> None:
    """The Compose Specification's own JSON schema (tests/data/compose-spec.json, from
    compose-spec/compose-spec@170098ba, Apache-2.0), since CI has no Docker engine."""
    schema = json.loads((Path(__file__).parent / "data" / "compose-spec.json").read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose()), key=lambda e: list(e.path))
    assert not errors, [f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors]
    broken = dict(compose(), services={"store": {"image": "x", "comand": ["python"]}})  # a typo
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))  # the schema does check


def test_docker_compose_config_accepts_the_file_where_installed(tmp_path: Path) -> None:
    """`docker compose config` / `docker-compose config` (Debian's package) when present; the
    YAML must at least round-trip to the same document either way."""
    assert yaml.safe_load(yaml.safe_dump(compose())) == compose()
    for command in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(command[0]) and subprocess.run([*command, "version"], capture_output=True).returncode == 0:
            result = subprocess.run(
                [*command, "-f", str(DEPLOY / "docker-compose.yml"), "config", "--quiet"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0, result.stderr


def test_compose_structure() -> None:
    doc = compose()
    services = doc["services"]
    assert set(services) == {spec.name for spec in SERVICES} | {"prometheus", "grafana"}
    assert "pyrmq-data" in doc["volumes"]
    for spec in SERVICES:
        service = services[spec.name]
        assert service["command"] == ["python", "-m", spec.module]
        assert all(name.startswith(f"PYRMQ_{spec.name.upper()}_") for name in service["environment"])
        assert service["healthcheck"]["test"][:3] == ["CMD", "pyrmq", "health"]
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services and condition == {"condition": "service_healthy"}
    assert services["broker"]["ports"] == ["8081-8084:8081"]  # `--scale broker=N` publishes each one
    assert services["store"]["volumes"] == ["pyrmq-data:/data"]


def test_prometheus_scrapes_every_service() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {}
    for job in config["scrape_configs"]:
        if "dns_sd_configs" in job:  # every replica of a scaled service (docker's DNS answers them all)
            sd = job["dns_sd_configs"][0]
            assert sd["type"] == "A"
            targets[job["job_name"].removeprefix("pyrmq-")] = f"{sd['names'][0]}:{sd['port']}"
        else:
            targets[job["job_name"].removeprefix("pyrmq-")] = job["static_configs"][0]["targets"][0]
    assert targets == scrape_targets()


def test_dockerfile_runs_as_non_root_with_a_health_check() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert re.search(r"^USER pyrmq$", text, re.M) and "HEALTHCHECK" in text and "grpc_tools.protoc" in text


def test_compose_command_lines_run_as_a_local_cluster(tmp_path: Path, processes: list[Process]) -> None:
    """Each compose service's own command line and environment, with its service names pointed
    at 127.0.0.1 and the volume at a temporary directory."""
    doc = compose()
    started = {}
    for spec in SERVICES:  # compose starts them in dependency order, as the table lists them
        command = [sys.executable if part == "python" else part for part in doc["services"][spec.name]["command"]]
        env = {
            name: str(tmp_path / "data")
            if value == "/data"
            else re.sub(r"^(store|broker|0\.0\.0\.0)(?=:|$)", "127.0.0.1", value)
            for name, value in doc["services"][spec.name]["environment"].items()
        }
        process = Process(command, tmp_path, env)
        processes.append(process)
        ready = process.wait_line(READY)
        assert ready["name"] == spec.name
        started[spec.name] = process
        health = doc["services"][spec.name]["healthcheck"]["test"]
        checked = Process([sys.executable, "-m", "services.cli", *health[2:]], tmp_path)
        assert checked.popen.wait(60) == 0, checked.log()
        with grpc.insecure_channel(health[3]) as channel:  # every service: health and reflection
            reply = next(
                reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                    iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
                )
            )
        listed = {service.name for service in reply.list_services_response.service}
        assert {"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= listed, listed
    # The operator creates the topic, as `docker compose exec broker pyrmq topic create ...` would.
    create = Process(
        [sys.executable, "-m", "services.cli", "topic", "create", "ComposeTopic", "--type", "NORMAL"], tmp_path
    )
    assert create.popen.wait(60) == 0, create.log()
    with grpc.insecure_channel("127.0.0.1:8081") as channel:
        v2 = s_grpc.MessagingServiceStub(channel)
        send_ok(v2, message("ComposeTopic", body=b"through compose's command lines"))
        status, got, _ = receive(v2, "ComposeTopic", group="ComposeGroup")
        assert status.code == d.OK and [m.body for m in got] == [b"through compose's command lines"]
    for spec in reversed(SERVICES):
        assert started[spec.name].stop(signal.SIGTERM) == 0, started[spec.name].log()


def dashboard_metrics() -> set[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "pyrmq.json").read_text())
    assert dashboard["uid"] and dashboard["panels"]
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    return {name for expr in exprs for name in re.findall(r"\b(?:rocketmq|pyrmq)_[a-z_]+", expr)}


def test_grafana_provisioning_points_at_the_dashboard_and_prometheus() -> None:
    source = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    [datasource] = source["datasources"]
    assert datasource["url"] == "http://prometheus:9090" and datasource["uid"] == "pyrmq-prometheus"
    dashboards = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "pyrmq.yml").read_text())
    assert dashboards["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    assert len(dashboard_metrics()) >= 15


def test_every_metric_the_dashboard_queries_is_exported(tmp_path: Path, processes: list[Process]) -> None:
    up = Process(
        pyrmq_up_command(tmp_path / "data"),
        tmp_path,
    )
    processes.append(up)
    ready = up.wait_line(re.compile(r"^pyrmq up: .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$"))
    urls = re.findall(r"metrics=(http\S+)", ready.group(0))
    assert len(urls) == len(SERVICES)
    create_topics_at(ready["clients"], "DashTopic")
    create_topics_at(ready["clients"], "DashTx", message_type="TRANSACTION")
    create_topics_at(ready["clients"], "DashDelay", message_type="DELAY")
    with grpc.insecure_channel(ready["clients"]) as channel:  # traffic, so per-topic series exist
        v2 = s_grpc.MessagingServiceStub(channel)
        send_ok(v2, message("DashTopic", body=b"x", message_id="DASH1"), message("DashTopic", message_id="DASH2"))
        got = []
        while len(got) < 1:
            got += receive(v2, "DashTopic", group="DashGroup", batch_size=1)[1]
        for tid, resolution in (("DASHC", d.COMMIT), ("DASHR", d.ROLLBACK)):  # transaction results
            send_ok(v2, message("DashTx", message_id=tid, message_type=d.TRANSACTION))
            assert end(v2, "DashTx", tid, resolution).status.code == d.OK
        # A timer an hour ahead, so rocketmq_timing_messages has a series once the scheduler enqueued it.
        hour_ahead = Timestamp(seconds=int(time.time()) + 3600)
        send_ok(v2, message("DashDelay", message_id="DASHT", message_type=d.DELAY, delivery_timestamp=hour_ahead))
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(
            'rocketmq_timing_messages{topic="DashDelay"} 1.0' in urllib.request.urlopen(url, timeout=10).read().decode()
            for url in urls
        ):
            time.sleep(0.2)
        # Connected clients, so the connection gauges have series: a producer and a consumer.
        streams = [
            Stream(v2, metadata=(("x-mq-client-id", client_id),)) for client_id in ("dash-producer", "dash-consumer")
        ]
        assert streams[0].send(producer_settings("DashTopic")).status.code == d.OK
        assert streams[1].send(push_consumer_settings("DashGroup", "DashTopic")).status.code == d.OK
        exported = "\n".join(urllib.request.urlopen(url, timeout=10).read().decode() for url in urls)
        for stream in streams:
            stream.call.cancel()
    names = set(re.findall(r"^([a-z_:]+)(?:\{| )", exported, re.M))
    missing = sorted(metric for metric in dashboard_metrics() if metric not in names)
    assert not missing, missing
    assert up.stop(signal.SIGTERM) == 0, up.log()
