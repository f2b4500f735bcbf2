#!/usr/bin/env python3
"""A bandwidth-limited TCP proxy: one process is one network link between a worker and the
coordinator, for benchmarks of slimfit over slow links (bench/slow_link.sh).

Every byte that crosses the link in one direction draws on that direction's token bucket (RATE
megabits per second, bursts of at most BURST bytes), whichever connection carries it: the worker's
calls to the coordinator (registration, heartbeats, FetchParameters) and the coordinator's calls to
the worker (ComputeGradient) share the link as they would share a home connection. Bandwidth only:
no added latency, no loss.

  --up LISTEN_PORT:HOST:PORT    connections opened by the worker side (to the coordinator at
                                HOST:PORT): their requests travel up, their responses down
  --down LISTEN_PORT:HOST:PORT  connections opened by the coordinator side (to the worker at
                                HOST:PORT): their requests travel down, their responses up

Listens on 127.0.0.1. Writes "ready" to --ready_file once every listener is bound, and at exit
(SIGTERM, SIGINT) one JSON line to --stats_file: {"up_bytes": N, "down_bytes": N, "connections": N}.
"""

import argparse
import asyncio
import json
import signal
import sys
import time

CHUNK_BYTES = 16 * 1024


class TokenBucket:
    """rate bytes per second, at most burst bytes at once; shared by every connection of a link."""

    def __init__(self, rate, burst):
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.last = time.monotonic()
        self.bytes = 0

    async def take(self, n):
        while True:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            if self.tokens >= n:
                self.tokens -= n
                self.bytes += n
                return
            await asyncio.sleep((n - self.tokens) / self.rate)


async def pipe(reader, writer, bucket):
    try:
        while True:
            data = await reader.read(CHUNK_BYTES)
            if not data:
                break
            await bucket.take(len(data))
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


def parse_route(text, flag):
    parts = text.split(":")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[2].isdigit():
        raise SystemExit(f"throttle_proxy: {flag} must be LISTEN_PORT:HOST:PORT, got '{text}'")
    return int(parts[0]), parts[1], int(parts[2])


async def serve(args):
    rate = args.rate_mbit * 1e6 / 8
    if rate <= 0:
        raise SystemExit("throttle_proxy: --rate_mbit must be > 0")
    burst = max(CHUNK_BYTES, args.burst_bytes)
    up, down = TokenBucket(rate, burst), TokenBucket(rate, burst)
    connections = 0

    def handler(host, port, request_bucket, response_bucket):
        async def handle(client_reader, client_writer):
            nonlocal connections
            connections += 1
            try:
                target_reader, target_writer = await asyncio.open_connection(host, port)
            except OSError:
                client_writer.close()
                return
            await asyncio.gather(pipe(client_reader, target_writer, request_bucket),
                                 pipe(target_reader, client_writer, response_bucket))
            client_writer.close()
            target_writer.close()
        return handle

    servers = []
    for text in args.up:
        listen, host, port = parse_route(text, "--up")
        servers.append(await asyncio.start_server(handler(host, port, up, down), "127.0.0.1", listen))
    for text in args.down:
        listen, host, port = parse_route(text, "--down")
        servers.append(await asyncio.start_server(handler(host, port, down, up), "127.0.0.1", listen))
    if not servers:
        raise SystemExit("throttle_proxy: give at least one --up or --down route")
    if args.ready_file:
        with open(args.ready_file, "w") as f:
            f.write("ready\n")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for server in servers:
        server.close()
    if args.stats_file:
        with open(args.stats_file, "w") as f:
            json.dump({"up_bytes": up.bytes, "down_bytes": down.bytes, "connections": connections}, f)
            f.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate_mbit", type=float, required=True, help="megabits per second, each direction")
    parser.add_argument("--burst_bytes", type=int, default=64 * 1024, help="largest burst (default 64 KiB)")
    parser.add_argument("--up", action="append", default=[], metavar="LISTEN_PORT:HOST:PORT")
    parser.add_argument("--down", action="append", default=[], metavar="LISTEN_PORT:HOST:PORT")
    parser.add_argument("--ready_file", default="")
    parser.add_argument("--stats_file", default="")
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
