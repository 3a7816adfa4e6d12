"""enqueue.lua checks every argument before its first write: a refused call writes
nothing, and says which argument in ``ERR fastq enqueue: ...``.

Each malformed call is sent as a producer of another language would send it (a
plain ``EVALSHA``), to a server holding a queue with jobs of every kind, and the
whole keyspace (the ``DUMP`` of every key, and its TTL) is compared before and
after. The limits are those of ``fastq/validate.py`` (tests/unit/test_protocol_limits.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import redis

import fastq
from fastq.protocol import scripts
from fastq.protocol.contracts import ENQUEUE, enqueue_extras
from fastq.protocol.keys import QueueKeys
from fastq.testing.redis_server import RedisServer

K = QueueKeys("ns", "q")
OTHER = QueueKeys("ns", "other")
KEYS = ENQUEUE.keys_for(K)
NOW_MS = int(time.time() * 1000)
TAGS = enqueue_extras(["t1"])
UNIQUE = enqueue_extras(unique_until="end", unique_for_ms=60_000)


def env(name: str = "j", args: Any = (), t: Any = NOW_MS, **fields: Any) -> bytes:
    items: list[Any] = [name, list(args) if isinstance(args, tuple) else args, t]
    if fields:
        items.append(fields)
    return orjson.dumps(items)


def jobs(n: int, prefix: str = "j") -> list[Any]:
    out: list[Any] = []
    for i in range(n):
        out += [f"{prefix}{i}", env(args=(i,))]
    return out


def send(r: redis.Redis, argv: list[Any], keys: list[str] = KEYS) -> Any:
    sha = scripts.BY_NAME["enqueue"].sha
    return r.evalsha(sha, len(keys), *keys, *argv)


def keyspace(r: redis.Redis) -> dict[bytes, tuple[Any, int]]:
    """Every key of the server: its DUMP and its TTL."""
    return {key: (r.dump(key), r.pttl(key) > 0) for key in r.scan_iter(count=1000)}


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    srv = RedisServer().start()
    yield srv
    srv.cleanup()


@pytest.fixture(scope="module")
def seeded(server: RedisServer) -> Iterator[redis.Redis]:
    """A server whose queue holds jobs of every kind: ready, prioritised, delayed,
    tagged, unique; and another queue. Nothing here expires while the module runs."""
    r = redis.Redis.from_url(server.url)
    r.script_load(scripts.BY_NAME["enqueue"].source)
    assert send(r, [0, 0, "", *jobs(3, "plain")]) == 3
    assert send(r, [5, 0, "", "hi", env(p=5)]) == 1
    assert send(r, [0, 3_600_000, "", "later", env()]) == 1
    assert send(r, [0, 0, TAGS, "tagged", env()]) == 1
    assert send(r, [0, 0, UNIQUE, "u1", env(), "key-1"]) == [1]
    assert send(r, [0, 0, "", *jobs(2, "o")], ENQUEUE.keys_for(OTHER)) == 2
    yield r
    r.close()


def keys_with(**swap: str) -> list[str]:
    return [swap.get(name, getattr(K, name)) for name in ENQUEUE.keys]


def swapped(a: int, b: int) -> list[str]:
    keys = list(KEYS)
    keys[a], keys[b] = keys[b], keys[a]
    return keys


GOOD = ["g1", env()]  # a good job before the bad one: it is not written either


def second(job_id: str, envelope: bytes, priority: int = 0) -> list[Any]:
    """A call whose second job is ``job_id, envelope``."""
    return [priority, 0, "", *GOOD, job_id, envelope]


def bad_env(envelope: bytes, priority: int = 0) -> list[Any]:
    return second("b", envelope, priority)


def extras(text: Any) -> list[Any]:
    return [0, 0, text, *GOOD]


def plain(keys: list[str]) -> tuple[list[str], list[Any]]:
    return keys, [0, 0, "", *GOOD]


E2 = "envelope #2: "
T = E2 + r"enqueued_at \(item 3\) must be an integer of Unix milliseconds within"
ID2 = "job id #2 must be"
UNIQUE_2 = [0, 0, UNIQUE, "g1", env(), "k", "b", env()]
REFUSED = [
    # the call's size
    ("8000 jobs", KEYS, [0, 0, "", *jobs(8000)], "at most 1000 jobs per call .250 with tags"),
    ("1001 jobs", KEYS, [0, 0, "", *jobs(1001)], "at most 1000 jobs per call"),
    ("251 tagged", KEYS, [0, 0, TAGS, *jobs(251)], "at most 250 jobs per call with tags"),
    # KEYS
    ("12 keys", *plain(KEYS[:12]), "KEYS must be the 20 keys of one queue, .* not 12"),
    ("14 keys", *plain(KEYS[:14]), "KEYS must be the 20 keys of one queue, .* not 14"),
    ("21 keys", *plain([*KEYS, "ns:{q}:z"]), "KEYS must be the 20 keys"),
    ("two queues", *plain(keys_with(ready=OTHER.ready)), r"KEYS\[2\] must be ns:{q}:ready"),
    ("raedy", *plain(keys_with(ready="ns:{q}:raedy")), r"KEYS\[2\] must be ns:{q}:ready"),
    ("ready<->wake", *plain(swapped(1, 5)), r"KEYS\[2\] must be ns:{q}:ready"),
    ("jobs<->links", *plain(swapped(0, 8)), r"KEYS\[1\] must be a queue's jobs key"),
    ("no hash tag", *plain([k.replace("{q}", "q") for k in KEYS]), r"KEYS\[1\] must be"),
    # envelopes
    ("t a string", KEYS, bad_env(env(t="yesterday")), T + r'.* not "yesterday"'),
    ("t in seconds", KEYS, bad_env(env(t=NOW_MS // 1000)), T + r".* not 1"),
    ("t in us", KEYS, bad_env(env(t=NOW_MS * 1000)), T),
    ("t a float", KEYS, bad_env(env(t=NOW_MS + 0.5)), T),
    ("t negative", KEYS, bad_env(env(t=-NOW_MS)), T),
    ("attempts", KEYS, bad_env(env(attempts=3)), E2 + "field attempts is written by workers"),
    ("error", KEYS, bad_env(env(error="x")), E2 + "field error is written by workers"),
    ("failed_at", KEYS, bad_env(env(failed_at=NOW_MS)), E2 + "field failed_at is written by"),
    ("unknown field", KEYS, bad_env(env(kw={"a": 1})), E2 + "field kw is not a field a producer"),
    ("k, attempts", KEYS, bad_env(env(k={"a": 1}, attempts=3)), E2 + "field attempts is written"),
    ("k, retries -1", KEYS, bad_env(env(k={"a": 1}, retries=-1)), E2 + "field retries must be"),
    ("k nested, error", KEYS, bad_env(env(k={"a": {"b": 1}}, error="x")), E2 + "field error is"),
    ("k '}{', failed_at", KEYS, bad_env(env(k={"a": "}{"}, failed_at=1)), E2 + "field failed_at"),
    ("k, t a string", KEYS, bad_env(env(t="yesterday", k={"a": 1})), T),
    ("retries many", KEYS, bad_env(env(retries="many")), E2 + r'field retries .* not "many"'),
    ("retries -1", KEYS, bad_env(env(retries=-1)), E2 + r"field retries must be an integer"),
    ("retries 1.5", KEYS, bad_env(env(retries=1.5)), E2 + "field retries must be an integer"),
    ("age_limit_ms 0", KEYS, bad_env(env(age_limit_ms=0)), E2 + "field age_limit_ms must be"),
    ("backoff", KEYS, bad_env(env(backoff=5)), E2 + "field backoff must be a list"),
    ("k a list", KEYS, bad_env(env(k=[1])), E2 + "field k must be an object"),
    ("p not ARGV[1]", KEYS, bad_env(env(p=5), 3), E2 + r"field p must be the call's priority"),
    (
        "name a number",
        KEYS,
        bad_env(env(name=7)),
        E2 + r"the name \(item 1\) must be a string of 1 to 200",
    ),
    (
        "name empty",
        KEYS,
        bad_env(env(name="")),
        E2 + r"the name \(item 1\) must be a string of 1 to 200",
    ),
    ("args an object", KEYS, bad_env(env(args={"a": 1})), E2 + r"args \(item 2\) must be an array"),
    ("item 4 a list", KEYS, bad_env(orjson.dumps(["j", [], NOW_MS, [1]])), E2 + "item 4 must be"),
    ("5 items", KEYS, bad_env(orjson.dumps(["j", [], NOW_MS, {}, 1])), "envelope #2 must be a"),
    ("an object", KEYS, bad_env(orjson.dumps({"name": "j"})), "envelope #2 must be a JSON array"),
    ("not JSON", KEYS, bad_env(b'["j",[],' + str(NOW_MS).encode()), "envelope #2 must be a JSON"),
    # extras
    ("tagz", KEYS, extras('{"tagz": ["a"]}'), r'extras: unknown key "tagz" \(known: tags, unique'),
    ("101-char tag", KEYS, extras(enqueue_extras(["x" * 101])), "extras: tag #1 must be a string"),
    ("tag with a tab", KEYS, extras(enqueue_extras(["a\tb"])), "extras: tag #1 must be"),
    ("window alone", KEYS, extras('{"unique_for_ms": 5}'), "extras: unique_for_ms without unique"),
    ("extras a list", KEYS, extras('["tags"]'), r"extras \(ARGV\[3\]\) must be empty or a JSON"),
    # ids and unique keys
    ("id with a space", KEYS, second("has space", env()), ID2 + " printable ASCII without"),
    ("id with a newline", KEYS, second("a\nb", env()), ID2 + " printable ASCII without"),
    ("id not ASCII", KEYS, second("zero\u200bwidth", env()), ID2 + " printable ASCII"),
    ("id too long", KEYS, second("x" * 201, env()), ID2 + " 1 to 200 bytes"),
    ("id empty", KEYS, second("", env()), ID2 + " 1 to 200 bytes"),
    ("id reserved", KEYS, second("fastq:mine", env()), "job id #2 starts with the reserved"),
    ("ukey 201 chars", KEYS, [*UNIQUE_2, "é" * 201], "unique key #2 must be 1 to 200 characters"),
    ("ukey newline", KEYS, [*UNIQUE_2, "a\nb"], "unique key #2 must be"),
    # ARGV
    ("priority", KEYS, [2**21, 0, "", *GOOD], "priority must be an integer within"),
    ("delay", KEYS, [0, "soon", "", *GOOD], "delay_ms must be a number"),
    ("at", KEYS, [0, "@soon", "", *GOOD], "@at_ms must be whole Unix milliseconds"),
    ("stride", KEYS, [0, 0, "", *GOOD, "b"], "ARGV must be priority, delay_ms"),
]


@pytest.mark.parametrize(
    "keys, argv, message", [c[1:] for c in REFUSED], ids=[str(c[0]) for c in REFUSED]
)
def test_a_refused_call_writes_nothing(
    seeded: redis.Redis, keys: list[str], argv: list[Any], message: str
) -> None:
    before = keyspace(seeded)
    assert len(before) >= 12  # the queue's indexes, the other queue
    with pytest.raises(redis.ResponseError, match=f"^fastq enqueue: {message}"):
        send(seeded, argv, keys)
    assert keyspace(seeded) == before


def test_what_the_script_takes(server: RedisServer) -> None:
    """The limits themselves, and envelopes in every form a producer may write."""
    r = redis.Redis.from_url(server.url)
    k = QueueKeys("takes", "q")
    keys = ENQUEUE.keys_for(k)
    argv: list[Any] = [0, 0, "", "x" * 200, env(), "!~{}[]\"'\\", env(), "FASTQ:upper", env()]
    argv += ["fastq-not-reserved", env()]
    # json.dumps' spaces, an escaped quote in the name, every field a producer sets
    argv += ["spaced", json.dumps(["j", [1, "a"], NOW_MS])]
    argv += ["quoted", orjson.dumps(['a"b\\', [], NOW_MS])]
    argv += ["fields", env(k={"to": "a"}, retries=0, age_limit_ms=1, backoff=["exp", 1, 2, 0.5])]
    argv += ["integral", b'["j",[],' + str(NOW_MS).encode() + b'.0,{"retries":3.0}]']
    argv += ["empty", b'["j",[],' + str(NOW_MS).encode() + b",{}]"]
    argv += ["k-braces", env(k={"a": "}{", "b": {"c": [1]}}, retries=2)]
    argv += ["k-fields", env(k={"a": 1}, retries=2, backoff=["poly", 1000])]
    argv += ["ahead", env(t=NOW_MS + 3_600_000), "y2k", env(t=946_684_800_000)]
    assert send(r, argv, keys) == 13
    assert send(r, [2**20, 0, "", "top", env(p=2**20)], keys) == 1
    assert send(r, [-(2**20), 315_360_000_000, "", "low", env()], keys) == 1
    assert send(r, [0, 0, ""], keys) == 0
    assert send(r, [0, 0, "", *jobs(1000, "m")], keys) == 1000
    # 13 KEYS, from a producer written before records: served as before
    assert send(r, [0, 0, "", "old-13", env()], keys[:13]) == 1
    tags = enqueue_extras(["é" * 100, "a b"] + [f"t{i}" for i in range(18)])
    assert send(r, [0, 0, tags, *jobs(250, "tagged")], keys) == 250
    unique = [0, 0, UNIQUE, "u", env(), "ü" * 200]
    assert send(r, unique, keys) == [1]
    assert r.hlen(k.jobs) == 13 + 2 + 1000 + 1 + 250 + 1
    r.close()


# One rule, refused from both sides: the Python producer (ValueError, before
# anything is sent) and the script (a hand-written call). (kind, value, script's error)
BOTH_SIDES = [
    ("id", "has space", "job id #1 must be printable ASCII without whitespace"),
    ("id", "a\nb", "job id #1 must be printable ASCII without whitespace"),
    ("id", "x" * 201, "job id #1 must be 1 to 200 bytes"),
    ("id", "fastq:mine", "job id #1 starts with the reserved prefix"),
    ("tag", "x" * 101, "extras: tag #1 must be a string of 1 to 100 characters"),
    ("tag", "a\nb", "extras: tag #1 must be a string"),
    ("tag", "", "extras: tag #1 must be a string"),
    ("unique key", "é" * 201, "unique key #1 must be 1 to 200 characters"),
    ("name", "n" * 201, "envelope #1: the name \\(item 1\\) must be a string of 1 to 200"),
    ("name", "é" * 201, "envelope #1: the name \\(item 1\\) must be a string of 1 to 200"),
    ("name", "a\nb", "envelope #1: the name \\(item 1\\) must be a string of 1 to 200"),
    ("name", "a\x1bb", "envelope #1: the name \\(item 1\\) must be a string of 1 to 200"),
    ("unique key", "a\tb", "unique key #1 must be 1 to 200 characters"),
]


@pytest.mark.parametrize("kind, value, message", BOTH_SIDES)
def test_one_rule_refused_by_the_python_producer_and_by_the_script(
    server: RedisServer, seeded: redis.Redis, kind: str, value: str, message: str
) -> None:
    app = fastq.App(server.url, namespace="ns")
    app.declare_queue("q")
    before = keyspace(seeded)
    options: dict[str, Any] = {"queue": "q"}
    argv: list[Any] = [0, 0, "", "b", env()]
    name = "j"
    if kind == "id":
        options["job_id"] = value
        argv = [0, 0, "", value, env()]
    elif kind == "name":
        name = value
        argv = [0, 0, "", "b", env(name=value)]
    elif kind == "tag":
        options["tags"] = [value]
        argv = [0, 0, enqueue_extras([value]), "b", env()]
    else:
        options["unique_key"] = value
        argv = [0, 0, UNIQUE, "b", env(), value]
    python = {
        "id": "invalid job_id",
        "tag": r"invalid tags\[0\]",
        "unique key": "invalid unique_key",
        "name": "invalid job name",
    }
    with pytest.raises(ValueError, match=python[kind]):
        app.enqueue(name, **options)
    with pytest.raises(redis.ResponseError, match=f"^fastq enqueue: {message}"):
        send(seeded, argv)
    assert keyspace(seeded) == before
    app.close()


def test_an_integer_json_cannot_carry_is_refused_by_the_python_producer(
    server: RedisServer,
) -> None:
    # beyond 64 bits a worker would read a float: refused, never sent
    app = fastq.App(server.url, namespace="ns")
    app.declare_queue("q")
    with pytest.raises(TypeError, match="beyond 64 bits"):
        app.enqueue("j", [2**64], queue="q")
    with pytest.raises(TypeError, match="beyond 64 bits"):
        app.enqueue("j", [-(2**63) - 1], queue="q")
    assert orjson.loads(orjson.dumps([2**64 - 1, -(2**63)])) == [2**64 - 1, -(2**63)]
    app.close()
