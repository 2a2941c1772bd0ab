"""An asyncio RocketMQ remoting client for benches: requests pipelined on one connection and
matched to their answers by opaque (uvloop in the caller's loop), and the requests the Java
client makes for the bench's producer and push consumer. tests/support/remoting_client.py is
the blocking one tests use; this one is for load (bench/remoting_bench.py).

* ``Producer``: SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE as DefaultMQProducer builds them (one-letter
  header keys, TAGS, one KEYS entry, UNIQ_KEY and WAIT=true per message; a batch carries its own
  UNIQ_KEY and WAIT in the header and ``m=true``); ``send_batches`` keeps 4 batches in flight.
* ``PullConsumer``: a push consumer's HEART_BEAT (its subscription), QUERY_CONSUMER_OFFSET per
  queue, PULL_MESSAGE with SUSPEND and COMMIT_OFFSET (the queue's consumed offset once above 0;
  no SUBSCRIPTION bit: the broker's registered one), and UPDATE_CONSUMER_OFFSET oneway for every
  queue every 5 s and at the end (``persistConsumerOffsetInterval``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.domain.remoting.batch import encode_batch
from services.domain.remoting.codes import PULL_COMMIT_OFFSET, PULL_SUSPEND, RequestCode
from services.domain.remoting.command import SERIALIZE_JSON, RemotingCommand, decode, encode

TOPIC = "BenchTopic"  # broker_bench's
PER_BATCH, BATCHES_IN_FLIGHT = 32, 4
PRODUCER_GROUP, CONSUMER_GROUP = "BenchProducer", "BenchRemotingConsumer"
PERSIST_S = 5.0  # the Java consumer's persistConsumerOffsetInterval
SUSPEND_MS = 15_000  # BROKER_SUSPEND_MAX_TIME_MILLIS
VERSION = 479  # V5_3_3


class Connection(asyncio.Protocol):
    """One pipelined remoting connection: requests matched to answers by opaque."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaques = itertools.count(1)
        self._transport = cast(asyncio.Transport, None)  # set by connection_made
        self.serialize_type = SERIALIZE_JSON  # the Java client's default

    @classmethod
    async def open(cls, address: str) -> Connection:
        host, _, port = address.rpartition(":")
        _, conn = await asyncio.get_running_loop().create_connection(cls, host, int(port))
        return conn

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        pos, end = 0, len(buffer)
        while end - pos >= 4:
            size = int.from_bytes(buffer[pos : pos + 4], "big")
            if end - pos - 4 < size:
                break
            with memoryview(buffer) as view:
                command = decode(view[pos + 4 : pos + 4 + size])
            pos += 4 + size
            future = self._pending.pop(command.opaque, None) if command.is_response else None
            if future is not None and not future.done():
                future.set_result(command)
        del buffer[:pos]

    def connection_lost(self, exc: Exception | None) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionError(f"remoting connection lost: {exc}"))

    def request(self, code: int, fields: dict[str, str], body: bytes = b"") -> asyncio.Future[RemotingCommand]:
        opaque = next(self._opaques)
        future = asyncio.get_running_loop().create_future()
        self._pending[opaque] = future
        self._transport.write(
            encode(RemotingCommand(code, opaque, 0, fields, body, None, "JAVA", VERSION, self.serialize_type))
        )
        return future

    def oneway(self, code: int, fields: dict[str, str]) -> None:
        self._transport.write(
            encode(
                RemotingCommand(code, next(self._opaques), 2, fields, b"", None, "JAVA", VERSION, self.serialize_type)
            )
        )

    async def call(
        self, code: int, fields: dict[str, str], body: bytes = b"", ok: tuple[int, ...] = (0,)
    ) -> RemotingCommand:
        response = await self.request(code, fields, body)
        if response.code not in ok:
            raise SystemExit(f"remoting request {code} answered {response.code}: {response.remark}")
        return response

    def close(self) -> None:
        self._transport.close()


class Producer:
    """SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE as DefaultMQProducer builds them."""

    def __init__(self, conn: Connection, broker_name: str, queues: int) -> None:
        self.conn, self.broker_name, self.queues = conn, broker_name, queues
        self._ids = itertools.count()
        self._prefix = f"7F000001{os.getpid() & 0xFFFF:04X}{id(self) & 0xFFFFFFFF:08X}"  # ip, pid, loader

    def uniq_key(self) -> str:
        return f"{self._prefix}{next(self._ids):012X}"

    def properties(self, key: str) -> str:
        return f"KEYS\x01{key}\x02TAGS\x01TagA\x02UNIQ_KEY\x01{key}\x02WAIT\x01true\x02"

    def fields(self, queue_id: int, properties: str, batch: bool) -> dict[str, str]:
        return {
            "a": PRODUCER_GROUP,
            "b": TOPIC,
            "c": "TBW102",
            "d": "4",
            "e": str(queue_id),
            "f": "0",
            "g": str(int(time.time() * 1000)),
            "h": "0",
            "i": properties,
            "j": "0",
            "k": "false",
            "m": "true" if batch else "false",
            "n": self.broker_name,
        }

    def send(self, queue_id: int, body: bytes) -> asyncio.Future[RemotingCommand]:
        return self.conn.request(
            RequestCode.SEND_MESSAGE_V2, self.fields(queue_id, self.properties(self.uniq_key()), False), body
        )

    def send_batch(self, queue_id: int, body: bytes, count: int) -> asyncio.Future[RemotingCommand]:
        inner = encode_batch((0, body, self.properties(self.uniq_key()).encode()) for _ in range(count))
        header = f"WAIT\x01true\x02UNIQ_KEY\x01{self.uniq_key()}\x02"
        return self.conn.request(RequestCode.SEND_BATCH_MESSAGE, self.fields(queue_id, header, True), inner)


async def route(conn: Connection) -> tuple[str, int]:
    """(broker name, write queues) of the bench topic, from GET_ROUTEINFO_BY_TOPIC."""
    data = json.loads((await conn.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})).body)
    queue_data = data["queueDatas"][0]
    return queue_data["brokerName"], int(queue_data["writeQueueNums"])


def count_records(body: bytes) -> int:
    """Stored records in a pull body (each starts with its int32 TOTALSIZE)."""
    pos = count = 0
    while pos + 4 <= len(body):
        pos += int.from_bytes(body[pos : pos + 4], "big")
        count += 1
    return count


async def send_batches(producer: Producer, n: int, body: bytes, latencies: list[float] | None = None) -> None:
    """``n`` messages as SEND_BATCH_MESSAGE of 32, 4 in flight, queues round-robin."""
    batches = iter(range(n // PER_BATCH))

    async def worker() -> None:
        for i in batches:
            begun = time.perf_counter()
            response = await producer.send_batch(i % producer.queues, body, PER_BATCH)
            if latencies is not None:
                latencies.append(time.perf_counter() - begun)
            if response.code != 0:
                raise SystemExit(f"batch send answered {response.code}: {response.remark}")

    await asyncio.gather(*(worker() for _ in range(BATCHES_IN_FLIGHT)))


class PullConsumer:
    """The Java push consumer's requests for one topic's queues, one pull in flight per queue."""

    def __init__(self, conn: Connection, broker_name: str, queues: int, commit_in_pull: bool = True) -> None:
        self.conn, self.broker_name, self.queues = conn, broker_name, queues
        self.commit_in_pull = commit_in_pull  # False: offsets go only by the oneway every 5 s
        self.sub_version = str(int(time.time() * 1000))
        self.offsets: list[int] = [0] * queues

    async def start(self) -> None:
        heartbeat = {
            "clientID": f"127.0.0.1@{os.getpid()}#bench",
            "consumerDataSet": [
                {
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "consumeType": "CONSUME_PASSIVELY",
                    "groupName": CONSUMER_GROUP,
                    "messageModel": "CLUSTERING",
                    "subscriptionDataSet": [
                        {
                            "classFilterMode": False,
                            "codeSet": [],
                            "expressionType": "TAG",
                            "subString": "*",
                            "subVersion": int(self.sub_version),
                            "tagsSet": [],
                            "topic": TOPIC,
                        }
                    ],
                    "unitMode": False,
                }
            ],
            "heartbeatFingerprint": 0,
            "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
            "withoutSub": False,
        }
        await self.conn.call(RequestCode.HEART_BEAT, {}, json.dumps(heartbeat, separators=(",", ":")).encode())
        for q in range(self.queues):
            got = await self.conn.call(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": CONSUMER_GROUP, "topic": TOPIC, "queueId": str(q), "setZeroIfNotFound": "true"},
                ok=(0, 22),
            )
            self.offsets[q] = int(got.ext_fields["offset"]) if got.code == 0 else 0

    def pull(self, q: int) -> asyncio.Future[RemotingCommand]:
        offset = self.offsets[q]
        fields = {
            "consumerGroup": CONSUMER_GROUP,
            "topic": TOPIC,
            "queueId": str(q),
            "queueOffset": str(offset),
            "maxMsgNums": str(PER_BATCH),
            "sysFlag": str(PULL_SUSPEND | (PULL_COMMIT_OFFSET if offset > 0 and self.commit_in_pull else 0)),
            "commitOffset": str(offset),
            "suspendTimeoutMillis": str(SUSPEND_MS),
            "subVersion": self.sub_version,
            "expressionType": "TAG",
            "maxMsgBytes": str(256 * 1024),
            "bname": self.broker_name,
        }
        return self.conn.request(RequestCode.PULL_MESSAGE, fields)

    def persist(self) -> None:
        for q, offset in enumerate(self.offsets):
            fields = {"consumerGroup": CONSUMER_GROUP, "topic": TOPIC, "queueId": str(q), "commitOffset": str(offset)}
            self.conn.oneway(RequestCode.UPDATE_CONSUMER_OFFSET, fields)

    async def consume(self, per_queue: int, latencies: list[float] | None = None) -> int:
        """Pull until each queue gave ``per_queue`` more messages; the count."""
        got = [0] * self.queues

        async def loop(q: int) -> None:
            while got[q] < per_queue:
                begun = time.perf_counter()
                response = await self.pull(q)
                if latencies is not None:
                    latencies.append(time.perf_counter() - begun)
                if response.code not in (0, 20):
                    raise SystemExit(f"pull of queue {q} answered {response.code}: {response.remark}")
                got[q] += count_records(response.body)
                self.offsets[q] = int(response.ext_fields["nextBeginOffset"])

        async def persist_every() -> None:
            while True:
                await asyncio.sleep(PERSIST_S)
                self.persist()

        persister = asyncio.create_task(persist_every())
        try:
            await asyncio.gather(*(loop(q) for q in range(self.queues)))
        finally:
            persister.cancel()
        self.persist()
        return sum(got)


async def wait_backlog(conn: Connection, queues: int, per_queue: int) -> None:
    deadline = time.monotonic() + 120
    for q in range(queues):
        while True:
            got = await conn.call(RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": str(q)})
            if int(got.ext_fields["offset"]) >= per_queue:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"queue {q} holds {got.ext_fields['offset']} of {per_queue} after 120 s")
            await asyncio.sleep(0.05)
