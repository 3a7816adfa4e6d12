"""A TCP proxy in front of a Redis that a test cuts, as a network does: while cut, it
holds every byte each way (a connection made meanwhile is accepted, its bytes held
too: the partition lets a connect through, not a request), except the replies to
requests that went through before it, on a connection whose client has sent nothing
since (what was on the wire); restored, it delivers what
it held on the connections still open (TCP's retransmissions after a link comes
back), and keeps what a client sent on a connection it closed meanwhile (a request
its worker gave up on) until the test delivers it, late, to Redis
(``deliver_late``), as the finding of issue 23 (item 10) saw it happen.

One thread runs every socket (a selector loop); the test's calls run in it too, so
the proxy's state changes only there.
"""

from __future__ import annotations

import queue
import selectors
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

CHUNK = 65536


@dataclass
class _Pair:
    client: Optional[socket.socket]
    upstream: Optional[socket.socket]
    to_upstream: bytearray = field(default_factory=bytearray)  # held while cut
    to_client: bytearray = field(default_factory=bytearray)  # held while cut
    # its client sent something since the cut (held): from then its replies are held
    # too. Until then they pass, however long Redis takes: replies to requests that
    # went through before the cut. Held, a worker whose request had just gone through
    # would wait on its reply and never send the next request (a claim) the cut
    # should hold; a time allowed for them failed on a crowded machine.
    sent_since_cut: bool = False

    @property
    def orphaned(self) -> bool:
        """Its client closed the connection: what it sent and is held waits for
        ``deliver_late``."""
        return self.client is None and self.upstream is not None


class CutProxy:
    """Listens on 127.0.0.1:``port`` for a Redis on 127.0.0.1:``upstream_port``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_addr = ("127.0.0.1", upstream_port)
        self.is_cut = False
        self.pairs: list[_Pair] = []
        self._sel = selectors.DefaultSelector()
        self._calls: queue.Queue[tuple[Callable[[], Any], queue.Queue[Any]]] = queue.Queue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._wake_r, selectors.EVENT_READ, ("wake", None))
        self._listener: Optional[socket.socket] = None
        self.port = 0
        self._listen()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="cut-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    # -- what a test calls (run in the proxy's thread) ---------------------------

    def cut(self) -> None:
        """From now: every byte held, on new connections too (but the replies to
        what went through before, on a connection that has sent nothing since)."""
        self._call(self._cut)

    def restore(self) -> None:
        """What was held for open connections delivered."""
        self._call(self._restore)

    def held_by_closed(self) -> list[bytes]:
        """What each connection a client closed while cut had sent and was held."""
        return self._call(lambda: [bytes(p.to_upstream) for p in self.pairs if p.orphaned])

    def held_by_open(self) -> list[bytes]:
        """What each connection still open had sent and is held."""
        return self._call(
            lambda: [bytes(p.to_upstream) for p in self.pairs if p.client is not None]
        )

    def deliver_late(self) -> list[bytes]:
        """Send Redis what the connections closed while cut had sent (their replies
        go nowhere); returns it, one entry per connection."""
        return self._call(self._deliver_late)

    def stop(self) -> None:
        if not self._stopped:
            self._call(self._stop)
            self._thread.join(5)

    # -- the loop ----------------------------------------------------------------

    def _call(self, fn: Callable[[], Any]) -> Any:
        done: queue.Queue[Any] = queue.Queue()
        self._calls.put((fn, done))
        self._wake_w.send(b"x")
        ok, value = done.get(timeout=10)
        if not ok:
            raise value
        return value

    def _run(self) -> None:
        while not self._stopped:
            for key, _ in self._sel.select(timeout=0.5):
                kind, pair = key.data
                if kind == "wake":
                    self._wake_r.recv(4096)
                    while not self._calls.empty():
                        fn, done = self._calls.get()
                        try:
                            done.put((True, fn()))
                        except Exception as exc:  # noqa: BLE001 - handed to the caller
                            done.put((False, exc))
                elif kind == "listen":
                    self._accept()
                elif key.fileobj not in (pair.client, pair.upstream):
                    continue  # closed by an earlier event of this round
                else:
                    try:
                        if kind == "client":
                            self._from_client(pair)
                        else:
                            self._from_upstream(pair)
                    except OSError:  # a peer gone mid-write: the pair is done
                        self._close(pair)

    def _listen(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        self.port = sock.getsockname()[1]
        self._listener = sock
        self._sel.register(sock, selectors.EVENT_READ, ("listen", None))

    def _accept(self) -> None:
        assert self._listener is not None
        client, _ = self._listener.accept()
        try:
            upstream = socket.create_connection(self.upstream_addr, timeout=5)
        except OSError:  # Redis is away: so is this connection
            client.close()
            return
        upstream.settimeout(None)
        pair = _Pair(client, upstream)
        self.pairs.append(pair)
        self._sel.register(client, selectors.EVENT_READ, ("client", pair))
        self._sel.register(upstream, selectors.EVENT_READ, ("upstream", pair))

    def _from_client(self, pair: _Pair) -> None:
        assert pair.client is not None and pair.upstream is not None
        try:
            data = pair.client.recv(CHUNK)
        except OSError:
            data = b""
        if not data:  # the client closed (gave up on the connection)
            self._sel.unregister(pair.client)
            pair.client.close()
            pair.client = None
            if not (self.is_cut and pair.to_upstream):
                self._close_upstream(pair)
            return
        if self.is_cut:
            pair.to_upstream += data
            pair.sent_since_cut = True
        else:
            pair.upstream.sendall(data)

    def _from_upstream(self, pair: _Pair) -> None:
        assert pair.upstream is not None
        try:
            data = pair.upstream.recv(CHUNK)
        except OSError:
            data = b""
        if not data:
            self._close_upstream(pair)
            if pair.client is not None:
                self._sel.unregister(pair.client)
                pair.client.close()
                pair.client = None
            return
        if pair.client is None:
            return  # a reply to a request its client gave up on: nobody reads it
        if self.is_cut and (pair.sent_since_cut or pair.to_client):
            pair.to_client += data
        else:
            pair.client.sendall(data)

    def _close(self, pair: _Pair) -> None:
        if pair.client is not None:
            self._sel.unregister(pair.client)
            pair.client.close()
            pair.client = None
        self._close_upstream(pair)

    def _close_upstream(self, pair: _Pair) -> None:
        if pair.upstream is not None:
            self._sel.unregister(pair.upstream)
            pair.upstream.close()
            pair.upstream = None

    def _cut(self) -> None:
        # a worker that gave up on a request connects again, and its handshake is
        # held: only the requests a worker sends on its open connections after the
        # cut (an ack and a claim) are held and given up on
        self.is_cut = True
        for pair in self.pairs:
            pair.sent_since_cut = False

    def _restore(self) -> None:
        self.is_cut = False
        for pair in self.pairs:
            if pair.client is not None and pair.upstream is not None:
                try:
                    if pair.to_upstream:
                        pair.upstream.sendall(pair.to_upstream)
                    if pair.to_client:
                        pair.client.sendall(pair.to_client)
                except OSError:
                    self._close(pair)
                pair.to_upstream, pair.to_client = bytearray(), bytearray()

    def _deliver_late(self) -> list[bytes]:
        sent = []
        for pair in self.pairs:
            if pair.orphaned and pair.to_upstream:
                assert pair.upstream is not None
                pair.upstream.sendall(pair.to_upstream)
                sent.append(bytes(pair.to_upstream))
                pair.to_upstream = bytearray()
        self.pairs = [p for p in self.pairs if p.upstream is not None]
        return sent

    def _stop(self) -> None:
        self._stopped = True
        for pair in self.pairs:
            self._close(pair)
        if self._listener is not None:
            self._sel.unregister(self._listener)
            self._listener.close()
