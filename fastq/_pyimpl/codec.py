"""Envelope codec: encoding jobs for enqueue, decoding a claimed batch.

The envelope is the documented wire format (docs/protocol.md), a JSON array:
``[name, args, enqueued_at_ms]``, or ``[name, args, enqueued_at_ms, {fields}]`` when
there is more to say: ``"k"`` (the kwargs, when not empty), ``"p"`` (the priority,
when not 0), a retry override, and after a failure ``attempts``, ``error``... The id
(the jobs hash's field) and the queue (in every key's name) are not repeated in it:
Redis keeps one copy per queued job, and its length decides the allocation. Decoding
also accepts the object of the format before (``{"id", "args", "kwargs", "name",
"queue", "enqueued_at", "priority"}``), so that jobs queued across an upgrade run.

A decoded envelope is a dict: the object of the format before as it is, or for an
array ``{"n": name, "a": args, "t": enqueued_at_ms}`` and the fields of its object
(``"k"``, ``"p"``, ...); :func:`update_envelope` writes it back in its format.
Encoding splices pre-encoded pieces together instead of building a list per job: the
parts shared by a whole batch are encoded once into ``tail`` (:func:`envelope_tail`).

Arguments arrive as sent, or are refused: before orjson encodes args or kwargs, a
walk of their types (:func:`is_plain`) refuses what orjson would send as another type
(a datetime or a UUID as a str, an Enum as its value, a dataclass as a dict) or not
at all, and :func:`find_unsendable` then names where it is (docs/enqueueing.md).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Mapping, Optional, Sequence

import orjson

_EMPTY_ARGS = b"[]"
_P_KWARGS = b',{"k":'
_POSITIONAL = ("n", "a", "t")  # a decoded array's first three items


# orjson refuses to nest deeper ("Recursion limit reached"); past it, the walks
# below leave the value to orjson, whose error is then the one raised
MAX_DEPTH = 255
_MIN_INT = -(2**63)
_MAX_INT = 2**64 - 1  # orjson's range: a C int64 or uint64
_JSON_TYPES = "None, bool, int, float, str, list, tuple, dict with str keys"
# How to send a value of a common type that JSON cannot carry (by the type's module
# and name): the job parses it back, so no type changes on the way.
_HINTS = {
    "datetime.datetime": "value.isoformat() and datetime.fromisoformat() in the job (an "
    "aware datetime keeps its offset)",
    "datetime.date": "value.isoformat() and date.fromisoformat() in the job",
    "datetime.time": "value.isoformat() and time.fromisoformat() in the job",
    "datetime.timedelta": "value.total_seconds()",
    "uuid.UUID": "str(value) and uuid.UUID() in the job",
    "decimal.Decimal": "str(value) and decimal.Decimal() in the job",
    "fractions.Fraction": "str(value) and fractions.Fraction() in the job",
    "set": "a list, e.g. sorted(value)",
    "frozenset": "a list, e.g. sorted(value)",
    "bytes": "text, e.g. value.decode() or base64",
    "bytearray": "text, e.g. value.decode() or base64",
    "memoryview": "text, e.g. base64",
    "complex": "[value.real, value.imag]",
}
_BASES = (bool, int, float, str, list, tuple, dict)


def is_plain(value: Any, depth: int = 0) -> bool:
    """True when ``value`` holds only what arrives as sent: None, bool, int, finite
    float, str, and lists, tuples and dicts (str keys) of them, of these exact
    types (a subclass, an Enum, a datetime, a UUID or a dataclass instance is not
    plain: orjson would send it as another type). Only types are checked: an int
    beyond 64 bits or a str with a lone surrogate is left to orjson."""
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return True
    if t is float:
        return math.isfinite(value)
    if depth >= MAX_DEPTH:
        return True  # orjson refuses it
    if t is list or t is tuple:
        return all(is_plain(item, depth + 1) for item in value)
    if t is dict:
        return all(type(key) is str and is_plain(item, depth + 1) for key, item in value.items())
    return False


def _is_plain_call(value: Any) -> bool:
    # args or kwargs: the container's own type is orjson's to judge (a list or dict
    # subclass is spread into the call, so it changes nothing), its items are not
    if isinstance(value, dict):
        return all(type(key) is str and is_plain(item, 1) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return all(is_plain(item, 1) for item in value)
    return True


def _type_name(value: Any) -> str:
    t = type(value)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


def _hint(value: Any) -> str:
    hint = _HINTS.get(_type_name(value))
    if hint is not None:
        return hint
    if isinstance(value, enum.Enum):
        return "value.value (or value.name) and the Enum in the job"
    if dataclasses.is_dataclass(value):
        return "dataclasses.asdict(value) and the class in the job"
    for base in _BASES:
        if isinstance(value, base):
            return f"{base.__name__}(value)"
    return "its JSON form (a str, a number, a list or a dict of them)"


def find_unsendable(value: Any, depth: int = 0) -> Optional[tuple[str, str]]:
    """Where in ``value`` the first thing JSON cannot carry as it is sits, and what it
    is: ``(path, reason)`` (``("[1]['when']", "is a datetime.datetime: ...")``), else
    None. Looks for what :func:`is_plain` refuses, and for what orjson refuses (an
    int beyond 64 bits, a lone surrogate). Only called on failure: it builds paths.
    """
    t = type(value)
    if t is float:
        if math.isfinite(value):
            return None
        return ("", f"is {value!r}: JSON cannot carry NaN or infinity")
    if t is int:
        if _MIN_INT <= value <= _MAX_INT:
            return None
        return ("", "is an int beyond 64 bits, which JSON numbers cannot carry: send str(value)")
    if t is str:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return ("", "is a str with a lone surrogate, which is not Unicode text")
        return None
    if t is bool or value is None or depth >= MAX_DEPTH:
        return None
    if t is list or t is tuple:
        for i, item in enumerate(value):
            found = find_unsendable(item, depth + 1)
            if found is not None:
                return (f"[{i}]{found[0]}", found[1])
        return None
    if t is dict:
        for key, item in value.items():
            if type(key) is not str:
                return ("", f"has the key {key!r} ({_type_name(key)}): JSON object keys are str")
            found = find_unsendable(item, depth + 1)
            if found is not None:
                return (f"[{key!r}]{found[0]}", found[1])
        return None
    return (
        "",
        f"is a {_type_name(value)}: arguments must be JSON values ({_JSON_TYPES}), "
        f"which the job gets as sent; send {_hint(value)}",
    )


def refuse_unsendable(value: Any, what: str) -> None:
    """Raise the TypeError naming where in ``value`` (``args`` or ``kwargs``, said by
    ``what``) something JSON cannot carry sits; return if there is none.

    Raises:
        TypeError: ``args[1]['when'] is a datetime.datetime, ...``.
    """
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(
                    f"{what} has the key {key!r} ({_type_name(key)}): keyword "
                    "arguments are named by str"
                )
            found = find_unsendable(item, 1)
            if found is not None:
                raise TypeError(f"{what}[{key!r}]{found[0]} {found[1]}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = find_unsendable(item, 1)
            if found is not None:
                raise TypeError(f"{what}[{i}]{found[0]} {found[1]}")


def _dumps(value: Any, what: str) -> bytes:
    """orjson's bytes of args or kwargs, after a check that they arrive as sent.

    Raises:
        TypeError: the first thing they hold that JSON cannot carry as it is, by its
            path; or orjson's own error when there is no such thing (nesting too deep,
            a container of another type).
    """
    if not _is_plain_call(value):
        refuse_unsendable(value, what)
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        refuse_unsendable(value, what)  # an int beyond 64 bits, a lone surrogate
        raise


def envelope_tail(name: Any, enqueued_at_ms: Any, fields: Mapping[str, Any]) -> tuple[bytes, ...]:
    """Encode what a batch shares: ``(head, mid, close, kw_close)``, the bytes before
    the args, between the args and the fields' object, and the two ways to end an
    envelope: without kwargs, and after ``,{"k":<kwargs>``. ``fields`` are those of
    the fields' object beside ``"k"`` (left out when empty)."""
    head = b"[" + orjson.dumps(name) + b","
    mid = b"," + orjson.dumps(enqueued_at_ms)
    body = orjson.dumps(dict(fields))
    if body == b"{}":
        return (head, mid, b"]", b"}]")
    return (head, mid, b"," + body + b"]", b"," + body[1:] + b"]")


def _parts(tail: Any) -> tuple[Any, Any, Any, Any]:
    if type(tail) is not tuple or len(tail) != 4:
        raise TypeError("tail must be the 4-tuple envelope_tail() returns")
    return tail[0], tail[1], tail[2], tail[3]


def encode_envelope(args: Any, kwargs: Any, tail: tuple[bytes, ...]) -> bytes:
    """Encode one envelope: ``[name,<args>,t]``, with ``{"k":<kwargs>}`` (and the
    batch's fields) as a fourth item when kwargs is not empty.

    Raises:
        TypeError: args or kwargs hold what JSON cannot carry as it is (see
            :func:`find_unsendable`; the message says where); ``tail`` is not a tail.
    """
    head, mid, close, kw_close = _parts(tail)
    a = _dumps(args, "args") if args else _EMPTY_ARGS
    if not kwargs:
        return b"".join((head, a, mid, close))
    k = _dumps(kwargs, "kwargs")
    return b"".join((head, a, mid, _P_KWARGS, k, kw_close))


def encode_calls(calls: Sequence[Any], tail: tuple[bytes, ...]) -> list[bytes]:
    """Encode one envelope per call of a blast.

    Each call is a tuple or list of positional arguments, or a dict of keyword
    arguments.

    Raises:
        TypeError: a call is neither, or holds something JSON cannot carry
            (NaN and infinities included); the message names the call's index.
    """
    out = []
    for i, call in enumerate(calls):
        try:
            if isinstance(call, (tuple, list)):
                out.append(encode_envelope(call, None, tail))
            elif isinstance(call, dict):
                out.append(encode_envelope(None, call, tail))
            else:
                raise TypeError(
                    "each call must be a tuple/list of arguments or a dict of keyword "
                    f"arguments, not {type(call).__name__}"
                )
        except TypeError as exc:
            raise TypeError(f"call {i}: {exc}") from None
    return out


def decode_claim(
    reply: Sequence[Any],
    start: int,
    registry: Mapping[str, Any],
    batched: Optional[dict[bytes, str]] = None,
) -> tuple[
    list[tuple[bytes, Any, list[Any], dict[str, Any], int, dict[str, Any]]],
    list[tuple[bytes, str]],
    list[tuple[bytes, str, dict[str, Any]]],
]:
    """Decode the jobs of a claim reply.

    ``reply[start:]`` holds pairs ``id, envelope`` (bytes, bytes). The attempt
    number is one more than the failed attempts the envelope records.

    Returns ``(runnable, broken, unknown)``: runnable is a list of
    ``(id, registry[name], args, kwargs, attempt, envelope_dict)``; broken a list
    of ``(id, reason)`` for payloads that are not JSON objects, whose name is not
    a string, or that carry args/kwargs of the wrong type; unknown a list of
    ``(id, name, envelope_dict)`` for well-formed envelopes whose name (a string)
    ``registry`` lacks: a job of a newer deploy, perhaps (fastq.worker.unknown).
    ``batched``: a dict that learns the batch of each job in one (id -> batch id,
    its envelope's ``b``), for the ack to count them by.
    """
    if start < 0:
        raise ValueError(f"start must be >= 0, not {start}")
    runnable = []
    broken = []
    unknown = []
    for i in range(start, len(reply) - 1, 2):
        job_id = reply[i]
        try:
            env = orjson.loads(reply[i + 1])
        except orjson.JSONDecodeError as exc:
            broken.append((job_id, f"invalid JSON: {exc}"))
            continue
        more: Any = None
        if type(env) is list:
            if len(env) != 3 and len(env) != 4:
                broken.append((job_id, f"envelope array has {len(env)} items, not 3 or 4"))
                continue
            if len(env) == 4:
                more = env[3]
                if type(more) is not dict:
                    broken.append(
                        (
                            job_id,
                            f"envelope item 4 must be a JSON object, not {type(more).__name__}",
                        )
                    )
                    continue
            name = env[0]
            args = env[1]
            kwargs = more.get("k", {}) if more is not None else {}
        elif type(env) is dict:  # the format before
            name = env.get("name")
            args = env.get("args", [])
            kwargs = env.get("kwargs", {})
        else:
            broken.append(
                (job_id, f"envelope is a JSON {type(env).__name__}, not an array or object")
            )
            continue
        target = registry.get(name) if type(name) is str else None
        if target is None and type(name) is not str:
            broken.append((job_id, f"unknown job name {name!r}"))
            continue
        if type(args) is not list:
            broken.append((job_id, f"args must be a JSON array, not {type(args).__name__}"))
            continue
        if type(kwargs) is not dict:
            broken.append((job_id, f"kwargs must be a JSON object, not {type(kwargs).__name__}"))
            continue
        if type(env) is list:
            fields = {"n": name, "a": args, "t": env[2]}
            if more is not None:
                fields.update(more)
                batch = more.get("b")
                if batched is not None and type(batch) is str:
                    batched[job_id] = batch
            env = fields
        if target is None:
            unknown.append((job_id, name, env))
            continue
        failed = env.get("attempts", 0)
        if type(failed) is not int or failed < 0:
            failed = 0
        runnable.append((job_id, target, args, kwargs, failed + 1, env))
    return runnable, broken, unknown


def update_envelope(env: dict[str, Any], fields: Mapping[str, Any]) -> bytes:
    """Set ``fields`` in the decoded envelope ``env`` (in place) and encode it in its
    format: the one way an envelope read back from Redis is written again (after a
    failure)."""
    env.update(fields)
    if "n" not in env:  # the object of the format before stays one
        return orjson.dumps(env)
    more = {key: value for key, value in env.items() if key not in _POSITIONAL}
    if more:
        return orjson.dumps([env["n"], env.get("a", []), env.get("t"), more])
    return orjson.dumps([env["n"], env.get("a", []), env.get("t")])


def first_misfit(calls: Sequence[Any], low: int, high: int, start: int) -> int:
    """Index of the first call from ``start`` on that is not a tuple or list (exactly)
    of ``low`` to ``high`` positional arguments: the next one a producer checks
    against the job's signature. ``len(calls)`` if none."""
    calls = calls if type(calls) is list else list(calls)
    for i in range(max(start, 0), len(calls)):
        call = calls[i]
        if type(call) is not tuple and type(call) is not list:
            return i
        if not low <= len(call) <= high:
            return i
    return len(calls)


def encode_runs(ids: Sequence[bytes], runs: Mapping[bytes, Any]) -> bytes:
    """The runs of the done jobs ``ids`` as an ack carries them for their records
    (``lua/ack.lua``): per id, in order, ``run_ms`` or ``run_ms:attempt`` (``runs``
    holds an int, or a ``(run_ms, attempt)`` tuple), empty for an id ``runs`` lacks
    (0 ms on a first attempt), joined by ``,``; ``b""`` when ``runs`` is empty."""
    if not runs:
        return b""
    parts = []
    for job_id in ids:
        run = runs.get(job_id)
        if run is None:
            parts.append("")
        elif type(run) is tuple:
            parts.append(f"{run[0]}:{run[1]}")
        else:
            parts.append(f"{run}")
    return ",".join(parts).encode()
