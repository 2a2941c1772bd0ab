"""A TCP relay that delays, for test hosts without netem (tests/support/netns.py ``add_delay``).

``python -m tests.support.delay_proxy --delay-ms 200 --mark 30465`` listens on 0.0.0.0:0 inside a
host's namespace, prints ``delay-proxy ready port=<port>``, and serves connections an nft
``redirect`` sent it: each is relayed to its original destination (SO_ORIGINAL_DST), dialled with
SO_MARK ``mark`` so the redirect rule lets it through, and every chunk read in either direction is
written ``delay_ms`` after it was read, in order (a queue per direction: the delay is latency, not
a throughput cap). An end half-closed on one side is half-closed on the other once what came
before it is written. Runs until killed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import struct
import time

SO_ORIGINAL_DST = 80  # linux/netfilter_ipv4.h
CHUNK_BYTES = 64 * 1024


def original_destination(sock: socket.socket) -> tuple[str, int]:
    """The (address, port) a redirected connection was made to (struct sockaddr_in)."""
    raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
    port, address = struct.unpack_from("!2xH4s", raw)
    return socket.inet_ntoa(address), port


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    """Copy ``reader`` to ``writer``, each chunk ``delay_s`` after it was read."""
    held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        try:
            while data := await reader.read(CHUNK_BYTES):
                held.put_nowait((time.monotonic() + delay_s, data))
        except OSError:
            pass
        held.put_nowait((time.monotonic() + delay_s, b""))  # end of stream, after the rest

    reading = asyncio.create_task(read())
    try:
        while True:
            due, data = await held.get()
            if (wait := due - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            if not data:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
    finally:
        reading.cancel()


async def relay(
    client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter, delay_s: float, mark: int
) -> None:
    client_sock = client_writer.get_extra_info("socket")
    upstream_writer = None
    try:
        destination = original_destination(client_sock)
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream.setblocking(False)
        await asyncio.get_running_loop().sock_connect(upstream, destination)
        upstream_reader, upstream_writer = await asyncio.open_connection(sock=upstream)
        client_sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(
            pipe(client_reader, upstream_writer, delay_s), pipe(upstream_reader, client_writer, delay_s)
        )
    except OSError:
        pass  # either end went away: both are closed below
    finally:
        for w in (client_writer, upstream_writer):
            if w is not None:
                w.close()
                with contextlib.suppress(OSError):
                    await w.wait_closed()


async def serve(delay_ms: int, mark: int) -> None:
    delay_s = delay_ms / 1000
    server = await asyncio.start_server(lambda r, w: relay(r, w, delay_s, mark), "0.0.0.0", 0)
    port = server.sockets[0].getsockname()[1]
    print(f"delay-proxy ready port={port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--delay-ms", type=int, required=True)
    parser.add_argument("--mark", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.delay_ms, args.mark))


if __name__ == "__main__":
    main()
