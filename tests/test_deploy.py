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

from services.launcher.compose import (
    broker_names,
    compose_services,
    etcd_names,
    render_compose,
    scrape_targets,
    store_names,
)
from services.launcher.topology import SERVICES
from tests.support.cli import run_pyrmq
from tests.support.components import etcd_binary, require
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
from tests.support.waits import wait_until

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
ETCD_ENDPOINTS = "etcd-0:2379,etcd-1:2379,etcd-2:2379"
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
    etcds, stores, brokers = etcd_names(), store_names(), broker_names()
    helpers = ["scheduler", "txcheck", "scheduler-b", "txcheck-b"]  # each group's
    assert set(services) == {*etcds, *stores, *brokers, *helpers, "prometheus", "grafana"}
    assert len(etcds) == 3 and stores == [f"store-{i}" for i in range(3)] + [f"store-b-{i}" for i in range(3)]
    assert brokers == ["broker", "broker-1"]
    assert set(doc["volumes"]) == {f"{name}-data" for name in etcds + stores} | {"scheduler-data", "scheduler-b-data"}
    rows = {name: spec for name, spec, _ in compose_services()}
    for name, spec in rows.items():
        service = services[name]
        assert service["command"] == ["python", "-m", spec.module]
        assert all(key.startswith(f"PYRMQ_{spec.name.upper()}_") for key in service["environment"])
        assert service["healthcheck"]["test"][:3] == ["CMD", "pyrmq", "health"]
        for dependency, condition in service.get("depends_on", {}).items():
            assert dependency in services and condition == {"condition": "service_healthy"}
        if spec.name != "store":  # broker, scheduler, txcheck follow the master: etcd and every replica first
            assert service["environment"][f"PYRMQ_{spec.name.upper()}_ETCD_ENDPOINTS"] == ETCD_ENDPOINTS
            assert set(etcds + stores) <= set(service["depends_on"])
    # Two brokers, each published on its own host ports (client and remoting), which routes name;
    # every txcheck reaches both.
    assert services["broker"]["ports"] == ["8081:8081", "9876:9876", "9976:9976"]  # broker-b's own, as bound
    assert services["broker-1"]["ports"] == ["8082:8081", "9877:9876"]
    assert services["broker-1"]["environment"]["PYRMQ_BROKER_ADVERTISED_PORT"] == "8082"
    for name in brokers:
        assert services[name]["environment"]["PYRMQ_BROKER_REMOTING_PORT"] == "9876"
        assert services[name]["environment"]["PYRMQ_BROKER_REMOTING_GROUP_PORTS"] == "broker-b=9976"
    assert "PYRMQ_BROKER_REMOTING_ADVERTISED_PORT" not in services["broker"]["environment"]
    assert services["broker-1"]["environment"]["PYRMQ_BROKER_REMOTING_ADVERTISED_PORT"] == "9877"
    for suffix, group in (("", "broker-a"), ("-b", "broker-b")):
        assert services[f"scheduler{suffix}"]["volumes"] == [f"scheduler{suffix}-data:/data"]
        assert services[f"scheduler{suffix}"]["environment"]["PYRMQ_SCHEDULER_BROKER_NAME"] == group
        txcheck = services[f"txcheck{suffix}"]
        assert txcheck["environment"]["PYRMQ_TXCHECK_BROKER_NAME"] == group
        assert txcheck["environment"]["PYRMQ_TXCHECK_BROKER_ADDRESSES"] == "broker:8081,broker-1:8081"
        assert set(brokers) <= set(txcheck["depends_on"])
    # The replica set: controller mode, SYNC_MASTER, each its own volume, reached by its service name.
    for index, name in enumerate(stores):
        service = services[name]
        env = service["environment"]
        replica_id, group = index % 3, "broker-b" if name.startswith("store-b-") else "broker-a"
        assert env["PYRMQ_STORE_ETCD_ENDPOINTS"] == ETCD_ENDPOINTS and env["PYRMQ_STORE_BROKER_NAME"] == group
        assert env["PYRMQ_STORE_REPLICA_ID"] == str(replica_id) and env["PYRMQ_STORE_BROKER_ROLE"] == "SYNC_MASTER"
        assert env["PYRMQ_STORE_ADVERTISED_HOST"] == name and env["PYRMQ_STORE_PORT"] == "10911"
        assert service["volumes"] == [f"{name}-data:/data"]
        assert set(service["depends_on"]) == set(etcds)
    # etcd: a static cluster of three, each member on its own volume, healthy through etcdctl.
    cluster = ",".join(f"{name}=http://{name}:2380" for name in etcds)
    for name in etcds:
        service = services[name]
        assert re.fullmatch(r"quay\.io/coreos/etcd:v3\.5\.\d+", service["image"])  # pinned, etcd's own image
        flags = dict(flag.removeprefix("--").split("=", 1) for flag in service["command"][1:])
        assert flags["name"] == name and flags["initial-cluster"] == cluster
        assert flags["initial-cluster-state"] == "new" and flags["advertise-client-urls"] == f"http://{name}:2379"
        assert flags["initial-advertise-peer-urls"] == f"http://{name}:2380"
        assert service["volumes"] == [f"{name}-data:{flags['data-dir']}"]
        assert service["healthcheck"]["test"][0] == "CMD" and service["healthcheck"]["test"][-2:] == [
            "endpoint",
            "health",
        ]


def test_prometheus_scrapes_every_service() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {
        job["job_name"].removeprefix("pyrmq-"): job["static_configs"][0]["targets"] for job in config["scrape_configs"]
    }
    assert targets == scrape_targets()
    assert targets["store"] == [f"{name}:9101" for name in store_names()]  # each replica


def test_dockerfile_runs_as_non_root_with_a_health_check() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert re.search(r"^USER pyrmq$", text, re.M) and "HEALTHCHECK" in text and "grpc_tools.protoc" in text
    [exposed] = re.findall(r"^EXPOSE (.+)$", text, re.M)
    assert {"8081", "9876"} <= set(exposed.split())  # the client port and the remoting port


def loopback_addresses() -> dict[str, str]:
    """Each compose service's own loopback address (the whole 127.0.0.0/8 is on lo), so the
    replicas and etcd members can each bind the one port compose gives them all."""
    names = {name: f"127.0.1.{i + 1}" for i, name in enumerate(etcd_names())}
    names |= {name: f"127.0.2.{i + 1}" for i, name in enumerate(store_names())}
    names |= {name: f"127.0.0.{i + 1}" for i, name in enumerate(broker_names())}  # broker at 127.0.0.1:8081
    return names | {
        name: f"127.0.3.{i + 1}" for i, name in enumerate(["scheduler", "txcheck", "scheduler-b", "txcheck-b"])
    }


def localize(value: str, own: str, addresses: dict[str, str]) -> str:
    """A compose value with service names (and the service's own 0.0.0.0 / 127.0.0.1) replaced
    by loopback addresses."""
    value = re.sub(r"(?<![\w.-])(0\.0\.0\.0|127\.0\.0\.1)(?=:|$)", own, value)
    return re.sub(r"(?<![\w.-])([a-z]+(?:-[a-z])?(?:-\d)?)(?=:\d|,|$)", lambda m: addresses.get(m[1], m[1]), value)


def compose_waves(doc: dict, names: list[str], healthy: list[str]) -> list[list[str]]:
    """``names`` in the order compose starts them: each wave is every service whose
    ``depends_on`` (all ``service_healthy``) are healthy by then, ``healthy`` at first."""
    done, pending, waves = set(healthy), list(names), []
    while pending:
        wave = [name for name in pending if set(doc["services"][name].get("depends_on", {})) <= done]
        assert wave, f"a dependency cycle or an unknown dependency among {pending}"
        waves.append(wave)
        done |= set(wave)
        pending = [name for name in pending if name not in wave]
    return waves


def test_compose_command_lines_run_as_a_local_cluster(tmp_path: Path, processes: list[Process]) -> None:
    """Each compose service's own command line and environment (etcd's with Debian's binaries),
    with its service names pointed at loopback addresses and the volumes at temporary directories:
    the three etcd members, the six store replicas electing a master in each group, then the
    brokers, schedulers and txchecks following them, each wave started together once the one it
    depends on is healthy, as compose does; a message sent and received through the broker."""
    require("etcd")
    doc = compose()
    addresses = loopback_addresses()
    started: dict[str, Process] = {}
    members = []
    for name in etcd_names():
        own = addresses[name]
        command = [etcd_binary() if part.endswith("/etcd") else part for part in doc["services"][name]["command"]]
        command = [
            f"--data-dir={tmp_path / name}" if part.startswith("--data-dir=") else localize_urls(part, own, addresses)
            for part in command
        ]
        members.append(Process([str(part) for part in command], tmp_path))
        processes.append(members[-1])
        started[name] = members[-1]
    for name in etcd_names():  # healthy once the three have a quorum
        health = doc["services"][name]["healthcheck"]["test"][1:]
        health = [
            shutil.which("etcdctl") or "etcdctl",
            *(localize_urls(part, addresses[name], {}) for part in health[1:]),
        ]
        wait_until(
            lambda h=health, n=name: (
                subprocess.run(h, capture_output=True, timeout=10).returncode == 0
                or started[n].popen.poll() is not None
            ),
            30,
            f"{name} healthy",
        )
        assert started[name].popen.poll() is None, started[name].log()
    specs = {name: spec for name, spec, _ in compose_services()}
    waves = compose_waves(doc, list(specs), etcd_names())
    for wave in waves:
        for name in wave:
            own = addresses[name]
            command = [sys.executable if part == "python" else part for part in doc["services"][name]["command"]]
            env = {
                key: str(tmp_path / name) if value == "/data" else localize(value, own, addresses)
                for key, value in doc["services"][name]["environment"].items()
            }
            started[name] = Process(command, tmp_path, env)
            processes.append(started[name])
        for name in wave:
            ready = started[name].wait_line(READY)
            assert ready["name"] == specs[name].name
        for name in wave:
            health = [
                localize(part, addresses[name], addresses) for part in doc["services"][name]["healthcheck"]["test"]
            ]
            code, out, err = run_pyrmq(*health[2:])  # the HEALTHCHECK's pyrmq command, run in this process
            assert code == 0, out + err
            with grpc.insecure_channel(health[3]) as channel:  # every service: health and reflection
                reply = next(
                    reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
                        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10
                    )
                )
            listed = {service.name for service in reply.list_services_response.service}
            assert {"grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"} <= listed, listed
    # The operator creates the topic, as `docker compose exec broker pyrmq topic create ...` would.
    code, out, err = run_pyrmq("topic", "create", "ComposeTopic", "--type", "NORMAL")
    assert code == 0, out + err
    # Both brokers take sends, spread over both groups; each group's queues hold some.
    bodies = [f"through compose's command lines {i}".encode() for i in range(8)]
    for i, body in enumerate(bodies):
        with grpc.insecure_channel(f"{addresses[broker_names()[i % 2]]}:8081") as channel:
            send_ok(s_grpc.MessagingServiceStub(channel), message("ComposeTopic", body=body, message_id=f"C{i}"))
    got: dict[str, list[bytes]] = {"broker-a": [], "broker-b": []}
    with grpc.insecure_channel("127.0.0.1:8081") as channel:
        v2 = s_grpc.MessagingServiceStub(channel)
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < len(bodies) and time.monotonic() < deadline:
            for group in got:
                status, messages, _ = receive(v2, "ComposeTopic", group="ComposeGroup", broker=group, polling_s=1)
                assert status.code in (d.OK, d.MESSAGE_NOT_FOUND), status
                got[group] += [m.body for m in messages]
    assert sorted(got["broker-a"] + got["broker-b"]) == sorted(bodies) and all(got.values()), got
    for name in reversed(list(started)):
        code = started[name].stop(signal.SIGTERM)
        assert code == 0 or name in etcd_names(), started[name].log()  # etcd re-raises SIGTERM


def localize_urls(flag: str, own: str, addresses: dict[str, str]) -> str:
    """An etcd flag with its URLs' hosts localized (``http://etcd-0:2380`` -> ``http://127.0.1.1:2380``)."""
    return re.sub(
        r"http://([\w.-]+):",
        lambda m: f"http://{own if m[1] in ('0.0.0.0', '127.0.0.1') else addresses.get(m[1], m[1])}:",
        flag,
    )


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
        wait_until(
            lambda: any(
                'rocketmq_timing_messages{topic="DashDelay"} 1.0'
                in urllib.request.urlopen(url, timeout=10).read().decode()
                for url in urls
            ),
            30,
            "the scheduler's timing series",
        )
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
