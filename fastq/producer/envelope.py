"""The one builder of a job's envelope (docs/protocol.md: its arguments as JSON, with
its name, when it was made and its options).

Every path that makes a job goes through :class:`Envelopes`: the producer's
``enqueue`` and ``enqueue_many`` (and the HTTP door, which enqueues through them), a
chain's links, and the periodic firer. So a job is routed, encoded and held to the
app's payload limit the same way whoever made it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

from fastq._accel import codec
from fastq.retry import envelope_overrides
from fastq.validate import check_group, check_job_name

if TYPE_CHECKING:
    from fastq.job import JobDef
    from fastq.options import EnqueueOptions

# an envelope's encoded tail: its name, time and options (codec.envelope_tail)
Tail = tuple[bytes, ...]


class Envelopes:
    """Routes and encodes the jobs of one app (``registry``: its jobs by name, read
    as they are registered), each at most ``max_payload_bytes`` encoded."""

    def __init__(self, registry: Mapping[str, JobDef[Any]], max_payload_bytes: int) -> None:
        self.registry = registry
        self.max_payload_bytes = max_payload_bytes

    def route(self, name: str, options: EnqueueOptions) -> tuple[str, int]:
        """The queue and priority of a job of ``name``: the options', else the
        registered job's, else ``"default"`` and 0."""
        check_job_name(name)
        jobdef = self.registry.get(name)
        queue = options.queue
        if queue is None:
            queue = jobdef.queue if jobdef else "default"
        priority = options.priority
        if priority is None:
            priority = jobdef.priority if jobdef else 0
        return queue, priority

    def tail(
        self,
        name: str,
        priority: int,
        options: Optional[EnqueueOptions] = None,
        now_ms: Optional[int] = None,
        group: Optional[str] = None,
    ) -> Tail:
        """What the envelopes of jobs of ``name`` made now share: the optional fields
        (none for most jobs), made once for a whole ``enqueue_many``. ``now_ms``:
        when they were made (default: this host's clock); ``group``: theirs, if any
        (:meth:`group_of`)."""
        shared: dict[str, Any] = {}
        if priority:
            shared["p"] = priority
        if group is not None:
            shared["g"] = group
        if options is not None and not (
            options.retry is None and options.retries is None and options.age_limit_s is None
        ):
            # the retry overrides that differ from the job's own policy, so that a
            # worker of any host applies them; the common enqueue adds nothing
            jobdef = self.registry.get(name)
            own = jobdef.policy if jobdef is not None else None
            shared.update(
                envelope_overrides(
                    (own.backoff, own.retries, own.age_limit_s) if own is not None else None,
                    options.retry,
                    options.retries,
                    options.age_limit_s,
                )
            )
        if now_ms is None:
            now_ms = int(time.time() * 1000)
        tail: Tail = codec.envelope_tail(name, now_ms, shared)
        return tail

    def group_of(
        self, name: str, options: EnqueueOptions, args: Sequence[Any], kwargs: Any
    ) -> Optional[str]:
        """The group of a job of ``name`` with these arguments: the enqueue's
        ``group=``, else the job's template formatted from them, else None.

        Raises:
            ValueError: the formatted group is not a usable group name.
        """
        if options.group is not None:
            return options.group
        jobdef = self.registry.get(name)
        template = jobdef.group if jobdef is not None else None
        if template is None:
            return None
        group = template.format(args, kwargs)
        if group is None:  # arguments that do not bind: the arg check refuses them
            return None
        return check_group(group, f"group (from {template.template!r})")

    def encode(self, name: str, args: Sequence[Any], kwargs: Any, tail: Tail) -> bytes:
        """One job's envelope.

        Raises:
            TypeError: an argument JSON cannot carry as it is (the message says where).
            ValueError: the envelope is larger than the payload limit.
        """
        env: bytes = codec.encode_envelope(args, kwargs, tail)
        if len(env) > self.max_payload_bytes:
            raise ValueError(self.too_large(name, len(env)))
        return env

    def encode_calls(self, name: str, calls: Sequence[Any], tail: Tail) -> list[bytes]:
        """The envelopes of many calls of one job (each a list or tuple of positional
        arguments, or a dict of keyword arguments), in one native pass.

        Raises:
            TypeError, ValueError: as :meth:`encode`, naming the call's index.
        """
        envs: list[bytes] = codec.encode_calls(calls, tail)
        limit = self.max_payload_bytes
        if envs and max(map(len, envs)) > limit:
            i = next(i for i, env in enumerate(envs) if len(env) > limit)
            raise ValueError(f"call {i}: {self.too_large(name, len(envs[i]))}")
        return envs

    def too_large(self, name: str, size: int) -> str:
        return (
            f"job {name!r} is {size:,} bytes encoded, over the limit of "
            f"{self.max_payload_bytes:,} (App(max_payload_bytes=...)): pass a "
            "reference to the data (a key, a URL), not the data"
        )
