"""Envelope codec: encoding jobs for enqueue, decoding a claimed batch.

The envelope is the documented wire format (README, "How it works"), a JSON
object with short field names, each written only when it says something:
``{"a": args, "k": kwargs (when not empty), "n": name, "t": enqueued_at (ms),
"p": priority (when not 0), ...options}``. The id (the jobs hash's field) and the
queue (in every key's name) are not repeated in it: Redis keeps one copy per
queued job, and these bytes decide its size class. Decoding also accepts the
format before it (``"args"``, ``"kwargs"``, ``"name"``), so that jobs queued
across an upgrade still run.
Encoding splices pre-encoded pieces together instead of building a dict per job:
the fields shared by a whole batch are encoded once into ``tail``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Optional, Sequence

import orjson

_EMPTY_ARGS = b"[]"
_NULL = b"null"
_P_ARGS = b'{"a":'
_P_KWARGS = b',"k":'


def find_non_finite(value: Any) -> Optional[tuple[str, float]]:
    """The first NaN or infinite float inside ``value``: ``(path, value)``, else None.

    orjson writes those as ``null`` (it has no option to refuse them), so a job
    would run with ``None``. Callers walk only when the encoded bytes hold
    ``null``: the common case pays one byte search. Looks inside what orjson
    encodes as containers: lists, tuples, dicts and dataclass instances.
    """
    if isinstance(value, float):
        return None if math.isfinite(value) else ("", value)
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found = find_non_finite(item)
            if found is not None:
                return (f"[{i}]{found[0]}", found[1])
    elif isinstance(value, dict):
        for key, item in value.items():
            found = find_non_finite(item)
            if found is not None:
                return (f"[{key!r}]{found[0]}", found[1])
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            found = find_non_finite(getattr(value, field.name))
            if found is not None:
                return (f".{field.name}{found[0]}", found[1])
    return None


def _refuse_non_finite(value: Any, what: str) -> None:
    found = find_non_finite(value)
    if found is not None:
        raise TypeError(f"{what}{found[0]} is {found[1]!r}: JSON cannot carry NaN or infinity")


def envelope_tail(shared: Mapping[str, Any]) -> bytes:
    """Encode the fields a batch shares, as the end of an envelope: ``,"n":...}``."""
    body = orjson.dumps(dict(shared))
    if body == b"{}":
        return b"}"
    return b"," + body[1:]


def encode_envelope(args: Any, kwargs: Any, tail: bytes) -> bytes:
    """Encode one envelope: ``{"a":<args>`` then ``,"k":<kwargs>`` when kwargs is
    not empty, then ``tail``.

    Raises:
        TypeError: args or kwargs are not JSON-serializable, or hold a NaN or an
            infinite float (the message says where).
    """
    a = orjson.dumps(args) if args else _EMPTY_ARGS
    if _NULL in a:
        _refuse_non_finite(args, "args")
    if not kwargs:
        return b"".join((_P_ARGS, a, tail))
    k = orjson.dumps(kwargs)
    if _NULL in k:
        _refuse_non_finite(kwargs, "kwargs")
    return b"".join((_P_ARGS, a, _P_KWARGS, k, tail))


def encode_calls(calls: Sequence[Any], tail: bytes) -> list[bytes]:
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
    reply: Sequence[Any], start: int, registry: Mapping[str, Any]
) -> tuple[
    list[tuple[bytes, Any, list[Any], dict[str, Any], int, dict[str, Any]]],
    list[tuple[bytes, str]],
]:
    """Decode the jobs of a claim reply.

    ``reply[start:]`` holds pairs ``id, envelope`` (bytes, bytes). The attempt
    number is one more than the failed attempts the envelope records.

    Returns ``(runnable, broken)``: runnable is a list of
    ``(id, registry[name], args, kwargs, attempt, envelope_dict)``; broken a list
    of ``(id, reason)`` for payloads that are not JSON objects, name a job
    missing from ``registry``, or carry args/kwargs of the wrong type.
    """
    if start < 0:
        raise ValueError(f"start must be >= 0, not {start}")
    runnable = []
    broken = []
    for i in range(start, len(reply) - 1, 2):
        job_id = reply[i]
        try:
            env = orjson.loads(reply[i + 1])
        except orjson.JSONDecodeError as exc:
            broken.append((job_id, f"invalid JSON: {exc}"))
            continue
        if type(env) is not dict:
            broken.append((job_id, f"envelope is a JSON {type(env).__name__}, not an object"))
            continue
        # each field also under its name in the format before (a job queued then)
        name = env["n"] if "n" in env else env.get("name")
        target = registry.get(name) if type(name) is str else None
        if target is None:
            broken.append((job_id, f"unknown job name {name!r}"))
            continue
        args = env["a"] if "a" in env else env.get("args", [])
        kwargs = env["k"] if "k" in env else env.get("kwargs", {})
        if type(args) is not list:
            broken.append((job_id, f"args must be a JSON array, not {type(args).__name__}"))
            continue
        if type(kwargs) is not dict:
            broken.append((job_id, f"kwargs must be a JSON object, not {type(kwargs).__name__}"))
            continue
        failed = env.get("attempts", 0)
        if type(failed) is not int or failed < 0:
            failed = 0
        runnable.append((job_id, target, args, kwargs, failed + 1, env))
    return runnable, broken


def update_envelope(env: dict[str, Any], fields: Mapping[str, Any]) -> bytes:
    """Set ``fields`` in the decoded envelope ``env`` (in place) and encode it: the
    one way an envelope read back from Redis is written again (after a failure)."""
    env.update(fields)
    return orjson.dumps(env)
