"""What Redis holds of a chain, and how its links are forwarded.

A chain (``app.chain(...)``, :mod:`fastq.producer.chains`) is jobs run one after
another, each enqueued when the one before it succeeds. Its links' ids are chosen
when it is made (``<chain>``, ``<chain>.2``, ``<chain>.3``...), so that enqueueing a
link twice adds it once (an id that exists, or ended while its record lasts, is
left alone by ``enqueue.lua``). Redis holds:

- **the rest of the chain beside each live link** (``QueueKeys.chained``, id ->
  the links after it as JSON), written by the enqueue that adds the link (its
  extras' ``"then"``);
- **an outbox per queue** (``QueueKeys.chain_out``): the script that ends a link
  done (``ack.lua``, ``ack_taken.lua``) moves its rest there in the same call as the
  ack, so a chain is never lost between the two; any other end deletes it (the chain
  stops at that link: ``lua/lib/chains.lua``);
- **the chain's own key** (``ChainKeys.chain``): its links, for its status, and
  why it stopped short when a forwarder could not go on.

*Forwarding* a link is enqueueing the next one with its id (and with the rest after
it as its own ``"then"``), then deleting the outbox entry. The worker whose ack moved
it does so at once (the ack's reply names the links); a reaper forwards what is left
(the worker died, or Redis failed it). Forwarding twice adds the next link once.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Sequence

import orjson
import redis

from fastq.connection.typed import hash_page, unchecked
from fastq.protocol import scripts
from fastq.protocol.contracts import ENQUEUE
from fastq.protocol.keys import ChainKeys, QueueKeys

log = logging.getLogger("fastq.chains")

# A chain's own key (its links, for its status) lasts this long.
KEEP_MS = 7 * 24 * 3600 * 1000
# An outbox entry a worker moved is forwarded by a reaper once this old (before
# that, its worker is forwarding it: forwarding twice is harmless, but not free).
GRACE_MS = 5_000
# Outbox entries a reaper reads per HSCAN call.
SCAN_COUNT = 200

# A link, as the rest of a chain holds it (JSON): {"c": chain id, "i": its index
# (from 1), "q": its queue (a shard's name on a sharded queue), "id": its job id,
# "e": its envelope (the JSON array of docs/protocol.md), "p": its priority, "r": 1
# to be given the previous link's return value as its first argument}
Link = dict[str, Any]


def rest_text(links: Sequence[Link]) -> str:
    """The rest of a chain as ``enqueue.lua``'s ``"then"`` holds it."""
    return orjson.dumps(list(links)).decode()


def link_extras(rest: Sequence[Link]) -> bytes:
    """The extras of an enqueue of a link followed by ``rest`` (none: the last)."""
    return orjson.dumps({"then": rest_text(rest)}) if rest else b""


def link_command(keys: QueueKeys, link: Link, rest: Sequence[Link], envelope: bytes) -> Any:
    """The enqueue of ``link`` (with its ``envelope`` as sent), the rest after it."""
    argv = ENQUEUE.argv(int(link.get("p", 0)), 0, link_extras(rest), [link["id"]], [envelope])
    return ENQUEUE.command(ENQUEUE.keys_for(keys), argv)


def write_chain(client: redis.Redis, keys: ChainKeys, about: list[dict[str, Any]]) -> None:
    """Note a new chain's links (queue, id and job name of each) for its status,
    kept ``KEEP_MS``; a chain made again with its id keeps the first note."""
    pipe = client.pipeline(transaction=False)
    # bytes: redis-py 7 types HSETNX's value as str
    pipe.hsetnx(keys.chain, "links", unchecked(orjson.dumps(about)))
    pipe.pexpire(keys.chain, KEEP_MS)
    pipe.execute()


def read_chain(client: redis.Redis, keys: ChainKeys) -> Optional[dict[bytes, bytes]]:
    """A chain's note (``links``, and ``stopped`` once it stopped); None: none."""
    # bytes: fastq's clients do not decode (redis-py 8 types the fields bytes | str)
    raw: dict[bytes, bytes] = unchecked(client.hgetall(keys.chain))
    return raw if raw and b"links" in raw else None


def parse_entry(raw: bytes) -> tuple[int, list[Link]]:
    """An outbox entry: (when it was moved, ms; 0: at once), the rest of its chain."""
    stamp, _, rest = raw.partition(b" ")
    return int(stamp), orjson.loads(rest)


class Forwarder:
    """Forwards the links done of a namespace's chains (see the module).

    Args:
        keys_of: a queue's keys (``Store.keys``).
        namespace: for the chains' own keys.
    """

    def __init__(self, keys_of: Callable[[str], QueueKeys], namespace: str) -> None:
        self.keys_of = keys_of
        self.namespace = namespace

    def forward(self, client: redis.Redis, queue: str, link_ids: Sequence[str]) -> int:
        """Forward the outbox entries of ``link_ids`` on ``queue`` (those still
        there); returns how many were. What fails stays in the outbox, for a reaper.

        Raises:
            redis.RedisError: Redis failed a read or a write (nothing is lost).
        """
        if not link_ids:
            return 0
        out_key = self.keys_of(queue).chain_out
        raw: list[Optional[bytes]] = client.hmget(out_key, list(link_ids))  # type: ignore[assignment]
        found = [(i, r) for i, r in zip(link_ids, raw) if r is not None]
        return self._send(client, queue, self._read(client, queue, found))

    def forward_left(self, client: redis.Redis, queue: str) -> int:
        """A reaper's turn on ``queue``: forward the outbox entries moved at least
        ``GRACE_MS`` ago (or marked for at once); returns how many were."""
        grace_ms = GRACE_MS
        out_key = self.keys_of(queue).chain_out
        now_ms = int(time.time() * 1000)
        cursor, n = 0, 0
        while True:
            cursor, page = hash_page(client, out_key, cursor, SCAN_COUNT)
            due = []
            for link_id, raw in page.items():
                stamp = _stamp(raw)
                if stamp == 0 or now_ms - stamp >= grace_ms:
                    due.append((link_id.decode(), raw))
            n += self._send(client, queue, self._read(client, queue, due))
            if cursor == 0:
                return n

    def _read(
        self, client: redis.Redis, queue: str, found: list[tuple[str, bytes]]
    ) -> list[tuple[str, list[Link]]]:
        """The (done link id, rest) of each outbox entry; one that cannot be read
        (written by hand, or by a producer of another language gone wrong) is said
        in the log and deleted: its chain stops there."""
        entries, bad = [], []
        for link_id, raw in found:
            try:
                rest = parse_entry(raw)[1]
                link = rest[0]
                if not (
                    isinstance(link["q"], str)
                    and isinstance(link["id"], str)
                    and isinstance(link["e"], list)
                    and len(link["e"]) >= 3
                    and isinstance(link["e"][1], list)
                    and isinstance(link.get("p", 0), int)
                    and isinstance(rest[1:], list)
                ):
                    raise TypeError("a link needs a queue, an id and an envelope")
            except (ValueError, TypeError, KeyError, IndexError) as exc:
                log.error(
                    "chains: the rest of the chain after %s on %s cannot be read (%s): "
                    "deleted, the chain stops there",
                    link_id,
                    queue,
                    exc,
                )
                bad.append(link_id)
                continue
            entries.append((link_id, rest))
        if bad:
            client.hdel(self.keys_of(queue).chain_out, *bad)
        return entries

    def _send(self, client: redis.Redis, queue: str, entries: list[tuple[str, list[Link]]]) -> int:
        """Enqueue the next link of each (done link id, rest) of ``queue``, then
        delete the entries whose enqueue Redis took."""
        if not entries:
            return 0
        keys = self.keys_of(queue)
        results = self._results(client, keys, entries)
        commands: list[Any] = []
        sent: list[str] = []
        links: list[Link] = []
        stopped: list[tuple[str, Link, str]] = []
        for (link_id, rest), result in zip(entries, results):
            link = rest[0]
            envelope = list(link["e"])
            envelope[2] = int(time.time() * 1000)  # enqueued now, as a job enqueued now
            if link.get("r"):
                if result is None:
                    why = f"the return value of the link before ({link_id}) is gone"
                    stopped.append((link_id, link, why))
                    continue
                try:
                    value = orjson.loads(result)
                except orjson.JSONDecodeError:
                    why = f"the return value of the link before ({link_id}) is not JSON"
                    stopped.append((link_id, link, why))
                    continue
                envelope[1] = [value, *envelope[1]]
            commands.append(
                link_command(self.keys_of(link["q"]), link, rest[1:], orjson.dumps(envelope))
            )
            sent.append(link_id)
            links.append(link)
        done = []
        if commands:
            replies = scripts.call_many(client, commands, raise_on_error=False)
            for link_id, link, reply in zip(sent, links, replies):
                if isinstance(reply, redis.ResponseError) and "fastq enqueue:" in str(reply):
                    stopped.append((link_id, link, f"the enqueue was refused: {reply}"))
                elif isinstance(reply, Exception):
                    log.warning(
                        "chains: the link after %s not enqueued (%s); a reaper tries again",
                        link_id,
                        reply,
                    )
                else:
                    done.append(link_id)
        for link_id, link, why in stopped:
            self._stop(client, link, why)
            done.append(link_id)
        if done:
            client.hdel(keys.chain_out, *done)
        return len(done) - len(stopped)

    def _results(
        self, client: redis.Redis, keys: QueueKeys, entries: list[tuple[str, list[Link]]]
    ) -> list[Optional[bytes]]:
        """The return value of each done link whose next link takes it (else None)."""
        wanted = [link_id for link_id, rest in entries if rest[0].get("r")]
        if not wanted:
            return [None] * len(entries)
        pipe = client.pipeline(transaction=False)
        for link_id in wanted:
            pipe.get(keys.result(link_id))
        got = dict(zip(wanted, pipe.execute()))
        return [got.get(link_id) for link_id, _ in entries]

    def _stop(self, client: redis.Redis, link: Link, why: str) -> None:
        """The chain cannot go on at ``link``: said in its status and the log."""
        log.error("chains: chain %s stops before link %s: %s", link.get("c"), link.get("i"), why)
        key = ChainKeys(self.namespace, str(link.get("c"))).chain
        pipe = client.pipeline(transaction=False)
        # a mapping: redis-py 7 types a value given alone as str
        pipe.hset(key, mapping={"stopped": orjson.dumps({"link": link.get("i"), "why": why})})
        pipe.pexpire(key, KEEP_MS)
        pipe.execute()


def _stamp(raw: bytes) -> int:
    """When an outbox entry was moved (ms); 0 (at once) if it does not say."""
    try:
        return int(raw.partition(b" ")[0])
    except ValueError:
        return 0
