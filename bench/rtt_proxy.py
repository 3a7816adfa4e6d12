"""A loopback TCP proxy that holds every chunk ``--delay-ms`` in each direction: a
Redis a round trip of twice that away, on a kernel without netem.

One thread, one ``select.select`` loop over every socket: a chunk read is stamped
with the time it is due and queued for its direction; the loop sleeps in
``select`` until the next chunk is due or a socket is ready, then sends every
chunk that is due, in order (a direction's bytes never overtake each other).
``select.select`` takes its timeout in microseconds, where asyncio's timers (epoll)
round up to a millisecond; one thread has no GIL hand-offs, which cost threads and
``time.sleep`` up to the 5 ms switch interval when several connections are busy.
The proxy measures how long it really held each chunk (``hold_ms`` in its
stats), so the round trip it adds is known, not assumed.

Run as a process of its own, so that it does not share a GIL with the benchmark
(``harness.Proxy`` does this, for ``bench.e2e_rtt`` and the peers):

    python -m bench.rtt_proxy --upstream 127.0.0.1:6390 --delay-ms 0.5 --stats out.json

It prints ``listening PORT`` once it accepts connections, and on SIGTERM writes
its stats (chunks forwarded, the hold each got: mean, p50, p99, max) and exits.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import socket
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, Optional

import orjson

RECV_BYTES = 1 << 16


class Holds:
    """How long chunks were really held, in ms."""

    def __init__(self) -> None:
        self.ms: list[float] = []

    def summary(self) -> dict[str, Any]:
        if not self.ms:
            return {"chunks": 0}
        ms = sorted(self.ms)
        return {
            "chunks": len(ms),
            "mean_ms": sum(ms) / len(ms),
            "p50_ms": ms[len(ms) // 2],
            "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))],
            "max_ms": ms[-1],
        }


class Direction:
    """The bytes of ``src`` on their way to ``dst``: chunks not due yet, and the
    bytes due that ``dst`` did not take yet."""

    def __init__(self, src: socket.socket, dst: socket.socket) -> None:
        self.src, self.dst = src, dst
        self.held: deque[tuple[float, float, bytes]] = deque()  # due, came, chunk
        self.out = bytearray()
        self.eof = False  # src closed: close dst once everything went out


class Proxy:
    def __init__(self, listener: socket.socket, upstream: tuple[str, int], delay_s: float) -> None:
        self.listener = listener
        self.upstream = upstream
        self.delay_s = delay_s
        self.holds = Holds()
        self.by_src: dict[socket.socket, Direction] = {}

    def accept(self) -> None:
        client, _ = self.listener.accept()
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setblocking(False)
        self.by_src[client] = Direction(client, server)
        self.by_src[server] = Direction(server, client)

    def close(self, d: Direction) -> None:
        for sock in (d.src, d.dst):
            self.by_src.pop(sock, None)
            with contextlib.suppress(OSError):
                sock.close()

    def read(self, d: Direction) -> None:
        try:
            data = d.src.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        now = time.monotonic()
        if data:
            d.held.append((now + self.delay_s, now, data))
        else:
            d.eof = True

    def release_due(self, d: Direction, now: float) -> None:
        while d.held and d.held[0][0] <= now:
            _, came, data = d.held.popleft()
            d.out += data
            self.holds.ms.append((now - came) * 1000)

    def write(self, d: Direction) -> None:
        try:
            sent = d.dst.send(d.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close(d)
            return
        del d.out[:sent]

    def run(self) -> None:
        while True:
            now = time.monotonic()
            timeout: Optional[float] = None
            readers: list[socket.socket] = [self.listener]
            writers: list[socket.socket] = []
            for d in list(self.by_src.values()):
                if d.src not in self.by_src:
                    continue  # closed with its other direction
                self.release_due(d, now)
                if d.out:
                    self.write(d)
                if d.src not in self.by_src:
                    continue
                if d.eof and not d.held and not d.out:
                    self.close(d)
                    continue
                if not d.eof:
                    readers.append(d.src)
                if d.out:
                    writers.append(d.dst)
                if d.held:
                    wait = d.held[0][0] - now
                    timeout = wait if timeout is None else min(timeout, wait)
            if timeout is not None:
                timeout = max(timeout, 0.0)
            # a failed write closes both sockets of a pair, one maybe listed already
            readers = [sock for sock in readers if sock.fileno() >= 0]
            writers = [sock for sock in writers if sock.fileno() >= 0]
            readable, writable, _ = select.select(readers, writers, [], timeout)
            for sock in readable:
                if sock is self.listener:
                    self.accept()
                elif (d := self.by_src.get(sock)) is not None:
                    self.read(d)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the Redis")
    parser.add_argument("--delay-ms", type=float, default=0.5, help="hold, each way")
    parser.add_argument("--port", type=int, default=0, help="listen port (0: a free one)")
    parser.add_argument("--stats", help="write the hold stats here on SIGTERM")
    args = parser.parse_args(argv)
    host, port = args.upstream.rsplit(":", 1)
    listener = socket.create_server(("127.0.0.1", args.port), backlog=128)
    proxy = Proxy(listener, (host, int(port)), args.delay_ms / 1000)

    def stop(signum: int, frame: object) -> None:
        if args.stats:
            summary = {"delay_ms": args.delay_ms, **proxy.holds.summary()}
            Path(args.stats).write_bytes(orjson.dumps(summary))
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    print(f"listening {listener.getsockname()[1]}", flush=True)
    proxy.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
