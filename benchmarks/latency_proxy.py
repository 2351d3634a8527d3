"""A TCP relay that delays every byte by a fixed time each way: a local S3 server made as far
away as a store (issue 31's bucket benchmark).

A store's small GET is latency-bound (the first byte is tens of milliseconds away, more over a
WAN); a server on 127.0.0.1 answers in a millisecond. This relay sits between a client and a
local server and delivers each chunk read from one side to the other `one_way_s` after it
arrived, in order, without parsing it: an HTTP request then costs one added round trip
(2 * one_way_s) and nothing else, the way a network adds it, whatever the client pipelines or
keeps alive. It is asyncio in a process of its own, so it costs the benchmark's two cores little
(the kernel's netem, which would do the same, is not in this machine's kernel).

    python benchmarks/latency_proxy.py UPSTREAM_PORT ROUND_TRIP_MS   # prints its own port
"""

from __future__ import annotations

import asyncio
import sys


async def _relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, one_way_s: float) -> None:
    """Copy reader -> writer, each chunk delivered `one_way_s` after it was read."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                break
            writer.write(data)
            await writer.drain()

    delivering = asyncio.create_task(deliver())
    try:
        while True:
            data = await reader.read(1 << 16)
            queue.put_nowait((loop.time() + one_way_s, data))
            if not data:
                break
        await delivering
    except (ConnectionError, asyncio.CancelledError):
        delivering.cancel()
    finally:
        try:
            writer.close()
        except RuntimeError:  # the loop is closing
            pass


async def serve(upstream_port: int, round_trip_s: float) -> None:
    one_way = round_trip_s / 2

    async def connection(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(_relay(client_reader, server_writer, one_way),
                             _relay(server_reader, client_writer, one_way), return_exceptions=True)

    server = await asyncio.start_server(connection, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), float(sys.argv[2]) / 1000))
