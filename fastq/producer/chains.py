"""Chains: jobs run one after another, each enqueued when the one before succeeds.

``app.chain(fetch.step(url), parse.step(), store.step(), pass_results=True)``
enqueues the first link and returns the chain's id; each link's id is chosen here
(``<chain>``, ``<chain>.2``, ...). What Redis holds, and why a chain never stalls
nor forks when a worker dies between a link's success and its ack, is in
:mod:`fastq.protocol.chains`; this module makes chains, reads their status, and
forwards their links (for the worker and the reaper).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional

import orjson
import redis

from fastq.job import Step
from fastq.producer.batches import current_batch
from fastq.producer.routing import plan_calls
from fastq.protocol import scripts
from fastq.protocol.chains import Forwarder, Link, link_command, read_chain, write_chain
from fastq.protocol.introspect import get_job, which_exist
from fastq.protocol.keys import ChainKeys
from fastq.validate import check_job_id

if TYPE_CHECKING:
    from fastq.producer.enqueue import Producer

# the states of a link that end its chain there
_STOPS = {"dead": "died", "broken": "is broken", "cancelled": "was cancelled"}


@dataclass(frozen=True)
class LinkStatus:
    """One link of a chain: ``state`` as :meth:`fastq.App.get_job` says (None: not
    enqueued yet, or its record is gone)."""

    index: int  # from 1
    name: str
    id: str
    queue: str
    state: Optional[str]
    attempts: int = 0
    error: Optional[str] = None


@dataclass(frozen=True)
class ChainStatus:
    """A chain: ``state`` is "running", "done" (its last link done) or "failed";
    a failed chain names the link where it stopped (``failed_link``) and why
    (``error``)."""

    id: str
    state: str
    links: list[LinkStatus] = field(default_factory=list)
    failed_link: Optional[LinkStatus] = None
    error: Optional[str] = None


class ChainBook:
    """An app's chains (``fastq.App`` delegates ``chain`` and ``chain_status``)."""

    def __init__(self, producer_of: Callable[[], Producer]) -> None:
        # the app's producer, read at each call: a test mode swaps it
        self.producer_of = producer_of
        self.store = producer_of().store
        self.forwarder = Forwarder(self.store.keys, self.store.namespace)

    def chain(self, *steps: Step, pass_results: bool = False, id: Optional[str] = None) -> str:  # noqa: A002
        """Enqueue the first of ``steps`` (made with ``job.step(...)``), the others
        to follow it one at a time, each once the one before succeeded; returns the
        chain's id, which is also the first link's job id (the others' are
        ``<id>.2``, ``<id>.3``...). With ``pass_results``, each link after the first
        gets the return value of the one before as its first argument (a step's
        ``.options(pass_result=...)`` says so for itself); the jobs whose value is
        passed must keep it (``@app.job(result_ttl_s=...)``).

        A link that dies, breaks or is cancelled ends the chain there:
        :meth:`chain_status` names it. Enqueueing the same ``id`` again adds
        nothing while its first link (or its record) lasts.

        Raises:
            TypeError: a step is not one, or its arguments do not fit its function.
            ValueError: no step; a bad id; a value passed from a job that does not
                keep it; a chain made inside ``with app.batch()`` (a chain is not
                counted in a batch: make it outside the block).
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`fastq.App.enqueue`.
        """
        producer = self.producer_of()
        if producer.transport.in_memory:
            raise ValueError(
                "app.chain needs Redis: inside app.stub() or app.eager() a chain is not "
                "run; test it against a redis-server (fastq.testing.RedisServer)"
            )
        if current_batch() is not None:
            raise ValueError(
                "a chain cannot join a batch: its links after the first are enqueued "
                "later, outside the batch's count; make the chain outside the "
                "`with app.batch()` block"
            )
        if not steps:
            raise ValueError("a chain needs at least one step")
        for i, step in enumerate(steps):
            if not isinstance(step, Step):
                raise TypeError(f"step {i + 1} must be a job's .step(...), not {step!r}")
        chain_id = id if id is not None else producer.new_ids(1)[0]
        check_job_id(chain_id)
        for i in range(2, len(steps) + 1):
            check_job_id(f"{chain_id}.{i}")
        with self.store.producer_call():
            links, envelopes = self._links(producer, chain_id, steps, pass_results)
            client = self.store.redis
            about = [
                {"q": link["q"], "id": link["id"], "n": steps[k].job.name}
                for k, link in enumerate(links)
            ]
            write_chain(client, ChainKeys(self.store.namespace, chain_id), about)
            first = links[0]
            command = link_command(self.store.keys(first["q"]), first, links[1:], envelopes[0])
            scripts.call_many(client, [command])
        return chain_id

    def _links(
        self, producer: Producer, chain_id: str, steps: tuple[Step, ...], pass_results: bool
    ) -> tuple[list[Link], list[bytes]]:
        """Each step as a link, and its envelope as sent."""
        links: list[Link] = []
        envelopes: list[bytes] = []
        for i, step in enumerate(steps, 1):
            name = step.job.name
            options = step.enqueue_options
            queue, priority = producer.envelopes.route(name, options)
            takes = i > 1 and (pass_results if step.pass_result is None else step.pass_result)
            if takes:
                before = steps[i - 2].job
                if before.result_ttl_ms is None:
                    raise ValueError(
                        f"step {i} ({name}) takes the return value of step {i - 1} "
                        f"({before.name}), which does not keep it: register "
                        f"{before.name} with result_ttl_s"
                    )
            args = list(step.args)
            step.job.arg_checker.check([None, *args] if takes else args, step.kwargs)
            tail = producer.envelopes.tail(name, priority, options)
            try:
                env = producer.envelopes.encode(name, args, step.kwargs, tail)
            except ValueError as exc:
                raise ValueError(f"step {i}: {exc}") from None
            link_id = chain_id if i == 1 else f"{chain_id}.{i}"
            link: Link = {"c": chain_id, "i": i, "q": queue, "id": link_id, "p": priority}
            link["e"] = orjson.loads(env)
            if takes:
                link["r"] = 1
            links.append(link)
            envelopes.append(env)
        # every step checked: now each queue known to Redis, and each link's shard
        for step, link in zip(steps, links):
            shards = producer.transport.open(link["q"])
            route = [link["id"]]
            options = step.enqueue_options
            parts = plan_calls(self.store.shard_counts, link["q"], shards, 1, 1, options, route)
            link["q"] = parts[0][0]
        return links, envelopes

    def chain_status(self, chain_id: str) -> Optional[ChainStatus]:
        """Where a chain stands: each link's state, and for a chain that failed,
        which link and why. None: no such chain (or it expired, a week after it
        was made).

        Raises:
            fastq.RedisUnavailable, fastq.RedisRefused: as :meth:`fastq.App.enqueue`.
        """
        with self.store.producer_call():
            client = self.store.redis
            raw = read_chain(client, ChainKeys(self.store.namespace, chain_id))
            if raw is None:
                return None
            links = []
            for i, about in enumerate(orjson.loads(raw[b"links"]), 1):
                info = get_job(client, self.store.keys(about["q"]), about["id"])
                error = None
                if info is not None:
                    error = info.broken_reason if info.state == "broken" else info.last_error
                links.append(
                    LinkStatus(
                        i,
                        about["n"],
                        about["id"],
                        about["q"],
                        info.state if info is not None else None,
                        info.attempts if info is not None else 0,
                        error,
                    )
                )
        return _status(chain_id, links, raw.get(b"stopped"))

    def forward(self, client: redis.Redis, queue: str, link_ids: list[str]) -> int:
        """Forward the links of ``queue`` an ack moved out (the worker's call)."""
        return self.forwarder.forward(client, queue, link_ids)

    def resume(self, client: redis.Redis, queues: list[str]) -> int:
        """A reaper's turn: forward the links done whose worker did not (one EXISTS
        on a single Redis for an idle namespace)."""
        out_keys = [self.store.keys(queue).chain_out for queue in queues]
        if not out_keys:
            return 0
        if not self.store.cluster_flag and not which_exist(client, [out_keys])[0]:
            return 0
        n = 0
        for queue, has in zip(queues, which_exist(client, [[key] for key in out_keys])):
            if has:
                n += self.forwarder.forward_left(client, queue)
        return n


def _status(chain_id: str, links: list[LinkStatus], stopped: Optional[bytes]) -> ChainStatus:
    for link in links:
        why = _STOPS.get(link.state or "")
        if why is not None:
            error = f"link {link.index} ({link.name}) {why}" + (
                f": {link.error}" if link.error else ""
            )
            return ChainStatus(chain_id, "failed", links, link, error)
    if stopped is not None:
        at = orjson.loads(stopped)
        index = at.get("link")
        link = links[index - 1] if isinstance(index, int) and 0 < index <= len(links) else links[-1]
        why = f"link {link.index} ({link.name}) was not enqueued: {at['why']}"
        return ChainStatus(chain_id, "failed", links, link, why)
    if links and links[-1].state == "done":
        return ChainStatus(chain_id, "done", links)
    return ChainStatus(chain_id, "running", links)
