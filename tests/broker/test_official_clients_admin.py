"""The official rocketmq-python-client, unchanged, seen by `pyrmq client list` and asked by
`pyrmq client stack`: it shows up with language PYTHON and its version, and (5.1.2 has no
handler for PrintThreadStackTraceCommand) the stack command times out with a clear error."""

from __future__ import annotations

import json
import time
from importlib import metadata

import grpc
import pytest
from pyrmq.admin.v1 import admin_pb2 as pb
from pyrmq.admin.v1 import admin_pb2_grpc as pb_grpc

from tests.support.cli import pyrmq
from tests.support.official_client import Client

pytestmark = pytest.mark.needs("rocketmq-python-client")


def test_python_producer_is_listed_and_does_not_answer_a_stack_command(broker, tmp_path):
    endpoint = f"127.0.0.1:{broker.port}"
    with grpc.insecure_channel(endpoint) as channel:
        pb_grpc.AdminStub(channel).CreateTopic(pb.CreateTopicRequest(name="PyListTopic", message_type=pb.NORMAL))
    client = Client(
        tmp_path,
        {
            "endpoint": endpoint,
            "topics": ["PyListTopic"],
            "messages": [{"topic": "PyListTopic", "body": "hello"}],
            "linger_s": 60,
        },
    )
    try:
        sent = client.next_line("ok")
        assert sent["ok"] is True, sent  # started, settings applied, one message sent
        deadline_s = time.monotonic() + 20
        listed: list[dict] = []
        while not listed and time.monotonic() < deadline_s:
            done = pyrmq("client", "list", "--endpoint", endpoint, "--json")
            assert done.returncode == 0, done.stderr
            listed = json.loads(done.stdout)["clients"]
        [python] = listed
        assert python["client_type"] == "PRODUCER" and python["topics"] == ["PyListTopic"] and python["group"] == ""
        assert python["language"] == "PYTHON"
        assert python["version"] == metadata.version("rocketmq-python-client")
        assert python["address"].startswith("127.0.0.1:")

        stack = pyrmq("client", "stack", python["client_id"], "--endpoint", endpoint, "--timeout", "2")
        assert stack.returncode == 4, (stack.stdout, stack.stderr)
        assert "(PYTHON) did not answer PrintThreadStackTraceCommand within 2 s" in stack.stderr
        assert pyrmq("client", "list", "--endpoint", endpoint).stdout.count("PYTHON") == 1  # still connected
    finally:
        client.stop()
