"""Producers in other languages, following docs/protocol.md: jobs written with
``redis-cli`` alone and with a plain Node client are run by a fastq worker."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import zlib
from pathlib import Path

import pytest
import redis

import fastq
from fastq.protocol import scripts
from fastq.testing.redis_server import RedisServer
from tests.support.processes import ROOT, fastq_cmd, subprocess_env

KEY_SUFFIXES = (
    "jobs",
    "ready",
    "prio",
    "scheduled",
    "stats",
    "wake",
    "sched_prio",
    "cancelled",
    "links",
    "tagged",
    "unique",
    "unique_exp",
    "settings",
    "records",
    "records_old",
    "batched",
    "batches",
    "chained",
    "group_ready",
    "group_ring",
)


def _drain(url: str, namespace: str) -> str:
    proc = subprocess.run(
        fastq_cmd(
            "worker",
            "--app",
            "tests.apps.counting",
            "--namespace",
            namespace,
            "-q",
            "count",
            "--burst",
        ),
        env=subprocess_env(url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def _runs(r: redis.Redis, namespace: str) -> dict[bytes, bytes]:
    return r.hgetall(f"{namespace}:runs")


def test_the_printed_script_is_the_one_fastq_loads() -> None:
    proc = subprocess.run(fastq_cmd("lua", "enqueue"), capture_output=True, timeout=30)
    assert proc.returncode == 0
    assert proc.stdout == scripts.BY_NAME["enqueue"].source
    ack = subprocess.run(fastq_cmd("lua", "ack"), capture_output=True, timeout=30).stdout
    assert ack.startswith(b"#!lua flags=allow-oom\n") and b"local function arg_int" in ack
    bad = subprocess.run(fastq_cmd("lua", "nope"), capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is not installed")
def test_a_job_enqueued_with_redis_cli_alone_is_run(
    redis_server: RedisServer, r: redis.Redis, namespace: str
) -> None:
    keys = " ".join(f"'{namespace}:{{count}}:{s}'" for s in KEY_SUFFIXES)
    now_ms = int(time.time() * 1000)
    fastq = " ".join(fastq_cmd())
    # as docs/protocol.md shows it: the script from `fastq lua enqueue`, the rest by hand
    script = f"""
        set -e
        cli="redis-cli -p {redis_server.port}"
        $cli SADD {namespace}:queues count
        $cli EVAL "$({fastq} lua enqueue)" 20 {keys} 0 0 '' cli-7 '["count",[7],{now_ms}]'
        $cli EVAL "$({fastq} lua enqueue)" 20 {keys} 0 0 '' cli-8 \
            '["count",[],{now_ms},{{"k":{{"i":8}}}}]' cli-7 '["count",[7],{now_ms}]'
        $cli EVAL "$({fastq} lua enqueue)" 20 {keys} 5 0 '' cli-9 '["count",[9],{now_ms}]'
        $cli EVAL "$({fastq} lua enqueue)" 20 {keys} 2000000 0 '' bad '["count",[1],{now_ms}]' \
            || true
    """
    proc = subprocess.run(
        ["bash", "-c", script],
        env=subprocess_env(redis_server.url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # one added, then one more (cli-7 exists: left alone), then one with a priority;
    # a priority out of range is refused, naming it
    assert proc.stdout.split()[:4] == ["1", "1", "1", "1"], proc.stdout
    assert "ERR fastq enqueue: priority must be an integer" in proc.stdout + proc.stderr
    assert not r.hexists(f"{namespace}:{{count}}:jobs", "bad")  # nothing written
    _drain(redis_server.url, namespace)
    assert _runs(r, namespace) == {b"7": b"1", b"8": b"1", b"9": b"1"}


# A plain RESP client over a socket, no npm package: what docs/protocol.md asks of a
# producer (load the script, SADD the queue, EVALSHA per batch, reload on NOSCRIPT).
NODE_PRODUCER = r"""
const net = require("net");
const fs = require("fs");
const [port, ns, queue, scriptPath] = process.argv.slice(2);
const source = fs.readFileSync(scriptPath);
const sock = net.connect(Number(port), "127.0.0.1");
let buf = Buffer.alloc(0);
const waiting = [];
function encode(args) {
  const parts = [Buffer.from(`*${args.length}\r\n`)];
  for (const a of args) {
    const b = Buffer.isBuffer(a) ? a : Buffer.from(String(a));
    parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from("\r\n"));
  }
  return Buffer.concat(parts);
}
function parse(i) {  // [value, next index] or null when incomplete
  const end = buf.indexOf("\r\n", i);
  if (end < 0) return null;
  const kind = String.fromCharCode(buf[i]), line = buf.toString("utf8", i + 1, end);
  if (kind === "+") return [line, end + 2];
  if (kind === "-") return [new Error(line), end + 2];
  if (kind === ":") return [Number(line), end + 2];
  if (kind === "$") {
    const n = Number(line);
    if (n < 0) return [null, end + 2];
    if (buf.length < end + 2 + n + 2) return null;
    return [buf.toString("utf8", end + 2, end + 2 + n), end + 2 + n + 2];
  }
  if (kind === "*") {
    const out = [];
    let j = end + 2;
    for (let k = 0; k < Number(line); k++) {
      const r = parse(j);
      if (r === null) return null;
      out.push(r[0]);
      j = r[1];
    }
    return [out, j];
  }
  throw new Error("bad reply " + kind);
}
sock.on("data", (d) => {
  buf = Buffer.concat([buf, d]);
  for (;;) {
    const r = parse(0);
    if (r === null) break;
    buf = buf.subarray(r[1]);
    waiting.shift()(r[0]);
  }
});
const call = (...args) => new Promise((ok) => { waiting.push(ok); sock.write(encode(args)); });
(async () => {
  const sha = await call("SCRIPT", "LOAD", source);
  const keys = ["jobs", "ready", "prio", "scheduled", "stats", "wake", "sched_prio",
    "cancelled", "links", "tagged", "unique", "unique_exp", "settings", "records",
    "records_old", "batched", "batches", "chained", "group_ready", "group_ring"]
    .map((s) => `${ns}:{${queue}}:${s}`);
  await call("SADD", `${ns}:queues`, queue);
  const argv = [0, 0, ""];
  for (let i = 0; i < 1500; i++) {
    argv.push(`node-${i}`, JSON.stringify(["count", [i], Date.now()]));
  }
  const replies = [];
  for (let lo = 3; lo < argv.length; lo += 2000) {  // 1,000 jobs a call at most
    const chunk = [0, 0, "", ...argv.slice(lo, lo + 2000)];
    let reply = await call("EVALSHA", sha, 20, ...keys, ...chunk);
    if (reply instanceof Error && reply.message.startsWith("NOSCRIPT")) {
      await call("SCRIPT", "LOAD", source);
      reply = await call("EVALSHA", sha, 20, ...keys, ...chunk);
    }
    if (reply instanceof Error) throw reply;
    replies.push(reply);
  }
  // a unique job: the reply names the one refused and the id holding its lock
  const unique = JSON.stringify({ unique: "e", unique_for_ms: 60000 });
  const env = JSON.stringify(["count", [], Date.now(), { k: { i: 5000 } }]);
  replies.push(await call("EVALSHA", sha, 20, ...keys, 0, 0, unique,
    "node-u1", env, "k-5000", "node-u2", env, "k-5000"));
  console.log(JSON.stringify(replies));
  sock.end();
})().catch((e) => { console.error(String(e)); process.exit(1); });
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_jobs_enqueued_from_node_with_a_plain_client_are_run(
    redis_server: RedisServer, r: redis.Redis, namespace: str, tmp_path: Path
) -> None:
    (tmp_path / "producer.js").write_text(NODE_PRODUCER)
    (tmp_path / "enqueue.lua").write_bytes(
        subprocess.run(fastq_cmd("lua", "enqueue"), capture_output=True, check=True).stdout
    )
    proc = subprocess.run(
        [
            "node",
            str(tmp_path / "producer.js"),
            str(redis_server.port),
            namespace,
            "count",
            str(tmp_path / "enqueue.lua"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [1000, 500, [1, 2, "node-u1"]]
    assert r.sismember(f"{namespace}:queues", "count")
    _drain(redis_server.url, namespace)
    runs = _runs(r, namespace)
    assert len(runs) == 1501 and set(runs.values()) == {b"1"}
    assert b"0" in runs and b"1499" in runs and b"5000" in runs


def _foreign_enqueue(r: redis.Redis, namespace: str, queue: str, job_id: str, i: int) -> int:
    """One job as docs/protocol.md tells a producer of another language to send it to a
    queue that may be sharded: read the count (absent: one), pick the id's shard by
    CRC-32, call the script with that shard's 20 keys. No fastq code but the script."""
    count = int(r.hget(f"{namespace}:shards", queue) or 1)
    shard = zlib.crc32(job_id.encode()) % count
    name = queue if shard == 0 else f"{queue}#{shard}"
    keys = [f"{namespace}:{{{name}}}:{s}" for s in KEY_SUFFIXES]
    env = json.dumps(["count", [i], int(time.time() * 1000)])
    return int(r.eval(scripts.BY_NAME["enqueue"].source, 20, *keys, 0, 0, "", job_id, env))


@pytest.mark.parametrize("foreign_first", [True, False], ids=["foreign-first", "python-first"])
def test_a_python_and_a_foreign_producer_put_an_id_on_one_shard(
    redis_server: RedisServer, r: redis.Redis, namespace: str, foreign_first: bool
) -> None:
    app = fastq.App(redis_server.url, namespace=namespace)
    app.declare_queue("count", shards=3)
    # written at once: no job of the queue can be routed before the count is known
    assert r.hget(f"{namespace}:shards", "count") == b"3"
    ids = [f"order-{i}" for i in range(6)]
    assert len({zlib.crc32(i.encode()) % 3 for i in ids}) == 3  # every shard has some
    calls = [(100 + i,) for i in range(6)]
    if not foreign_first:
        app.enqueue_many("count", calls, job_ids=ids, queue="count")
    added = [
        _foreign_enqueue(r, namespace, "count", job_id, 100 + n) for n, job_id in enumerate(ids)
    ]
    assert added == ([1] * 6 if foreign_first else [0] * 6)
    if foreign_first:
        app.enqueue_many("count", calls, job_ids=ids, queue="count")
    held = sum(r.hlen(app.keys(name).jobs) for name in ("count", "count#1", "count#2"))
    assert held == 6
    _drain(redis_server.url, namespace)
    assert _runs(r, namespace) == {str(100 + i).encode(): b"1" for i in range(6)}
    app.close()
