"""The compiled kernels (fastq_ext) against the pure-Python reference (fastq._pyimpl).

Same inputs must give equal results, or the same exception type with the same
message. No Redis needed.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import types
import uuid
from collections import OrderedDict
from datetime import date, datetime, time, timezone
from decimal import Decimal
from typing import Any, Callable

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastq._pyimpl import backoff as ref_backoff
from fastq._pyimpl import codec as ref_codec
from fastq._pyimpl import ids as ref_ids
from fastq_ext import backoff as native_backoff
from fastq_ext import codec as native_codec
from fastq_ext import ids as native_ids
from tests.support.examples import examples

SETTINGS = settings(
    max_examples=examples(150),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
SCALARS = (
    st.none()
    | st.booleans()
    | INT64
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
ARGS_LIST = st.lists(JSON, max_size=4)
ARGS = ARGS_LIST | ARGS_LIST.map(tuple)
KWARGS = st.dictionaries(st.text(max_size=8), JSON, max_size=4)
CALL = ARGS | KWARGS
JOB_ID = st.text(max_size=40)
SHARED = st.dictionaries(st.text(max_size=8), JSON, max_size=5)
# Values orjson refuses, each with its own message.
UNSERIALIZABLE = st.sampled_from(
    [set(), {1}, object(), {1: 2}, {"k": {2: 3}}, 2**64, 2**64 + 7, -(2**63) - 1, "\ud800"]
)


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """What a call did: its result, or its exception's exact type and message."""
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # compared by the caller, not swallowed
        return ("raised", type(exc), str(exc))


def assert_same(ref_fn: Callable[..., Any], nat_fn: Callable[..., Any], *args: Any) -> Any:
    ref = outcome(ref_fn, *args)
    nat = outcome(nat_fn, *args)
    assert nat == ref
    if ref[0] == "ok":
        assert type(nat[1]) is type(ref[1])
    return ref


# --- envelope_tail / encode_envelope ------------------------------------------------------


@SETTINGS
@given(st.text(max_size=8) | JSON, st.integers(0, 2**45) | JSON, SHARED)
def test_envelope_tail(name: Any, t: Any, shared: dict[str, Any]) -> None:
    ref = assert_same(ref_codec.envelope_tail, native_codec.envelope_tail, name, t, shared)
    assert ref[0] == "ok"


@SETTINGS
@given(st.none() | ARGS, st.none() | KWARGS, SHARED)
def test_encode_envelope(args: Any, kwargs: Any, shared: dict[str, Any]) -> None:
    tail = ref_codec.envelope_tail("tasks.add", 1700000000250, shared)
    ref = assert_same(ref_codec.encode_envelope, native_codec.encode_envelope, args, kwargs, tail)
    assert ref[0] == "ok"
    # [name, args, t], and an object of the kwargs ("k") and the shared fields if any
    expected: list[Any] = ["tasks.add", orjson.loads(orjson.dumps(args or [])), 1700000000250]
    more = {"k": orjson.loads(orjson.dumps(kwargs))} if kwargs else {}
    more.update(orjson.loads(orjson.dumps(shared)))
    if more:
        expected.append(more)
    assert orjson.loads(ref[1]) == expected


TAIL = ref_codec.envelope_tail("x", 1, {})


@pytest.mark.parametrize(
    "tail",
    [
        b"}",
        None,
        (),
        TAIL[:3],
        [*TAIL],
        (bytearray(b'["x",'), *TAIL[1:]),
        (memoryview(b'["x",'), *TAIL[1:]),
        (*TAIL[:3], "}]"),
        ("[", 1, "]", "]"),
    ],
)
def test_encode_envelope_odd_tails(tail: Any) -> None:
    for args, kwargs in ((["a"], None), (None, {"k": 1}), ((), {})):
        assert_same(ref_codec.encode_envelope, native_codec.encode_envelope, args, kwargs, tail)


# Any float, NaN and infinities included: orjson writes those as null, the codecs refuse them.
ANY_FLOAT = st.floats() | st.sampled_from([float("nan"), float("inf"), float("-inf"), -0.0])
JSON_NF = st.recursive(
    SCALARS | ANY_FLOAT,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
ARGS_NF = st.lists(JSON_NF, max_size=4) | st.lists(JSON_NF, max_size=4).map(tuple)
KWARGS_NF = st.dictionaries(st.text(max_size=8), JSON_NF, max_size=4)


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return value != value or value in (float("inf"), float("-inf"))
    if isinstance(value, (list, tuple)):
        return any(_has_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(_has_non_finite(v) for v in value.values())
    return False


@SETTINGS
@given(st.none() | ARGS_NF, st.none() | KWARGS_NF)
def test_encode_envelope_non_finite(args: Any, kwargs: Any) -> None:
    ref = assert_same(ref_codec.encode_envelope, native_codec.encode_envelope, args, kwargs, TAIL)
    if _has_non_finite(args) or _has_non_finite(kwargs):
        assert ref[0] == "raised" and ref[1] is TypeError
        assert "JSON cannot carry NaN or infinity" in ref[2]
    else:
        assert ref[0] == "ok"


@SETTINGS
@given(st.lists(ARGS_NF | KWARGS_NF, max_size=8))
def test_encode_calls_non_finite(calls: list[Any]) -> None:
    ref = assert_same(ref_codec.encode_calls, native_codec.encode_calls, calls, TAIL)
    bad = [i for i, call in enumerate(calls) if _has_non_finite(call)]
    if bad:
        assert ref[0] == "raised" and ref[1] is TypeError
        assert ref[2].startswith(f"call {bad[0]}: ")
        assert ref[2].endswith("JSON cannot carry NaN or infinity")
    else:
        assert ref[0] == "ok"


@dataclasses.dataclass
class _Point:
    x: float
    y: Any = None


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ([1.0, [2, {"k": float("nan")}]], None, "args[1][1]['k'] is nan: "),
        (None, {"a": None, "b": (float("-inf"),)}, "kwargs['b'][0] is -inf: "),
        # a dataclass instance would arrive as a dict: refused before its fields are seen
        ([_Point(1.0, _Point(float("inf")))], None, f"args[0] is a {__name__}._Point: "),
        ([None, "null", {"null": None}], None, None),  # a None is fine
    ],
)
def test_non_finite_paths(args: Any, kwargs: Any, message: Any) -> None:
    for codec in (ref_codec, native_codec):
        if message is None:
            assert orjson.loads(codec.encode_envelope(args, kwargs, TAIL))[1] == args
        else:
            with pytest.raises(TypeError, match=re.escape(message)):
                codec.encode_envelope(args, kwargs, TAIL)
            with pytest.raises(TypeError, match=re.escape("call 1: " + message)):
                codec.encode_calls([[1], args or kwargs], TAIL)


class _Color(enum.Enum):
    RED = "red"


class _Level(enum.IntEnum):
    HIGH = 3


class _Str(str):
    pass


# What orjson would send as another type (or not at all), each with its type's name in
# the message: none of them goes, whatever the path to it.
NOT_PLAIN: list[tuple[Any, str]] = [
    (datetime(2026, 11, 27, 9, 30, tzinfo=timezone.utc), "is a datetime.datetime: "),
    (datetime(2026, 11, 27, 9, 30), "is a datetime.datetime: "),
    (date(2026, 11, 27), "is a datetime.date: "),
    (time(9, 30), "is a datetime.time: "),
    (uuid.UUID(int=7), "is a uuid.UUID: "),
    (Decimal("1.10"), "is a decimal.Decimal: "),
    ({1, 2}, "is a set: "),
    (frozenset(), "is a frozenset: "),
    (b"x", "is a bytes: "),
    (_Color.RED, f"is a {__name__}._Color: "),
    (_Level.HIGH, f"is a {__name__}._Level: "),
    (_Str("x"), f"is a {__name__}._Str: "),
    (_Point(1.0), f"is a {__name__}._Point: "),
    (OrderedDict(a=1), "is a collections.OrderedDict: "),
    (object(), "is a object: "),
    (2**64, "is an int beyond 64 bits"),
    (-(2**63) - 1, "is an int beyond 64 bits"),
    ("\ud800", "is a str with a lone surrogate"),
    (float("nan"), "is nan: JSON cannot carry NaN or infinity"),
]


@st.composite
def with_misfit(draw: st.DrawFn) -> tuple[Any, Any, str, str]:
    """``(args, kwargs, path, reason)``: plain args and kwargs, one value put somewhere
    inside them (the first thing not plain, in encoding order) at ``path``."""
    bad, reason = draw(st.sampled_from(NOT_PLAIN))
    args: Any = draw(st.lists(JSON, max_size=3))
    kwargs: Any = draw(st.dictionaries(st.text(max_size=4), JSON, max_size=3))
    in_args = draw(st.booleans())
    path = ""
    value = bad
    for _ in range(draw(st.integers(0, 3))):  # wrapped in lists and dicts
        if draw(st.booleans()):
            before = draw(st.lists(JSON, max_size=2))
            value, path = [*before, value], f"[{len(before)}]{path}"
        else:
            key = draw(st.text(max_size=4))
            value, path = {key: value}, f"[{key!r}]{path}"
    if in_args:
        at = draw(st.integers(0, len(args)))
        args.insert(at, value)
        path = f"args[{at}]{path}"
        args = tuple(args) if draw(st.booleans()) else args
    else:
        key = draw(st.text(min_size=5, max_size=6))  # not one of the others
        kwargs[key] = value
        path = f"kwargs[{key!r}]{path}"
    return args, kwargs, path, reason


@SETTINGS
@given(with_misfit())
def test_not_plain_is_refused_with_its_path(drawn: tuple[Any, Any, str, str]) -> None:
    args, kwargs, path, reason = drawn
    ref = assert_same(ref_codec.encode_envelope, native_codec.encode_envelope, args, kwargs, TAIL)
    assert ref[0] == "raised" and ref[1] is TypeError
    assert ref[2].startswith(f"{path} {reason}")
    # in a blast, as the second call
    call = args if path.startswith("args") else kwargs
    if path.startswith("kwargs") and args:
        return  # a call is args or kwargs, not both
    ref = assert_same(ref_codec.encode_calls, native_codec.encode_calls, [[1], call], TAIL)
    assert ref[0] == "raised" and ref[2].startswith(f"call 1: {path} {reason}")


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (
            (1, {"when": datetime(2026, 1, 1, tzinfo=timezone.utc)}),
            None,
            "args[1]['when'] is a datetime.datetime: arguments must be JSON values (None, "
            "bool, int, float, str, list, tuple, dict with str keys), which the job gets as "
            "sent; send value.isoformat() and datetime.fromisoformat() in the job (an aware "
            "datetime keeps its offset)",
        ),
        (
            None,
            {"at": [1, 2, uuid.UUID(int=1)]},
            "kwargs['at'][2] is a uuid.UUID: arguments must be JSON values (None, bool, int, "
            "float, str, list, tuple, dict with str keys), which the job gets as sent; send "
            "str(value) and uuid.UUID() in the job",
        ),
        (
            [Decimal("9.99")],
            None,
            "args[0] is a decimal.Decimal: arguments must be JSON values (None, bool, int, "
            "float, str, list, tuple, dict with str keys), which the job gets as sent; send "
            "str(value) and decimal.Decimal() in the job",
        ),
        (
            [[{"x": 1}, {"y": {3: 4}}]],
            None,
            "args[0][1]['y'] has the key 3 (int): JSON object keys are str",
        ),
        (None, {1: 2}, "kwargs has the key 1 (int): keyword arguments are named by str"),
    ],
)
def test_not_plain_messages(args: Any, kwargs: Any, message: str) -> None:
    for codec in (ref_codec, native_codec):
        with pytest.raises(TypeError) as info:
            codec.encode_envelope(args, kwargs, TAIL)
        assert str(info.value) == message


# --- encode_calls ---------------------------------------------------------------------------


@SETTINGS
@given(st.lists(CALL, max_size=12), SHARED)
def test_encode_calls(calls: list[Any], shared: dict[str, Any]) -> None:
    tail = ref_codec.envelope_tail("tasks.add", 1700000000250, shared)
    ref = assert_same(ref_codec.encode_calls, native_codec.encode_calls, calls, tail)
    assert ref[0] == "ok"
    assert len(ref[1]) == len(calls)
    # the same again through the other container types and a one-shot iterable
    assert_same(ref_codec.encode_calls, native_codec.encode_calls, tuple(calls), tail)
    assert native_codec.encode_calls(iter(calls), tail) == ref[1]
    # one call at a time gives the same bytes as the blast
    one = [
        ref_codec.encode_envelope(*((c, None) if isinstance(c, (list, tuple)) else (None, c)), tail)
        for c in calls
    ]
    assert one == ref[1]


@SETTINGS
@given(
    st.lists(CALL, min_size=1, max_size=8),
    st.data(),
    UNSERIALIZABLE,
)
def test_encode_calls_unserializable(calls: list[Any], data: st.DataObject, bad: Any) -> None:
    calls = list(calls)
    where = data.draw(st.sampled_from(["args", "kwargs", "nested"]))
    i = data.draw(st.integers(0, len(calls) - 1))
    if where == "args":
        calls[i] = [*(calls[i] if isinstance(calls[i], (list, tuple)) else []), bad]
    elif where == "kwargs":
        calls[i] = {"bad": bad}
    else:
        calls[i] = [[{"deep": [bad]}]]
    ref = assert_same(ref_codec.encode_calls, native_codec.encode_calls, calls, TAIL)
    assert ref[0] == "raised" and ref[1] is TypeError
    assert ref[2].startswith(f"call {i}: ")


@pytest.mark.parametrize("call", [None, 5, "abc", b"abc", {1, 2}, frozenset(), 1.5, object()])
@pytest.mark.parametrize("position", [0, 2])
def test_encode_calls_wrong_call_type(call: Any, position: int) -> None:
    calls: list[Any] = [("a", "b"), {"k": 1}, ["c"]]
    calls.insert(position, call)
    ref = assert_same(ref_codec.encode_calls, native_codec.encode_calls, calls, TAIL)
    assert ref[0] == "raised" and ref[1] is TypeError
    assert ref[2].startswith(f"call {position}: each call must be")
    # the message carries exception context suppression like the reference
    with pytest.raises(TypeError) as info:
        native_codec.encode_calls(calls, TAIL)
    assert info.value.__suppress_context__


class _ListSub(list):  # type: ignore[type-arg]
    pass


class _TupleSub(tuple):  # type: ignore[type-arg]
    pass


class _DictSub(dict):  # type: ignore[type-arg]
    pass


@pytest.mark.parametrize(
    "calls, tail",
    [
        ([(1,), (2,)], TAIL),
        ([], TAIL),
        ([], b"}"),  # no call, no check of the tail
        ([(1,)], TAIL),
        ([(1,), {"x": 1}], ref_codec.envelope_tail("x", 1, {"p": 2})),
        ([["x"], {"y": [1]}, ()], TAIL),
        (5, TAIL),  # calls not iterable: TypeError, not wrapped
        ([(1,), (2,)], b"}"),  # not a tail: TypeError, wrapped
        ([(1,), (2,)], (*TAIL[:3], "}]")),  # str in the tail: join fails, wrapped
        ([(1,), (2,)], (bytearray(b'["x",'), *TAIL[1:])),
        ([_ListSub([1]), _TupleSub((2,)), _DictSub(k=3)], TAIL),
        ([_ListSub(), _DictSub()], TAIL),
        ([_TupleSub((1, 2)), [1]], TAIL),  # orjson refuses tuple subclasses
        ([[], {}, ()], TAIL),  # empty kwargs are left out, as empty args are not
        ([{}, {"a": 1}, {}], ref_codec.envelope_tail("x", 1, {"p": 2})),
        ([[True, None, 1.5, -(2**63), 2**64 - 1], {"é": '\u2028\x00"\\'}], TAIL),
    ],
)
def test_encode_calls_edge_cases(calls: Any, tail: Any) -> None:
    assert_same(ref_codec.encode_calls, native_codec.encode_calls, calls, tail)


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [250, 252, 253, 254, 255, 256])
def test_encode_calls_near_orjson_recursion_limit(depth: int) -> None:
    calls = [["x"], _nested(depth), {"k": _nested(depth - 1)}]
    assert_same(ref_codec.encode_calls, native_codec.encode_calls, calls, TAIL)


# --- decode_claim ---------------------------------------------------------------------------

REGISTRY: dict[str, Any] = {"tasks.add": len, "tasks.mul": max, "tasks.none": None, "é": abs}
NAMES = st.sampled_from(sorted(REGISTRY)) | st.sampled_from(["missing", ""]) | st.text(max_size=6)
JOB_KEY = st.binary(min_size=1, max_size=12)


@st.composite
def envelopes(draw: st.DrawFn) -> Any:
    """Good envelopes and every way of being broken."""
    kind = draw(
        st.sampled_from(
            [
                "good",
                "good",
                "good",
                "invalid",
                "non_object",
                "bad_name",
                "bad_args",
                "bad_kwargs",
                "missing_fields",
                "str_payload",
                "odd_payload",
            ]
        )
    )
    # the current format, or the one before (jobs queued across an upgrade)
    if draw(st.booleans()):
        env: dict[str, Any] = {
            "id": draw(JOB_ID),
            "args": draw(ARGS_LIST),
            "kwargs": draw(KWARGS),
            "name": draw(NAMES),
            "queue": "default",
            "enqueued_at": 1.5,
        }
        old = True
    else:
        kwargs = draw(KWARGS)
        arr: list[Any] = [draw(NAMES), draw(ARGS_LIST), 1500]
        if kwargs or draw(st.booleans()):
            arr.append({"k": kwargs} if kwargs else {})
        old = False
    if kind == "invalid":
        return draw(
            st.binary(max_size=20)
            | st.sampled_from([b"", b"{", b'{"name":', b"[1,]", b"\xff\xfe", b"nul", b"{} {}"])
        )
    if kind == "non_object":
        return orjson.dumps(draw(JSON.filter(lambda v: not isinstance(v, (dict, list)))))
    if old:
        if kind == "bad_name":
            env["name"] = draw(JSON)
        elif kind == "bad_args":
            env["args"] = draw(JSON.filter(lambda v: not isinstance(v, list)))
        elif kind == "bad_kwargs":
            env["kwargs"] = draw(JSON.filter(lambda v: not isinstance(v, dict)))
        elif kind == "missing_fields":
            for field in draw(st.lists(st.sampled_from(["args", "kwargs", "name"]), max_size=3)):
                env.pop(field, None)
        payload = orjson.dumps(env)
    else:
        if kind == "bad_name":
            arr[0] = draw(JSON)
        elif kind == "bad_args":
            arr[1] = draw(JSON.filter(lambda v: not isinstance(v, list)))
        elif kind == "bad_kwargs":
            if draw(st.booleans()):
                arr[3:] = [{"k": draw(JSON.filter(lambda v: not isinstance(v, dict)))}]
            else:  # the fourth item is not an object
                arr[3:] = [draw(JSON.filter(lambda v: not isinstance(v, dict)))]
        elif kind == "missing_fields":  # too few items, or too many
            arr = arr[: draw(st.integers(0, 2))] if draw(st.booleans()) else [*arr, {}, 1][:5]
        payload = orjson.dumps(arr)
    if kind == "str_payload":
        return payload.decode()
    if kind == "odd_payload":
        return draw(st.sampled_from([bytearray(payload), memoryview(payload), None, 7]))
    return payload


def with_attempts(env: bytes, attempts: Any) -> bytes:
    """The envelope as a failure rewrites it: ``attempts`` in its object (added)."""
    value = orjson.dumps(attempts, default=repr)
    if env.startswith(b'{"id"'):  # the format before
        return env[:-1] + b',"attempts":' + value + b"}"
    if env.startswith(b"[") and env.endswith(b"}]"):
        body = b"" if env.endswith(b"{}]") else b","
        return env[:-2] + body + b'"attempts":' + value + b"}]"
    if env.startswith(b"[") and env.endswith(b"]"):
        return env[:-1] + b',{"attempts":' + value + b"}]"
    return env


ATTEMPTS = st.none() | st.integers(-3, 2**40) | st.sampled_from([True, b"3", "4", 2.5, None])


@st.composite
def replies(draw: st.DrawFn) -> tuple[list[Any], int, bool]:
    """``(reply, start, aligned)``: aligned when start is where the pairs begin."""
    prefix = draw(st.lists(st.integers() | st.binary(max_size=4), max_size=3))
    jobs = draw(st.lists(st.tuples(JOB_KEY, envelopes(), ATTEMPTS), max_size=10))
    reply: list[Any] = list(prefix)
    for job_key, env, attempts in jobs:
        if attempts is not None and isinstance(env, bytes):
            # the failed attempts an envelope records, of any JSON type
            env = with_attempts(env, attempts)
        reply += [job_key, env]
    reply.extend(draw(st.lists(st.binary(max_size=3), max_size=1)))  # ragged end
    start = draw(st.just(len(prefix)) | st.integers(0, len(reply) + 2))
    return reply, start, start == len(prefix)


@SETTINGS
@given(replies())
def test_decode_claim(drawn: tuple[list[Any], int, bool]) -> None:
    reply, start, aligned = drawn
    ref = assert_same(ref_codec.decode_claim, native_codec.decode_claim, reply, start, REGISTRY)
    if aligned and ref[0] == "ok":
        runnable, broken, unknown = native_codec.decode_claim(reply, start, REGISTRY)
        for job in runnable:
            assert type(job[0]) is bytes and type(job[4]) is int and job[4] >= 1
        for job_id, reason in broken:
            assert type(job_id) is bytes and type(reason) is str
        for job_id, name, env in unknown:  # a name (a string) the registry lacks
            assert type(job_id) is bytes and type(name) is str and REGISTRY.get(name) is None
            assert env.get("n", env.get("name")) == name
    # any sequence, and mappings that are not dicts
    assert_same(ref_codec.decode_claim, native_codec.decode_claim, tuple(reply), start, REGISTRY)
    assert_same(
        ref_codec.decode_claim,
        native_codec.decode_claim,
        reply,
        start,
        types.MappingProxyType(REGISTRY),
    )


@SETTINGS
@given(replies(), st.integers(-40, -1))
def test_decode_claim_negative_start(drawn: tuple[list[Any], int, bool], start: int) -> None:
    assert_same(ref_codec.decode_claim, native_codec.decode_claim, drawn[0], start, REGISTRY)


def test_decode_claim_good_batch_is_runnable() -> None:
    tail = ref_codec.envelope_tail("tasks.add", 1000, {})
    ids = [f"job-{i}" for i in range(50)]
    calls: list[Any] = [(i, "x") if i % 2 else {"n": i} for i in range(50)]
    envs = native_codec.encode_calls(calls, tail)
    reply: list[Any] = [b"cursor"]
    for i, env in enumerate(envs):
        if i % 3 == 0:  # a retried job: its envelope records the failed attempts
            env = with_attempts(env, i)
        reply += [ids[i].encode(), env]
    runnable, broken, unknown = native_codec.decode_claim(reply, 1, REGISTRY)
    assert broken == [] and unknown == []
    assert (runnable, broken, unknown) == ref_codec.decode_claim(reply, 1, REGISTRY)
    assert [job[4] for job in runnable] == [i + 1 if i % 3 == 0 else 1 for i in range(50)]
    assert all(job[1] is len for job in runnable)
    assert [(job[2], job[3]) for job in runnable] == [
        ([i, "x"], {}) if i % 2 else ([], {"n": i}) for i in range(50)
    ]


@pytest.mark.parametrize(
    "reply, start, registry",
    [
        ([], 0, REGISTRY),
        ([b"a", b"{}"], 0, REGISTRY),
        ([b"a", b'{"name":"tasks.add"}'], 0, {}),
        ([b"a", b'{"name":"tasks.add"}'], 0, _DictSub(REGISTRY)),
        ([b"a", b'{"name":"tasks.add"}'], 0, None),  # no .get: AttributeError
        ([b"a", b'{"name":["tasks.add"]}'], 0, REGISTRY),
        ([b"a", b'{"name":"tasks.none"}'], 0, REGISTRY),
        ([b"a", b'{"name":"tasks.add","attempts":-1}'], 0, REGISTRY),
        ([b"a", b'{"name":"tasks.add","attempts":"2"}'], 0, REGISTRY),
        ([b"a", b'{"name":"tasks.add","attempts":2}', b"ragged"], 0, REGISTRY),
        ([b"a", b'["tasks.add",[1],5]'], 0, REGISTRY),
        ([b"a", b'["tasks.add",[1],5,{}]'], 0, REGISTRY),
        ([b"a", b'["tasks.add",[1],5,{"k":{"x":1},"attempts":3,"p":2}]'], 0, REGISTRY),
        ([b"a", b'["tasks.add",null,5]'], 0, REGISTRY),  # broken, not args []
        ([b"a", b'["tasks.add",[],5,{"k":null}]'], 0, REGISTRY),
        ([b"a", b'["tasks.add",[],5,[]]'], 0, REGISTRY),
        ([b"a", b'["tasks.add",[]]'], 0, REGISTRY),
        ([b"a", b'["tasks.add",[],5,{},6]'], 0, REGISTRY),
        ([b"a", b"[]"], 0, REGISTRY),
        ([b"a", b"[null,[],5]"], 0, REGISTRY),
        ([b"a", b'{"n":"tasks.add","a":[1]}'], 0, REGISTRY),  # an object reads the names before
    ],
)
def test_decode_claim_edge_cases(reply: Any, start: Any, registry: Any) -> None:
    assert_same(ref_codec.decode_claim, native_codec.decode_claim, reply, start, registry)


@pytest.mark.parametrize(
    "raw",
    [
        b'["tasks.add",[1,"x"],5,{"b":"b-1"}]',  # as the enqueue script writes it
        b'["tasks.add",[],5,{"b":"b-1"}]',
        b'["missing",[1],5,{"b":"b-1"}]',  # a name the registry lacks: its batch all the same
        b'["tasks.add",[1],5,{"k":{"x":1},"b":"b-1"}]',  # with keyword arguments
        b'["tasks.add",[1],5,{"attempts":2,"b":"b-1"}]',  # retried
        b'["tasks.add",[1],5,{"b":"b\\/1"}]',  # escaped: orjson's
        b'["tasks.add",[1],5,{"b":""}]',
        '["tasks.add",[1],5,{"b":"é"}]'.encode(),  # written by hand: not ASCII
        b'["tasks.add",[1],5,{"b":"\xff"}]',  # not UTF-8: broken, never raised
        b'["tasks.add",[1],5,{"b":7}]',  # not a string: no batch
        b'["tasks.add",[1],5,{"b":"b-1"},]',  # not JSON: broken
        b'["tasks.add",[1],5,{"b":"b-1"}',
        b'["tasks.add",[1],5,{"b":"b-1"}}]',
        b'["tasks.add",[1],5]',  # no batch
    ],
)
def test_decode_claim_learns_the_batch_of_each_job(raw: bytes) -> None:
    """The batch (the envelope's "b") a worker groups its acks by, from both decoders."""
    learned = []
    for impl in (ref_codec, native_codec):
        batched: dict[bytes, str] = {}
        decoded = impl.decode_claim([b"x", b"id", raw], 1, REGISTRY, batched)
        learned.append((decoded, batched))
    assert learned[0] == learned[1]
    decoded, batched = learned[1]
    try:
        batch = orjson.loads(raw)[3].get("b")
    except (orjson.JSONDecodeError, IndexError):
        batch = None
    assert batched == ({b"id": batch} if isinstance(batch, str) else {})
    if batched:
        assert [env["b"] for *_, env in decoded[0] + decoded[2]] == [batch]


# --- backoff_ms -----------------------------------------------------------------------------

WIDE_INT = (
    st.integers(-(2**70), 2**70)
    | st.integers(-5, 70)
    | st.sampled_from([0, 1, 2**62, 2**63 - 1, 2**63, 2**64, -(2**63), 10**30, -(10**30)])
)
WIDE_FLOAT = (
    st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(0.0, 1.0)
    | st.sampled_from([0.0, -0.0, 1.0, 0.5, 1.0000001, 2.0, 0.9999999999999999, 5e-324])
)


@settings(max_examples=examples(1500), deadline=None, database=None)
@given(WIDE_INT, WIDE_INT, WIDE_INT, WIDE_FLOAT, WIDE_FLOAT)
def test_backoff_ms(attempt: int, base_ms: int, max_ms: int, jitter: float, rand: float) -> None:
    assert_same(
        ref_backoff.backoff_ms, native_backoff.backoff_ms, attempt, base_ms, max_ms, jitter, rand
    )


@settings(max_examples=examples(300), deadline=None, database=None)
@given(
    WIDE_INT | st.booleans(),
    WIDE_INT | st.booleans(),
    WIDE_INT | st.booleans(),
    WIDE_FLOAT | WIDE_INT | st.booleans(),
    WIDE_FLOAT | WIDE_INT | st.booleans(),
)
def test_backoff_ms_mixed_types(
    attempt: Any, base_ms: Any, max_ms: Any, jitter: Any, rand: Any
) -> None:
    assert_same(
        ref_backoff.backoff_ms, native_backoff.backoff_ms, attempt, base_ms, max_ms, jitter, rand
    )


def test_backoff_ms_grid() -> None:
    rands = [0.0, 0.1, 0.3333333333333333, 0.5, 0.7, 0.9999999999999999]
    for attempt in range(-2, 70):
        for base_ms in (-1, 0, 1, 3, 100, 1000, 2**40, 2**62 - 1):
            for max_ms in (-7, 0, 1, 999, 60_000, 2**53 + 1, 2**63 - 1):
                for jitter in (-0.5, 0.0, 0.1, 0.5, 1.0, 1.5):
                    for rand in rands:
                        args = (attempt, base_ms, max_ms, jitter, rand)
                        assert native_backoff.backoff_ms(*args) == ref_backoff.backoff_ms(*args), (
                            args
                        )


@pytest.mark.parametrize(
    "args",
    [
        (10**30, 100, 60_000, 0.5, 0.5),
        (1, 10**30, 60_000, 0.5, 0.5),
        (1, 100, 10**30, 0.5, 0.5),
        (200, 100, 10**30, 0.0, 0.5),
        (3, 100, 2**63 - 1, 1.0, 1e300),
        (3, 100, 60_000, 1.0, float("inf")),
        (3, 100, 60_000, float("nan"), 0.5),
        (3, 100, 60_000, 0.5, float("nan")),
        (3, 100, -(10**400), 0.5, 0.5),
        (3.0, 100, 60_000, 0.5, 0.5),  # float attempt: the reference's own TypeError
        ("3", 100, 60_000, 0.5, 0.5),
    ],
)
def test_backoff_ms_extremes(args: tuple[Any, ...]) -> None:
    assert_same(ref_backoff.backoff_ms, native_backoff.backoff_ms, *args)


# --- update_envelope ----------------------------------------------------------------------


@SETTINGS
@given(env=st.dictionaries(st.text(max_size=8), JSON, max_size=6), fields=KWARGS)
def test_update_envelope(env: dict[str, Any], fields: dict[str, Any]) -> None:
    ref_env, nat_env = dict(env), dict(env)
    ref = ref_codec.update_envelope(ref_env, fields)
    nat = native_codec.update_envelope(nat_env, fields)
    assert nat == ref and type(nat) is bytes
    assert ref_env == nat_env  # both update in place


@pytest.mark.parametrize(
    ("env", "fields"),
    [({"id": "a", "args": []}, {"error": None}), ([], {}), ({"a": 1}, [("b", 2)]), ({}, 5)],
)
def test_update_envelope_edge_cases(env: Any, fields: Any) -> None:
    assert_same(ref_codec.update_envelope, native_codec.update_envelope, env, fields)


# --- retry policies: the same sequences -------------------------------------------------
# The kernels take checked input (fastq.retry checks it): ms within ten years,
# attempt >= 1, rand in [0, 1). Each case compares a whole sequence of attempts,
# plus far attempts where the curves reach their caps or 64-bit limits.

MAX_MS = 10 * 365 * 24 * 3600 * 1000
MS = st.integers(0, MAX_MS) | st.sampled_from([0, 1, 999, 1000, 60_000, MAX_MS])
RAND = st.floats(0.0, 1.0, exclude_max=True) | st.sampled_from([0.0, 0.5, 0.9999999999999999])
FAR = [40, 61, 62, 63, 64, 999, 1000, 1001, 10**6, 2**31]


def attempts() -> list[int]:
    return [*range(1, 40), *FAR]


def same_sequence(ref_fn: Callable[..., Any], nat_fn: Callable[..., Any], *params: Any) -> None:
    for attempt in attempts():
        assert_same(ref_fn, nat_fn, attempt, *params)


@settings(max_examples=examples(400), deadline=None, database=None)
@given(MS, RAND)
def test_polynomial_sequences(max_ms: int, rand: float) -> None:
    same_sequence(ref_backoff.polynomial_ms, native_backoff.polynomial_ms, max_ms, rand)


@settings(max_examples=examples(400), deadline=None, database=None)
@given(MS, MS, st.integers(0, 62))
def test_doubling_sequences(a_ms: int, b_ms: int, max_doublings: int) -> None:
    min_ms, max_ms = min(a_ms, b_ms), max(a_ms, b_ms)
    same_sequence(
        ref_backoff.doubling_ms, native_backoff.doubling_ms, min_ms, max_ms, max_doublings
    )


@settings(max_examples=examples(400), deadline=None, database=None)
@given(
    MS,
    st.floats(1.0, 1e6) | st.floats(1.0, 1.5) | st.sampled_from([1.0, 1.5, 2.0, 10.0, 1e300]),
    MS,
)
def test_geometric_sequences(base_ms: int, ratio: float, max_ms: int) -> None:
    same_sequence(ref_backoff.geometric_ms, native_backoff.geometric_ms, base_ms, ratio, max_ms)


@settings(max_examples=examples(300), deadline=None, database=None)
@given(st.lists(MS, min_size=1, max_size=100).map(tuple))
def test_listed_sequences(delays_ms: tuple[int, ...]) -> None:
    same_sequence(ref_backoff.listed_ms, native_backoff.listed_ms, delays_ms)


def test_listed_empty_refused_alike() -> None:
    assert_same(ref_backoff.listed_ms, native_backoff.listed_ms, 1, ())


# --- decode_claim's fast path: compact envelopes of flat args, parsed without orjson -------

FLAT_ITEM = (
    INT64
    | st.text(max_size=6)
    | st.booleans()
    | st.none()
    | st.floats(allow_nan=False, allow_infinity=False)
)
# pieces spliced into an envelope's args: what the fast path must leave to orjson
ODD_PIECES = st.sampled_from(
    [
        b"01",
        b"-",
        b"-0",
        b"1.0",
        b"1e3",
        b"2E1",
        b"9" * 19,
        b"9" * 18,
        b"9" * 21,
        b'"a\\nb"',
        b'"\x01"',
        b'"\xff"',
        b'"\xed\xa0\x80"',
        b" 1",
        b"tru",
        b"nul",
        b"falsey",
        b"[]",
        b"{}",
        b"",
        b'"\\u00e9"',
        b'"\xc3\xa9"',
        b"-" + b"9" * 18,
    ]
)


@SETTINGS
@given(
    st.lists(st.tuples(NAMES, st.lists(FLAT_ITEM, max_size=4), st.integers(0, 2**45)), max_size=6),
    st.lists(st.tuples(st.integers(0, 5), ODD_PIECES), max_size=3),
)
def test_decode_claim_fast_path(jobs: list[Any], odd: list[tuple[int, bytes]]) -> None:
    reply: list[Any] = [b"cursor"]
    for i, (name, args, t) in enumerate(jobs):
        env = orjson.dumps([name, args, t])
        reply += [b"id-%d" % i, env]
    for at, piece in odd:  # a raw piece as an argument of a job
        name = jobs[at % len(jobs)][0] if jobs else "tasks.add"
        reply += [b"odd", b'["' + name.encode() + b'",[1,' + piece + b"],5]"]
        reply += [b"odd-name", b'["' + piece.strip(b'"') + b'",[],5]']
        reply += [b"odd-time", b'["tasks.add",[],' + piece + b"]"]
    ref = assert_same(ref_codec.decode_claim, native_codec.decode_claim, reply, 1, REGISTRY)
    assert ref[0] == "ok"


# --- first_misfit: the producer's pass over calls that fit by their count ------------------


class _TupleSub(tuple):  # type: ignore[type-arg]
    pass


CALLS = st.lists(
    st.lists(st.integers(), max_size=4).map(tuple)
    | st.lists(st.integers(), max_size=4)
    | st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)
    | st.lists(st.integers(), max_size=4).map(_TupleSub)
    | st.none(),
    max_size=8,
)


@SETTINGS
@given(CALLS, st.integers(-1, 4), st.integers(-1, 5), st.integers(-2, 9))
def test_first_misfit(calls: list[Any], low: int, high: int, start: int) -> None:
    ref = assert_same(ref_codec.first_misfit, native_codec.first_misfit, calls, low, high, start)
    assert ref[0] == "ok"
    assert_same(ref_codec.first_misfit, native_codec.first_misfit, tuple(calls), low, high, start)


# --- counter_ids: the job ids of a blast --------------------------------------------------

ID_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@SETTINGS
@given(
    st.text(alphabet=ID_ALPHABET, max_size=10) | st.text(max_size=3),
    st.integers(-2, 62**4 + 2),
    st.integers(0, 70),
    st.sampled_from([ID_ALPHABET, "01", "ab", "é0", "x"]),
)
def test_counter_ids(prefix: str, lo: int, count: int, alphabet: str) -> None:
    hi = lo + count
    ref = assert_same(ref_ids.counter_ids, native_ids.counter_ids, prefix, lo, hi, alphabet)
    if ref[0] == "ok" and alphabet == ID_ALPHABET and lo < hi:
        assert ref[1][-1] == prefix + "".join(
            ID_ALPHABET[(hi - 1) // 62**k % 62] for k in (3, 2, 1, 0)
        )


# --- encode_runs: the done jobs' runs an ack carries for their records --------------------

RUN_IDS = st.lists(st.binary(min_size=1, max_size=4), max_size=8)
RUN = st.integers(0, 10**9) | st.tuples(st.integers(0, 10**9), st.integers(2, 10**6))


@SETTINGS
@given(RUN_IDS, st.dictionaries(st.binary(min_size=1, max_size=4), RUN, max_size=6))
def test_encode_runs(ids: list[bytes], runs: dict[bytes, Any]) -> None:
    ids = ids + list(runs)[:2]  # some ids with a run
    ref = assert_same(ref_codec.encode_runs, native_codec.encode_runs, ids, runs)
    assert ref[0] == "ok"
    if runs:
        entries = ref[1].split(b",")
        assert len(entries) == len(ids)
        for job_id, entry in zip(ids, entries):
            run = runs.get(job_id)
            want = b"" if run is None else (b"%d:%d" % run if type(run) is tuple else b"%d" % run)
            assert entry == want
    else:
        assert ref[1] == b""
    assert_same(ref_codec.encode_runs, native_codec.encode_runs, tuple(ids), runs)


def test_encode_runs_examples() -> None:
    for codec in (ref_codec, native_codec):
        assert codec.encode_runs([b"a", b"b"], {}) == b""
        assert codec.encode_runs([b"a", b"b", b"c"], {b"b": 12, b"c": (0, 3)}) == b",12,0:3"
