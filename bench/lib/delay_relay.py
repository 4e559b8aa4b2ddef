#!/usr/bin/env python3
"""A delaying TCP relay for bench/shaped.sh: adds a round-trip time to every node.

    delay_relay.py RTT_MS LISTEN_ADDR:PORT=TARGET_ADDR:PORT ...

Every connection accepted on a LISTEN address is forwarded to its TARGET, each chunk
released RTT/2 after it arrived, in each direction. It is a delay line, not
stop-and-wait: chunks are stamped on arrival and released in order at arrival + RTT/2,
so a bulk transfer keeps its rate and only its latency grows, as on a long link. At most
MAX_IN_FLIGHT bytes wait per direction (then the relay stops reading, and TCP's flow
control slows the sender), so the line cannot swallow a whole upload into memory and
tell the sender it is done long before the node has the bytes.

The TCP handshake, which the relay answers at once on loopback, costs a real link one
round trip before the client may send: the relay connects to the target only 1.5 RTT
after accepting (when a real server's accept would return) and holds the client's early
bytes until then, so the server's banner reaches the client 2 RTT after connect(), as it
would over a link with this RTT.

Prints `ready` on stdout once every address listens. Traffic only between the given
(loopback) addresses; stops on SIGTERM or SIGINT.
"""

import asyncio
import signal
import sys
import time

CHUNK = 256 * 1024
MAX_IN_FLIGHT = 8 * 1024 * 1024


class DelayLine:
    """One direction: chunks stamped with their release time, bounded in bytes."""

    def __init__(self):
        self.chunks = asyncio.Queue()
        self.in_flight = 0
        self.room = asyncio.Event()
        self.room.set()

    async def put(self, release_at, data):
        while self.in_flight >= MAX_IN_FLIGHT:
            self.room.clear()
            await self.room.wait()
        self.in_flight += len(data)
        self.chunks.put_nowait((release_at, data))

    def put_eof(self, release_at):
        self.chunks.put_nowait((release_at, None))

    async def get(self):
        release_at, data = await self.chunks.get()
        delay = release_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if data is not None:
            self.in_flight -= len(data)
            self.room.set()
        return data


async def read_into(reader, line, half, not_before):
    """Reads until EOF, stamping each chunk with its release time."""
    try:
        while True:
            data = await reader.read(CHUNK)
            now = time.monotonic()
            release_at = max(now + half, not_before)
            if not data:
                line.put_eof(release_at)
                return
            await line.put(release_at, data)
    except (ConnectionError, OSError):
        line.put_eof(time.monotonic())


async def write_from(line, writer):
    """Writes each chunk at its release time; half-closes on EOF (so `cat > f` ends)."""
    try:
        while True:
            data = await line.get()
            if data is None:
                if writer.can_write_eof():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        return


async def relay(client_reader, client_writer, target, rtt):
    half = rtt / 2
    accepted = time.monotonic()
    # The handshake: a real server would see the connection 1.5 RTT after connect().
    upstream_at = accepted + 1.5 * rtt
    to_server, to_client = DelayLine(), DelayLine()
    up = asyncio.ensure_future(read_into(client_reader, to_server, half, upstream_at))
    server_writer = None
    try:
        await asyncio.sleep(max(0.0, upstream_at - time.monotonic()))
        try:
            server_reader, server_writer = await asyncio.open_connection(*target)
        except OSError:
            return
        await asyncio.gather(
            write_from(to_server, server_writer),
            read_into(server_reader, to_client, half, 0.0),
            write_from(to_client, client_writer),
        )
    finally:
        up.cancel()
        for w in (client_writer, server_writer):
            if w is not None:
                w.close()


def address(text):
    host, port = text.rsplit(":", 1)
    return host, int(port)


async def main(argv):
    rtt = float(argv[1]) / 1000.0
    servers = []
    for pair in argv[2:]:
        listen, target = (address(p) for p in pair.split("=", 1))
        servers.append(
            await asyncio.start_server(
                lambda r, w, t=target: relay(r, w, t, rtt),
                *listen,
                reuse_address=True,
                backlog=1024,
            )
        )
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in servers:
        s.close()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv))
