"""The floor under the remoting door on this machine: a bare uvloop server that splits frames by
length and answers each, in a process of its own pinned to CPU 1 (where ``pyrmq up`` puts the
broker), against bench/remoting_client.py's pipelined client pinned to CPU 0. Prints the
server's CPU-µs per request at 1 and 64 in flight, for two servers:

* ``raw``: ROCKETMQ binary requests, each answered with a canned binary frame carrying the
  request's opaque: uvloop, the socket calls and frame splitting, nothing else;
* ``codec``: JSON requests (GET_KV_CONFIG, as remoting_bench's door case) decoded, answered and
  encoded with services/domain/remoting/command.py: the door's codec without its dispatch.

    python bench/remoting_floor.py [--requests 40000]

Compare with remoting_bench's ``door`` case (``--client-cpu 0``): what the door adds is its
dispatch, handler, metrics and ACL hook.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import sys
import time
from pathlib import Path
from typing import cast

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import uvloop
from broker_bench import proc_cpu_s
from remoting_client import Connection

from services.domain.remoting.codes import RequestCode, ResponseCode
from services.domain.remoting.command import SERIALIZE_JSON, SERIALIZE_ROCKETMQ, RemotingCommand, decode, encode

OPAQUE = slice(8 + 5, 8 + 9)  # a binary frame's opaque: after total_len, header_tag, code, language, version


def serve(port: int, mode: str, ready: multiprocessing.synchronize.Event) -> None:
    os.sched_setaffinity(0, {1})
    canned = bytearray(
        encode(RemotingCommand(ResponseCode.QUERY_NOT_FOUND, 0, 1, {}, b"", "no", "JAVA", 479, SERIALIZE_ROCKETMQ))
    )

    class Server(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = cast(asyncio.Transport, transport)
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.buffer = bytearray()

        def data_received(self, data: bytes) -> None:
            buffer = self.buffer
            buffer += data
            pos, out = 0, []
            while len(buffer) - pos >= 4:
                size = int.from_bytes(buffer[pos : pos + 4], "big")
                if len(buffer) - pos - 4 < size:
                    break
                if mode == "raw":
                    canned[OPAQUE] = buffer[pos + OPAQUE.start : pos + OPAQUE.stop]
                    out.append(bytes(canned))
                else:
                    with memoryview(buffer) as view:
                        request = decode(view[pos + 4 : pos + 4 + size])
                    out.append(encode(request.response(ResponseCode.QUERY_NOT_FOUND, "no")))
                pos += 4 + size
            del buffer[:pos]
            self.transport.write(b"".join(out))

    async def main() -> None:
        await asyncio.get_running_loop().create_server(Server, "127.0.0.1", port)
        ready.set()
        await asyncio.Event().wait()

    uvloop.run(main())


async def load(address: str, n: int, window: int, serialize_type: int) -> None:
    conn = await Connection.open(address)
    conn.serialize_type = serialize_type
    fields = {"namespace": "ORDER_TOPIC_CONFIG", "key": "BenchTopic"}
    counter = iter(range(n))

    async def worker() -> None:
        for _ in counter:
            await conn.request(RequestCode.GET_KV_CONFIG, fields)

    await asyncio.gather(*(worker() for _ in range(window)))
    conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40000, help="at 1 in flight (x8 at 64)")
    args = parser.parse_args()
    os.sched_setaffinity(0, {0})
    for mode, serialize_type in (("raw", SERIALIZE_ROCKETMQ), ("codec", SERIALIZE_JSON)):
        ready = multiprocessing.Event()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        server = multiprocessing.Process(target=serve, args=(port, mode, ready), daemon=True)
        server.start()
        ready.wait()
        for window, n in ((1, args.requests), (64, 8 * args.requests)):
            uvloop.run(load(f"127.0.0.1:{port}", 2000, window, serialize_type))
            cpu0, started = proc_cpu_s(server.pid or 0), time.perf_counter()
            uvloop.run(load(f"127.0.0.1:{port}", n, window, serialize_type))
            elapsed, cpu = time.perf_counter() - started, proc_cpu_s(server.pid or 0) - cpu0
            print(
                f"{mode:5} {window:2} in flight: {n / elapsed:9,.0f} requests/s, server {cpu / n * 1e6:5.1f} CPU-µs each"
            )
        server.terminate()
        server.join()


if __name__ == "__main__":
    main()
