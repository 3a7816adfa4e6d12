"""Redis-side cost of the enqueue script, per job: fastq's script beside the script as
of another commit (``--against REF``), on envelopes of several shapes.

Server time only (``INFO commandstats``), so the client's speed drops out. Each
shape is sent as calls of 1,000 jobs (250 with tags) by ``EVALSHA``, the envelopes
encoded by fastq's producer codec: positional arguments (the mailing job, read
from its ends by the script), keyword arguments and a priority (an envelope with
its object, decoded by the script), two tags. The two scripts run interleaved,
``--repeat`` times each, on one server; the medians and the least of the runs
(the box's noise only adds) are printed, with their ratios.

    python -m bench.enqueue_cost [-n 100000] [--repeat 5] [--against a094f94] [--json PATH]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

import redis

from bench.harness import ROOT, add_json_option, announce, write_report
from fastq._accel import codec
from fastq.protocol import scripts
from fastq.protocol.contracts import ENQUEUE, enqueue_extras
from fastq.protocol.keys import QueueKeys
from fastq.testing.redis_server import RedisServer

LUA_DIR = "fastq/protocol/lua"


def shapes(n: int) -> dict[str, tuple[int, bytes, list[bytes], int]]:
    """Each shape: (priority, extras, envelopes, jobs per call)."""
    now_ms = int(time.time() * 1000)
    mailing = codec.envelope_tail("send_email", now_ms, {})
    positional = [
        codec.encode_envelope([f"user{i}@example.com", "Your weekly digest", 42], None, mailing)
        for i in range(n)
    ]
    kw_tail = codec.envelope_tail("send_email", now_ms, {"p": 5})
    keyword = [
        codec.encode_envelope(None, {"to": f"user{i}@example.com", "n": 42}, kw_tail)
        for i in range(n)
    ]
    tags = enqueue_extras(["campaign:42", "mail"])
    return {
        "positional": (0, b"", positional, 1000),
        "kwargs+priority": (5, b"", keyword, 1000),
        "positional+2 tags": (0, tags, positional, 250),
    }


def server_us(client: redis.Redis) -> float:
    stats = client.info("commandstats").get("cmdstat_evalsha")
    return float(stats["usec"]) if stats else 0.0


def run_once(
    client: redis.Redis, sha: str, queue: str, shape: tuple[int, bytes, list[bytes], int]
) -> float:
    """Enqueue every envelope of ``shape`` on a fresh queue; µs of server time a job."""
    priority, extras, envs, per_call = shape
    keys = ENQUEUE.keys_for(QueueKeys("cost", queue))
    client.config_resetstat()
    for lo in range(0, len(envs), per_call):
        chunk = envs[lo : lo + per_call]
        ids = [f"{queue}-{lo + i}" for i in range(len(chunk))]
        argv = ENQUEUE.argv(priority, 0, extras, ids, chunk)
        client.evalsha(sha, len(keys), *keys, *argv)
    cost = server_us(client) / len(envs)
    client.flushall()
    return cost


def source_at(ref: str) -> bytes:
    """The enqueue script of commit ``ref`` as Redis gets it: assembled with the libs
    it includes at that commit (its lua folder exported to a temporary folder)."""
    with tempfile.TemporaryDirectory(prefix="fastq-enqueue-cost-") as tmp:
        archive = subprocess.run(
            ["git", "archive", ref, LUA_DIR], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        return scripts.assemble("enqueue", Path(tmp) / LUA_DIR)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--against", metavar="REF", help="a git ref: its enqueue.lua too")
    add_json_option(parser)
    args = parser.parse_args()
    with RedisServer() as srv:
        client = redis.Redis.from_url(srv.url)
        machine, source = announce(
            client,
            "enqueue_cost",
            f"Redis-side µs per job of the enqueue script, {args.jobs:,} jobs a shape, "
            f"median (and least) of {args.repeat}",
        )
        client.config_set("save", "")
        sources = {"now": scripts.BY_NAME["enqueue"].source}
        if args.against:
            sources[args.against] = source_at(args.against)
        shas = {label: client.script_load(text) for label, text in sources.items()}
        rows: list[dict[str, Any]] = []
        print(f"{'shape':>20} " + " ".join(f"{label:>10}" for label in shas) + "   ratio")
        for name, shape in shapes(args.jobs).items():
            runs: dict[str, list[float]] = {label: [] for label in shas}
            for rep in range(args.repeat):
                for label, sha in shas.items():  # interleaved: the box's noise is shared
                    client.script_load(sources[label])  # flushall kept scripts; be sure
                    runs[label].append(run_once(client, sha, f"q{rep}", shape))
            medians = {label: statistics.median(v) for label, v in runs.items()}
            # the least of the runs too: on a shared box the others carry its noise
            least = {label: min(v) for label, v in runs.items()}
            ratio: Optional[float] = None
            if args.against:
                ratio = medians["now"] / medians[args.against]
            row = {"shape": name, "us_per_job": medians, "min_us_per_job": least}
            rows.append({**row, "runs": runs, "ratio": ratio})
            shown = " ".join(f"{medians[label]:>10.3f}" for label in shas)
            print(f"{name:>20} {shown}   {'' if ratio is None else f'{ratio:.2f}'}")
            shown = " ".join(f"{least[label]:>10.3f}" for label in shas)
            ratio_min = least["now"] / least[args.against] if args.against else None
            print(f"{'(least)':>20} {shown}   {'' if ratio_min is None else f'{ratio_min:.2f}'}")
    report = {"machine": machine, "source": source, "against": args.against, "rows": rows}
    write_report(report, "enqueue_cost", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
