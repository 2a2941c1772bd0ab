"""``pyrmq up --remoting-port``: where the brokers serve RocketMQ's remoting protocol. Without
processes: the flag, the [broker] setting and the default 9876; the port passed to every broker,
shared by ``--brokers B`` (the first one's bound port when 0), each other broker group's own remoting port; what
``up`` prints. Then once for real: ``up --brokers 2 --remoting-port 0``, a remoting client's
route, send and pull through the shared port."""

from __future__ import annotations

import argparse
import io
import json
import re
import signal
from pathlib import Path

from services.domain.remoting.codes import RequestCode, ResponseCode
from services.launcher.cli import build_parser
from services.launcher.topology import rows, service_environment
from services.launcher.up import check_shape, parse_summary, place_replicas, print_cluster, resolve_up
from tests.support.cli import run_pyrmq
from tests.support.processes import Process, pyrmq_up_command
from tests.support.remoting_client import RemotingTestClient
from tests.support.waits import wait_until

READY = re.compile(r"^pyrmq up: .*\(RocketMQ clients: endpoints (?P<clients>\S+)\)$")
NAMESRV = re.compile(r"^  remoting clients: namesrvAddr (?P<address>\S+) ")


def up_namespace(*args: str, environ: dict[str, str] | None = None) -> argparse.Namespace:
    """``pyrmq up ARGS`` parsed and resolved as ``up`` does, before anything starts."""
    ns = build_parser().parse_args(["up", *args])
    resolve_up(ns, environ or {})
    ns.broker_data_dir, ns.ready = None, {}
    return ns


def broker_environments(ns: argparse.Namespace, first_remoting: str = "127.0.0.1:40001") -> dict[str, dict[str, str]]:
    """Each broker row's environment, once the stores and the first broker are ready."""
    ns.ready = {
        "store": {"grpc": "127.0.0.1:10911"},
        "store-b": {"grpc": "127.0.0.1:11011"},
        "broker": {"grpc": "127.0.0.1:40000", "remoting": first_remoting},
    }
    return {
        label: service_environment(spec, namespace()) for label, spec, namespace in rows(ns) if spec.name == "broker"
    }


def test_the_remoting_port_is_the_flag_else_the_broker_setting_else_9876(tmp_path: Path) -> None:
    assert up_namespace().remoting_port == 9876
    assert up_namespace(environ={"PYRMQ_BROKER_REMOTING_PORT": "-1"}).remoting_port == -1
    assert up_namespace("--remoting-port", "0", environ={"PYRMQ_BROKER_REMOTING_PORT": "-1"}).remoting_port == 0
    config = tmp_path / "pyrmq.toml"
    config.write_text("[broker]\nremoting_port = 19876\n")
    assert up_namespace("--config", str(config)).remoting_port == 19876
    assert broker_environments(up_namespace())["broker"]["PYRMQ_BROKER_REMOTING_PORT"] == "9876"
    assert broker_environments(up_namespace("--remoting-port", "-1"))["broker"]["PYRMQ_BROKER_REMOTING_PORT"] == "-1"


def test_brokers_share_one_remoting_port_and_each_other_group_has_its_own() -> None:
    """As the client port: broker j > 0 takes the first one's bound port (0: the one it bound),
    SO_REUSEPORT on both. The main port is the first group's; group k's is the main one + 100 k
    on every broker, or with 0 free ones ``up`` chose, the same for every broker."""
    ns = up_namespace("--remoting-port", "0", "--brokers", "3", "--groups", "3")
    place_replicas(ns)
    shared = broker_environments(ns)
    assert list(shared) == ["broker", "broker-1", "broker-2"]
    assert shared["broker"]["PYRMQ_BROKER_REMOTING_PORT"] == "0"
    for label in ("broker-1", "broker-2"):
        assert shared[label]["PYRMQ_BROKER_REMOTING_PORT"] == "40001"
        assert shared[label]["PYRMQ_BROKER_PORT"] == "40000"
    assert all(env["PYRMQ_BROKER_REUSE_PORT"] == "True" for env in shared.values())
    [chosen] = {env["PYRMQ_BROKER_REMOTING_GROUP_PORTS"] for env in shared.values()}
    names_ports = dict(item.split("=") for item in chosen.split(","))
    assert list(names_ports) == ["broker-b", "broker-c"] and all(int(port) > 0 for port in names_ports.values())
    fixed = broker_environments(up_namespace("--brokers", "2", "--groups", "3"), first_remoting="mq.example:9876")
    assert [env["PYRMQ_BROKER_REMOTING_PORT"] for env in fixed.values()] == ["9876", "9876"]
    assert {env["PYRMQ_BROKER_REMOTING_GROUP_PORTS"] for env in fixed.values()} == {"broker-b=9976,broker-c=10076"}
    alone = broker_environments(up_namespace("--brokers", "2"))
    assert not any("PYRMQ_BROKER_REMOTING_GROUP_PORTS" in env for env in alone.values())
    off = broker_environments(up_namespace("--groups", "2", "--remoting-port", "-1"))
    assert not any("PYRMQ_BROKER_REMOTING_GROUP_PORTS" in env for env in off.values())
    assert check_shape(up_namespace("--groups", "3", "--remoting-port", "65400")) is not None
    assert check_shape(up_namespace("--remoting-port", "-2")) is not None


def test_up_says_where_remoting_clients_point() -> None:
    ns = up_namespace()
    ns.data_dir, ns.log_dir = Path("/data"), None
    broker = {"grpc": "127.0.0.1:8081", "metrics": "off", "endpoint": "127.0.0.1:8081", "tls": "plaintext"}
    ns.ready = {"broker": {**broker, "remoting": "127.0.0.1:9876"}}
    out = io.StringIO()
    print_cluster(ns, out)
    assert re.search(NAMESRV.pattern, out.getvalue(), re.M)["address"] == "127.0.0.1:9876"
    assert "mqadmin clusterList -n 127.0.0.1:9876" in out.getvalue()
    ns.ready = {"broker": broker}  # --remoting-port -1
    out = io.StringIO()
    print_cluster(ns, out)
    assert "remoting clients: off" in out.getvalue()
    ns = up_namespace("--groups", "2", "--etcd-endpoints", "127.0.0.1:2379")
    ns.data_dir, ns.log_dir = Path("/data"), None
    ns.ready = {"broker": {**broker, "remoting": "127.0.0.1:9876"}}
    out = io.StringIO()
    print_cluster(ns, out)
    assert "remoting groups:  the first group on that port, broker-b on port 9976" in out.getvalue()
    code, help_text, _ = run_pyrmq("up", "--help")
    assert code == 0 and "--remoting-port N" in help_text and "this one + 100 k" in " ".join(help_text.split())


def test_two_brokers_serve_remoting_clients_on_one_port(tmp_path: Path, processes: list[Process]) -> None:
    up = Process(
        pyrmq_up_command(
            tmp_path / "data", "--brokers", "2", "--create-topic", "UpRemoting", metrics_port=-1, remoting_port=0
        ),
        tmp_path,
    )
    processes.append(up)
    lines = parse_summary(up.wait_line(READY).group(0))
    address = lines["broker"]["remoting"]
    assert lines["broker-1"]["remoting"] == address and not address.endswith(":0")
    assert up.wait_line(NAMESRV)["address"] == address
    with RemotingTestClient(address) as first, RemotingTestClient(address) as second:
        route = first.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "UpRemoting"})
        assert route.code == ResponseCode.SUCCESS, route.remark
        assert {json.dumps(data["brokerAddrs"]) for data in json.loads(route.body)["brokerDatas"]} == {
            json.dumps({"0": address})
        }
        sent = first.send_v2("UpRemoting", b"through pyrmq up", {"UNIQ_KEY": "UPREM1"}, 3)
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        pulled = []  # through the second connection: maybe the other broker; once dispatched

        def pull() -> bool:
            pulled[:] = [second.pull("UpRemotingGroup", "UpRemoting", 3, 0)]
            return pulled[0].code == ResponseCode.SUCCESS

        wait_until(pull, 20, what="the message pulled", describe=lambda: pulled[0].remark)
        assert b"through pyrmq up" in pulled[0].body
    assert up.stop(signal.SIGTERM) == 0, up.log()
