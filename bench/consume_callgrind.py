"""Instructions per consumed message in the broker and the store, counted by valgrind's callgrind.

Wall-clock figures on this 2-core machine move by up to 30 % between runs; instruction counts do
not (the same binary and inputs give the same count within about 2 %, whatever else runs). This
runs the store and the broker under ``valgrind --tool=callgrind`` twice:

* ``sends``: the sends of broker_bench's consume scenario (whole requests of 32, one in flight)
  and its warm-up receive of 320, then stop;
* ``consume``: the same, then ``--messages`` received in batches of 32 and acked per batch by
  one loop (ReceiveMessage + AckMessage, as broker_bench's consume).

The difference between the two is the consume phase (process start-up, imports and sends cancel
out); divided by the messages consumed it gives instructions per message. The first row, the
sends run, also shows what start-up and the sends cost.

    python bench/consume_callgrind.py --messages 2000
    python bench/consume_callgrind.py --messages 2000 --root /tmp/base   # another checkout's services

Under valgrind the services run ~50x slower, so the broker's store-call and send timeouts are
raised (PYRMQ_BROKER_STORE_RPC_TIMEOUT_MS, PYRMQ_BROKER_SEND_TIMEOUT_MS); one send in flight keeps
its put queue from refusing sends (TOO_MANY_REQUESTS).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import broker_bench as bb  # noqa: E402
import grpc  # noqa: E402
from apache.rocketmq.v2 import definition_pb2 as d  # noqa: E402
from apache.rocketmq.v2 import service_pb2 as s  # noqa: E402
from apache.rocketmq.v2 import service_pb2_grpc as s_grpc  # noqa: E402
from google.protobuf.duration_pb2 import Duration  # noqa: E402

COLLECTED = re.compile(r"Collected : (\d+)")
BATCH = 32
WARM_UP = 320


def run(root: Path, out: Path, messages: int, consume: bool) -> tuple[int, int, int]:
    """(broker instructions, store instructions, messages consumed) of one run."""
    out.mkdir(parents=True, exist_ok=True)

    def start(args: list[str]) -> tuple[subprocess.Popen, re.Match[str]]:
        name = args[0].split(".")[-1]
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/{name}.%p", sys.executable, "-m", *args],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=open(out / f"{name}.log", "w"),  # the child holds it
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": str(root),
                "PYRMQ_BROKER_STORE_RPC_TIMEOUT_MS": "300000",
                "PYRMQ_BROKER_SEND_TIMEOUT_MS": "300000",
            },
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = bb.READY.search(line)
        if match is None:
            proc.kill()
            raise SystemExit(f"{args[0]} did not start under valgrind: {line!r} (see {out}/{name}.log)")
        return proc, match

    bb.start = start
    consumed = 0
    with bb.cluster([]) as cluster, grpc.insecure_channel(cluster.endpoint) as channel:
        stub = s_grpc.MessagingServiceStub(channel)
        sends = -(-(messages + WARM_UP + BATCH) // BATCH) * BATCH
        bb.send_load(stub, sends, 1, BATCH, b"x" * 1024)
        bb.consume_load(stub, WARM_UP)
        if consume:
            consumed = consume_all(stub, messages)
    return instructions(out / "broker.log"), instructions(out / "store.log"), consumed


def consume_all(stub: s_grpc.MessagingServiceStub, n: int) -> int:
    request = s.ReceiveMessageRequest(
        group=d.Resource(name=bb.GROUP),
        message_queue=d.MessageQueue(topic=d.Resource(name=bb.TOPIC), id=-1),
        filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        batch_size=BATCH,
        invisible_duration=Duration(seconds=600),
        long_polling_timeout=Duration(seconds=20),
        auto_renew=False,
    )
    got = 0
    while got < n:
        messages = [
            r.message for r in stub.ReceiveMessage(request, metadata=bb.METADATA, timeout=120) if r.HasField("message")
        ]
        if not messages:
            raise SystemExit(f"consume stalled after {got} of {n}")
        entries = [
            s.AckMessageEntry(
                message_id=m.system_properties.message_id, receipt_handle=m.system_properties.receipt_handle
            )
            for m in messages
        ]
        ack = stub.AckMessage(
            s.AckMessageRequest(group=request.group, topic=d.Resource(name=bb.TOPIC), entries=entries),
            metadata=bb.METADATA,
            timeout=120,
        )
        if ack.status.code != d.OK:
            raise SystemExit(f"ack failed: {ack.status}")
        got += len(messages)
    return got


def instructions(log: Path) -> int:
    """The total valgrind printed at exit (the process was stopped with SIGTERM and exited)."""
    for _ in range(100):
        match = COLLECTED.search(log.read_text())
        if match:
            return int(match.group(1))
        time.sleep(0.1)
    raise SystemExit(f"no instruction count in {log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--root", type=Path, default=HERE.parent, help="the checkout whose services run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="consume-callgrind-") as tmp:
        sends = run(args.root, Path(tmp) / "sends", args.messages, consume=False)
        consume = run(args.root, Path(tmp) / "consume", args.messages, consume=True)
    n = consume[2]
    print(f"{args.root}: sends run broker {sends[0]:,} store {sends[1]:,} instructions")
    print(f"{args.root}: consume run broker {consume[0]:,} store {consume[1]:,} instructions ({n} consumed)")
    print(
        f"consume phase per message: broker {(consume[0] - sends[0]) / n:,.0f}, "
        f"store {(consume[1] - sends[1]) / n:,.0f} instructions"
    )


if __name__ == "__main__":
    main()
