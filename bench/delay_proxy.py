"""A TCP proxy that delays every byte by a fixed time each way: a network with a round trip.

Run: `python bench/delay_proxy.py --target HOST:PORT [--listen-port 0] [--delay-ms 0.5] [--back-ms 0.5]`

It prints `listening PORT` once it accepts connections, then passes every connection on to
`--target`, holding each chunk it reads for `--delay-ms` (client to server) or `--back-ms`
(server to client) before writing it, in order: a client then sees a round trip of the two
delays added to the real one, and bytes sent together (a pipeline) still arrive together.
Used by `bench_postgres.py --rtt-ms N` to measure PostgreSQL appends where the network is real.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
import time
from collections.abc import Sequence

_CHUNK = 1 << 16


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy `reader` to `writer`, each chunk written `delay` seconds after it was read."""
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            # Drain only when the kernel's buffer is full: a chunk due now is not held behind it.
            transport = writer.transport
            if transport.get_write_buffer_size() > _CHUNK:
                await writer.drain()
        with contextlib.suppress(OSError):
            writer.close()

    sender = asyncio.create_task(deliver())
    loop = asyncio.get_running_loop()
    try:
        while data := await reader.read(_CHUNK):
            queue.put_nowait((loop.time() + delay, data))
    except OSError:
        pass
    finally:
        queue.put_nowait((loop.time() + delay, b''))
        with contextlib.suppress(OSError):
            await sender


async def serve(host: str, port: int, listen_port: int, delay: float, back: float) -> None:
    """Accept connections on `listen_port` (0: any free port) and relay them to `host:port`."""

    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(host, port)
        except OSError:
            client_writer.close()
            return
        for stream in (client_writer, server_writer):
            sock = stream.get_extra_info('socket')
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(_pump(client_reader, server_writer, delay), _pump(server_reader, client_writer, back))

    server = await asyncio.start_server(relay, '127.0.0.1', listen_port)
    bound = server.sockets[0].getsockname()[1]
    print(f'listening {bound}', flush=True)
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--target', required=True, help='HOST:PORT of the server')
    parser.add_argument('--listen-port', type=int, default=0)
    parser.add_argument('--delay-ms', type=float, default=0.5, help='delay client to server, ms')
    parser.add_argument('--back-ms', type=float, default=None, help='delay server to client, ms (default: --delay-ms)')
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(':')
    back = args.delay_ms if args.back_ms is None else args.back_ms
    started = time.monotonic()
    try:
        asyncio.run(serve(host or '127.0.0.1', int(port), args.listen_port, args.delay_ms / 1000, back / 1000))
    except KeyboardInterrupt:
        print(f'stopped after {time.monotonic() - started:.0f} s', file=sys.stderr)


if __name__ == '__main__':
    main()
