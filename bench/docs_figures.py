"""The docs' benchmark figures, rendered from the results files the benchmarks write.

    python -m bench.docs_figures            # rewrite every block in place
    python -m bench.docs_figures --check    # change nothing; exit 1 naming each stale
                                            # block and each figure outside a block

A block is the text between a line ``<!-- figures: NAME ... -->`` and a line
``<!-- /figures -->`` in README.md, bench/README.md or docs/*.md (HTML comments: GitHub
and mkdocs show neither); ``BLOCKS`` says how each NAME is written. A block reads
only the JSON reports committed under ``bench/results/`` (``git ls-files``: a run is
kept with ``git add -f``), and names the date and commit of every run it quotes.

Outside the blocks, none of those files carries a figure, in any section. The rule
reads prose and tables, not fenced code, code spans (a span may wrap a line), HTML
comments or link targets; a figure there is

- a number followed by a unit only a measurement has: a rate (``jobs/s``, any
  ``<word>/s``, ``jobs a second``), ``µs``, a size (``B``, ``bytes``,
  ``KB``/``MB``/``KiB``/``MiB``), ``times``, ``%``, or ``×``/``x`` right after it
  (``1.47×``, ``20x``; ``2 × 200`` is a product);
- a number with a decimal part (a ratio, a latency: ``0.67``, ``1.52 ms``);
- a table cell past the first column that is a number alone (``| 5,259 (6,497) |``;
  the first column labels its row: ``| 404 |``, ``| 1 | NS:{Q}:jobs |``);

a number being none inside a word, a version or a name (``UTF-8``, ``v2``), and
these being no figures:

- versions (``3.11.7``, ``Python 3.9 and 3.13``, ``Redis 7.0``, ``OpenAPI 3.1``);
- bounds: a number right after ``at most``, or right before ``by default`` (``at most
  200 bytes``, ``4 MiB by default``);
- the settings ``ALLOWED`` names, each with its page and why it is one (an entry
  whose words its page no longer has is itself reported).

Other whole numbers are settings (``20,000 jobs``, ``5 ms``, ``lease 60 s``, ``-c 2``)
and may stay, so a setting is written whole (``500 ms``, not ``0.5 s``). The rule
cannot see a measurement written so (``took 123 ms``) or in words; review keeps
those out.

Standard library only: ``tests/unit/test_docs_figures.py`` runs the check in CI.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parent.parent  # the repository's top
RESULTS = "bench/results"  # where the reports are, relative to ROOT


def doc_files() -> list[str]:
    """The files whose blocks are rendered and whose figures are checked, relative to
    ROOT."""
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    return ["README.md", "bench/README.md", *docs]


def read(path: str) -> str:
    return (ROOT / path).read_text()


# -- the runs ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One committed JSON report: where it is (relative to ROOT) and what it holds."""

    path: str
    report: dict[str, Any]

    @property
    def date(self) -> str:
        """When it ran, UTC to the minute: ``2026-11-23 21:19 UTC``."""
        stamp = self.report.get("date")
        if not isinstance(stamp, str):
            raise ValueError(f"{self.path}: no date: a figure quoted from it could not say when")
        found = re.fullmatch(r"(\d{4}-\d\d-\d\d)(?:T(\d\d):?(\d\d).*)?", stamp)
        if found is None:
            raise ValueError(f"{self.path}: a date not in ISO form: {stamp!r}")
        day, hour, minute = found.groups()
        return f"{day} {hour}:{minute} UTC" if hour else day

    @property
    def commit(self) -> str:
        """The commit measured, abbreviated, and the files that differed from it: the
        harness's ``source``, or else (the peer harness before it had one) the commit
        its fastq reported."""
        source = self.report.get("source") or {}
        commit = source.get("commit") or self.report.get("versions", {}).get("fastq", {}).get(
            "commit", ""
        )
        found = re.match(r"[0-9a-f]{7,40}\b", commit)
        if found is None:
            raise ValueError(f"{self.path}: no commit: a figure quoted from it could not say what")
        dirty = source.get("dirty") or []
        return found.group()[:7] + (f" (uncommitted: {', '.join(dirty)})" if dirty else "")

    @property
    def name(self) -> str:
        return Path(self.path).name

    def machine(self) -> str:
        m = self.report.get("machine")
        if not m:
            return "its machine not recorded"
        return (
            f"{m.get('cpus')} CPUs, Python {m.get('python')}, "
            f"redis-server {m.get('redis_server')}, fastq.ACCELERATED {m.get('fastq_accelerated')}"
        )


def committed_reports() -> list[str]:
    """The JSON reports under bench/results that git tracks (staged ones included),
    relative to ROOT: a run left in the tree but not added changes nothing."""
    proc = subprocess.run(
        ["git", "ls-files", "-z", "--", f"{RESULTS}/*.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if proc.returncode:
        raise RuntimeError(f"git ls-files failed: {proc.stderr.strip()}")
    return sorted(name for name in proc.stdout.split("\0") if name)


def load_runs(paths: Optional[list[str]] = None) -> list[Run]:
    """The committed runs (or those of ``paths``), oldest first by their dates."""
    runs = [
        Run(path, json.loads((ROOT / path).read_text()))
        for path in (committed_reports() if paths is None else paths)
    ]
    return sorted(runs, key=lambda r: str(r.report.get("date", "")))


# -- the peer comparison (bench/peers/run.py's reports) ---------------------------------

WORKLOADS = ("drain", "io", "rtt", "blast", "memory")  # bench/peers/run.py's order
SHOWN = {
    "fastq": "fastq",
    "rq": "RQ",
    "dramatiq": "Dramatiq",
    "huey": "huey",
    "celery": "Celery",
    "arq": "arq",
    "saq": "SAQ",
    "taskiq": "taskiq",
    "streaq": "streaq",
    "bullmq": "BullMQ",
}


def peer_runs(runs: list[Run]) -> list[Run]:
    """Full-size runs of the peer harness that compared fastq with another queue."""
    return [
        run
        for run in runs
        if run.name.startswith("peers-")
        and not run.report.get("options", {}).get("quick")
        and "fastq" in run.report.get("results", {})
        and len(run.report["results"]) > 1
    ]


def measured(run: Run, workload: str) -> bool:
    """Whether ``run`` measured ``workload`` with fastq, every job counted once."""
    return bool(run.report["results"]["fastq"].get(workload, {}).get("ok"))


def size(run: Run, workload: str) -> int:
    """The jobs of a workload fastq ran (a peer's may be capped: ``--cap``)."""
    return int(run.report["results"]["fastq"][workload]["jobs"])


def latest(runs: list[Run], want: Callable[[Run], bool]) -> Optional[Run]:
    """The latest of ``runs`` (oldest first) that ``want`` accepts."""
    found = [run for run in runs if want(run)]
    return found[-1] if found else None


def latest_of(runs: list[Run], workload: str, want: Callable[[Run], bool]) -> Optional[Run]:
    """The latest of ``runs`` that measured ``workload`` as ``want`` asks."""
    return latest(runs, lambda run: measured(run, workload) and want(run))


def best_peer(run: Run, workload: str) -> Optional[tuple[str, float]]:
    """The run's own verdict: the best peer of a workload and fastq's ratio to it
    (``fastq_vs_fastest_peer`` before the memory workload, ``fastq_vs_best_peer`` since)."""
    ratios = run.report.get("fastq_vs_best_peer") or run.report.get("fastq_vs_fastest_peer", {})
    entry = ratios.get(workload)
    if not entry:
        return None
    return entry.get("best_peer") or entry["fastest_peer"], float(entry["ratio"])


def figure(result: dict[str, Any], workload: str) -> str:
    key = "bytes_per_job" if workload == "memory" else "jobs_s"
    value = result.get(key)
    return f"{value:,.0f}" if value else "—"


def io_setting(run: Run) -> str:
    options = run.report["options"]
    text = f"{options.get('io_ms', 5):g} ms"
    if options.get("io_concurrency"):
        text += f", {options['io_concurrency']} in flight per process"
    return text


def workload_setting(run: Run, workload: str) -> str:
    """What a workload's size does not say: `` of 5 ms`` (io), `` at 1 ms RTT`` (rtt)."""
    if workload == "io":
        return f" of {io_setting(run)}"
    if workload == "rtt":
        return f" at {2 * run.report['options'].get('rtt_hold_ms', 0.5):g} ms RTT"
    return ""


def workload_label(run: Run, workload: str) -> str:
    n = size(run, workload)
    if workload == "drain":
        return f"drain: {n:,} queued no-op jobs, jobs/s"
    if workload == "io":
        settings = io_setting(run)
        if "in flight" not in settings:
            settings += ", each peer at its own settings"
        return f"io: {n:,} jobs that each wait {settings}, jobs/s"
    if workload == "rtt":
        rtt_ms = 2 * run.report["options"].get("rtt_hold_ms", 0.5)
        return f"rtt: the drain of {n:,} jobs through a proxy adding {rtt_ms:g} ms of RTT, jobs/s"
    if workload == "blast":
        return f"blast: {n:,} jobs enqueued with the bulk API, jobs/s"
    return f"memory: Redis bytes per queued `send_email(...)` job, {n:,} queued (fewer is better)"


# the summary's rows: a workload, and which runs of it count (io at each peer's own
# settings, or at the same number in flight for every async peer: --io-concurrency)
SUMMARY_ROWS: tuple[tuple[str, Callable[[Run], bool]], ...] = (
    ("drain", lambda run: True),
    ("io", lambda run: not run.report["options"].get("io_concurrency")),
    ("rtt", lambda run: True),
    ("blast", lambda run: True),
    ("io", lambda run: bool(run.report["options"].get("io_concurrency"))),
    ("memory", lambda run: True),
)


def peers_summary(runs: list[Run]) -> str:
    """fastq against the best peer, each workload from the latest run that measured it."""
    peers = peer_runs(runs)
    lines = [
        "| workload | fastq | best peer | fastq / best | run |",
        "|---|---:|---|---:|---|",
    ]
    cited: list[Run] = []
    for workload, want in SUMMARY_ROWS:
        run = latest_of(peers, workload, want)
        if run is None:
            continue
        results = run.report["results"]
        best = best_peer(run, workload)
        others = sum(1 for name, r in results.items() if name != "fastq" and workload in r)
        if best is None:
            peer, ratio = f"none of {others} counted every job once", "—"
        else:
            name, value = best
            peer, ratio = (
                f"{SHOWN.get(name, name)} {figure(results[name][workload], workload)},"
                f" best of {others}",
                f"{value:.2f}",
            )
        fastq = figure(results["fastq"][workload], workload)
        lines.append(
            f"| {workload_label(run, workload)} | {fastq} | {peer} | {ratio} | "
            f"{run.date}, {run.commit} |"
        )
        if run not in cited:
            cited.append(run)
    if not cited:
        return "No full run of `python -m bench.peers.run` is committed under `bench/results/`."
    machines = {run.machine() for run in cited}
    if len(machines) == 1:
        sources = ", ".join(f"`{run.name}`" for run in cited) + f"; each on {machines.pop()}"
    else:
        sources = ", ".join(f"`{run.name}` ({run.machine()})" for run in cited)
    return "\n".join(lines) + (
        "\n\nEach row from the latest full run of `python -m bench.peers.run` committed under"
        f" `bench/results/` that measured it, its date and commit in the last column: {sources}."
        " Two worker processes a peer, every job counted in Redis; the best peer is the"
        " fastest (or smallest) of those that ran every job exactly once."
    )


def counts(result_of: dict[str, dict[str, Any]]) -> str:
    """``exact``, or the duplicates and losses of each workload that was not."""
    notes = []
    for what in ("duplicates", "lost"):
        found = [f"{w} {r[what]}" for w, r in result_of.items() if r.get(what)]
        if found:
            notes.append(f"{what}: {', '.join(found)}")
    failed = [f"{w} ({r['error']})" for w, r in result_of.items() if r.get("error")]
    if failed:
        notes.append(f"failed: {', '.join(failed)}")
    if not notes and not all(r.get("ok") for r in result_of.values()):
        notes.append("not exactly N")
    return "; ".join(notes) or "exact"


def peers_table(runs: list[Run]) -> str:
    """Every peer in the latest full run that measured the drain."""
    return peer_table(latest_of(peer_runs(runs), "drain", lambda run: True))


def peers_async_io(runs: list[Run]) -> str:
    """Every peer in the latest full run of io jobs at the same number in flight for
    every async peer (``--io-concurrency``)."""
    at_once = latest_of(
        peer_runs(runs), "io", lambda r: bool(r.report["options"].get("io_concurrency"))
    )
    return peer_table(at_once)


def peer_table(run: Optional[Run]) -> str:
    """Every peer of ``run``, a column per workload, best first."""
    if run is None:
        return "No such run of `python -m bench.peers.run` is committed under `bench/results/`."
    results = run.report["results"]
    shown = [w for w in WORKLOADS if measured(run, w)]
    heads = {
        "drain": "drain jobs/s (steady)",
        "io": f"io {run.report['options'].get('io_ms', 5):g} ms jobs/s (steady)",
        "rtt": "rtt jobs/s (rtt/drain)",
        "blast": "blast jobs/s",
        "memory": "memory B/job",
    }
    lines = [
        "| peer | " + " | ".join(heads[w] for w in shown) + " | counts |",
        "|---|" + "---:|" * len(shown) + "---|",
    ]

    def cell(r: Optional[dict[str, Any]], workload: str) -> str:
        if not r or r.get("error"):
            return "failed"
        text = figure(r, workload)
        if workload in ("drain", "io") and r.get("steady_jobs_s"):
            text += f" ({r['steady_jobs_s']:,.0f})"
        if workload == "rtt" and r.get("vs_drain"):
            text += f" ({r['vs_drain']:.2f})"
        return text

    first = shown[0]

    def order(name: str) -> float:
        value = results[name].get(first, {}).get("jobs_s") or 0.0
        return -float(value)

    sizes = {w: size(run, w) for w in shown}
    for name in sorted(results, key=order):
        label = SHOWN.get(name, name)
        jobs = {w: results[name].get(w, {}).get("jobs") for w in shown}
        if any(n is not None and n != sizes[w] for w, n in jobs.items()):  # capped (--cap)
            label += f" ({', '.join(sorted({f'{n:,}' for n in jobs.values() if n}))} jobs)"
        if name == "fastq":
            label = f"**{label}**"
        cells = [cell(results[name].get(w), w) for w in shown]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {counts(results[name])} |")
    how = ", ".join(f"{w} {sizes[w]:,}{workload_setting(run, w)}" for w in shown)
    caps = run.report["options"].get("caps") or {}
    capped = "".join(
        f"; {SHOWN.get(p, p)} at most {n:,} a workload" for p, n in caps.items() if p in results
    )
    return "\n".join(lines) + (
        f"\n\n`python -m bench.peers.run` ({how}{capped}), {run.date} at commit {run.commit}:"
        f" `{RESULTS}/{run.name}`; {run.machine()}."
    )


def peers_rtt(runs: list[Run]) -> str:
    """A sentence: fastq's drain through the RTT proxy against its drain straight to
    Redis, in the latest full run that measured both."""
    run = latest_of(peer_runs(runs), "rtt", lambda run: measured(run, "drain"))
    if run is None:
        return "No full run of `python -m bench.peers.run` with its rtt workload is committed."
    fastq = run.report["results"]["fastq"]
    rtt, drain = fastq["rtt"], fastq["drain"]
    rtt_ms = 2 * run.report["options"].get("rtt_hold_ms", 0.5)
    workers = run.report["options"].get("workers", 2)
    return (
        f"In the latest full run of `python -m bench.peers.run` committed, {workers} fastq"
        f" worker processes drained {rtt['jobs']:,} no-op jobs through a proxy adding"
        f" {rtt_ms:g} ms of RTT at **{rtt['jobs_s'] / drain['jobs_s']:.2f}** of their rate"
        f" straight to Redis ({rtt['jobs_s']:,.0f} against {drain['jobs_s']:,.0f} jobs/s,"
        f" every job counted in Redis as it ran): {run.date} at commit {run.commit},"
        f" `{RESULTS}/{run.name}`; {run.machine()}."
    )


# -- fastq's own benchmarks (bench.harness's write_report) -------------------------------


def own_runs(runs: list[Run], benchmark: str) -> list[Run]:
    """Committed full-size runs of one of fastq's own benchmarks, oldest first."""
    return [
        run
        for run in runs
        if run.report.get("benchmark") == benchmark
        and not run.report.get("options", {}).get("quick")
    ]


def row(label: str, fastq: str, base: str, ratio: str, run: Run) -> str:
    return f"| {label} | {fastq} | {base} | {ratio} | {run.date}, {run.commit} |"


def e2e_worker_rows(run: Run) -> list[str]:
    options, best = run.report["options"], run.report["best_jobs_s"]
    ratios = run.report["ratios"]
    n, batch, repeat = options["jobs"], options["batch"], options["repeat"]
    return [
        row(
            f"`e2e_worker`: `enqueue_many` of {n:,} no-op jobs, jobs/s (best of {repeat})",
            f"{best['fastq_enqueue']:,.0f}",
            f"bare pipelined HSET + LPUSH {best['bare_enqueue']:,.0f}",
            f"{ratios['enqueue']:.2f}",
            run,
        ),
        row(
            f"`e2e_worker`: one worker's drain of {n:,} no-op jobs, batch {batch}, jobs/s"
            f" (best of {repeat})",
            f"{best['fastq_drain']:,.0f}",
            f"bare Lua claim + ack {best['bare_drain']:,.0f}",
            f"{ratios['drain']:.2f}",
            run,
        ),
    ]


E2E_POOL_ROWS = (  # scenario, label, baseline scenario, its label
    ("c2", "`pool -c 2`", "bare", "2 bare processes, forked"),
    ("c32", "`pool -c 32`", "c2", "`pool -c 2`"),
)


def e2e_pool_rows(run: Run) -> list[str]:
    options, scenarios = run.report["options"], run.report["scenarios"]
    lines = []
    for name, label, base, base_label in E2E_POOL_ROWS:
        r, b = scenarios.get(name), scenarios.get(base)
        if r and b:
            lines.append(
                row(
                    f"`e2e_pool`: {label} drain of {options['jobs']:,} no-op jobs, jobs/s"
                    f" (median of {len(r.get('runs_jobs_s', [1]))})",
                    f"{r['jobs_s']:,.0f}",
                    f"{base_label} {b['jobs_s']:,.0f}",
                    f"{r['jobs_s'] / b['jobs_s']:.2f}",
                    run,
                )
            )
    return lines


def script_cost_rows(run: Run) -> list[str]:
    return [
        row(
            f"`script_cost`: Redis µs per job of claim + ack, {run.report['jobs']:,} jobs,"
            f" batch {r['batch']} (fewer is better)",
            f"{r['fastq_us']:.2f}",
            f"bare Lua claim + ack {r['bare_us']:.2f}",
            f"{r['fastq_us'] / r['bare_us']:.2f}",
            run,
        )
        for r in run.report["rows"]
    ]


def redis_cost_rows(run: Run) -> list[str]:
    options, best = run.report["options"], run.report["best"]
    floor = best["floor"]["total_us"]
    return [
        row(
            f"`redis_cost`: Redis CPU µs per job, enqueue + claim + ack + fold, {variant},"
            f" {options['jobs']:,} jobs (best of {options['repeat']}; fewer is better)",
            f"{best[variant]['total_us']:.2f}",
            f"pipelined LPUSH + RPOP 100 {floor:.2f}",
            f"{best[variant]['total_us'] / floor:.1f}",
            run,
        )
        for variant in options["variants"]
        if variant in best
    ]


def memory_rows(run: Run) -> list[str]:
    mailing = run.report["payloads"].get("mailing")
    if not mailing:
        return []
    return [
        row(
            f"`memory_per_job`: Redis bytes per queued `send_email(...)` job,"
            f" {mailing['jobs']:,} queued (fewer is better)",
            f"{mailing['bytes_per_job']:,.1f}",
            "— (no baseline in the run)",
            "—",
            run,
        )
    ]


OWN: tuple[tuple[str, Callable[[Run], list[str]]], ...] = (
    ("e2e_worker", e2e_worker_rows),
    ("e2e_pool", e2e_pool_rows),
    ("script_cost", script_cost_rows),
    ("redis_cost", redis_cost_rows),
    ("memory_per_job", memory_rows),
)


def fastq_alone(runs: list[Run]) -> str:
    """fastq's headline figures beside the baseline of the same run, each benchmark
    from its latest committed full run."""
    lines = [
        "| benchmark | fastq | baseline, same run | fastq / baseline | run |",
        "|---|---:|---|---:|---|",
    ]
    cited = []
    for benchmark, rows_of in OWN:
        found = own_runs(runs, benchmark)
        if found:
            lines += rows_of(found[-1])
            cited.append(found[-1])
    if not cited:
        return "No run of fastq's own benchmarks is committed under `bench/results/`."
    sources = "; ".join(f"`{run.name}` ({run.machine()})" for run in cited)
    return "\n".join(lines) + (
        "\n\nEach benchmark's latest full run committed under `bench/results/`, its date"
        f" and commit in the last column: {sources}."
    )


BLOCKS: dict[str, Callable[[list[Run]], str]] = {
    "peers-summary": peers_summary,
    "peers-table": peers_table,
    "peers-async-io": peers_async_io,
    "peers-rtt": peers_rtt,
    "fastq-alone": fastq_alone,
}


# -- the blocks -------------------------------------------------------------------------

OPEN = re.compile(r"^<!-- figures: ([\w-]+)\b.*-->$")
CLOSE = "<!-- /figures -->"


@dataclass(frozen=True)
class Block:
    name: str
    first: int  # the index of its opening line
    last: int  # the index of its closing line


def find_blocks(text: str, where: str) -> list[Block]:
    lines = text.split("\n")
    blocks: list[Block] = []
    opened: Optional[tuple[str, int]] = None
    for i, line in enumerate(lines):
        found = OPEN.match(line)
        if found:
            if opened is not None:
                raise ValueError(f"{where}:{i + 1}: a block opens inside block {opened[0]}")
            opened = (found.group(1), i)
        elif line == CLOSE:
            if opened is None:
                raise ValueError(f"{where}:{i + 1}: {CLOSE} closes no block")
            blocks.append(Block(opened[0], opened[1], i))
            opened = None
        elif line.startswith("<!-- figures"):
            raise ValueError(f"{where}:{i + 1}: not a block's marker: {line!r}")
    if opened is not None:
        raise ValueError(f"{where}:{opened[1] + 1}: block {opened[0]} is never closed")
    for block in blocks:
        if block.name not in BLOCKS:
            raise ValueError(f"{where}:{block.first + 1}: no block is named {block.name!r}")
    return blocks


def render(text: str, runs: list[Run], where: str = "<text>") -> str:
    """``text`` with every block's body as the runs write it now."""
    lines = text.split("\n")
    for block in reversed(find_blocks(text, where)):
        body = ["", *BLOCKS[block.name](runs).split("\n"), ""]
        lines[block.first + 1 : block.last] = body
    return "\n".join(lines)


def stale_blocks(text: str, runs: list[Run], where: str = "<text>") -> list[str]:
    """The names of the blocks of ``text`` that differ from what the runs write."""
    now = render(text, runs, where)
    old_blocks, new_blocks = find_blocks(text, where), find_blocks(now, where)
    old, new = text.split("\n"), now.split("\n")
    return [
        a.name
        for a, b in zip(old_blocks, new_blocks)
        if old[a.first : a.last + 1] != new[b.first : b.last + 1]
    ]


# -- figures outside the blocks ---------------------------------------------------------

NUMBER = r"(?<![\w.\-])\d[\d,]*(?:\.\d+)?"  # not inside a word, a version, UTF-8
UNIT = (
    r"(?:\s?(?:[A-Za-z]+/s\b|jobs a second|jobs per second|µs|B\b|bytes\b|[KMG]i?B\b"
    r"|times\b|%)|×|x\b)"  # × right after the number: a ratio (2 × 200 is a product)
)
FIGURE = re.compile(rf"{NUMBER}{UNIT}|(?<![\w.\-])\d[\d,]*\.\d+(?!\.?\d)")
CELL = re.compile(r"\**\d[\d,]*(?:\.\d+)?\**(?:\s*\([^)]*\))?")  # a table cell of a number
VERSION = re.compile(
    r"\b(?:Python|Redis|redis-server|Valkey|node|OpenAPI)\s+v?\d+(?:\.\d+)+\+?"
    r"(?:(?:,\s*|\s+(?:and|or|to)\s+|–)\d+(?:\.\d+)+)*|\d+\.\d+\.\d+"
)
BOUND = re.compile(rf"\bat most\s+{NUMBER}{UNIT}?|{NUMBER}{UNIT}?\s+by default\b")
HIDDEN = re.compile(  # read nowhere: HTML comments, code spans (within a paragraph), link targets
    r"<!--.*?-->|(?<!`)(`+)(?!`)(?:(?!\n[ \t]*\n).)*?(?<!`)\1(?!`)|\]\([^)]*\)", re.S
)

# Settings the rule cannot tell from a measurement, each with why it is one:
# (file, the words as the page has them, the reason). Each must still be found.
ALLOWED: tuple[tuple[str, str, str], ...] = (
    (
        "docs/internals.md",
        "every 2.5–5 s",
        "the retry of a refusal an operator must fix: connection/faults.py's backoff_s, "
        "its 5 s cap less up to half of it in jitter",
    ),
    (
        "docs/internals.md",
        "tries 1.5 s",
        "how long a stopping worker tries to settle what it holds: worker/loop.py's "
        "FLUSH_PATIENCE_S",
    ),
    (
        "docs/internals.md",
        "is 76 bytes",
        "the length of the example envelope the sentence quotes, character by character",
    ),
)


def blank(text: str) -> str:
    """``text`` with every character but its line breaks turned to a space."""
    return re.sub(r"[^\n]", " ", text)


def visible(text: str, where: str = "<text>") -> list[str]:
    """The lines of ``text`` as the rule reads them: fenced code, code spans, HTML
    comments, link targets and the words ``ALLOWED`` names for ``where`` blanked (so
    a line keeps its number)."""
    lines = text.split("\n")
    fenced = False
    for i, line in enumerate(lines):
        fence = line.lstrip().startswith("```")
        if fence or fenced:
            lines[i] = ""
        if fence:
            fenced = not fenced
    shown = HIDDEN.sub(lambda m: blank(m.group()), "\n".join(lines))
    for words in allowed_in(where):
        shown = words.sub(lambda m: blank(m.group()), shown)
    return shown.split("\n")


def words_pattern(words: str) -> re.Pattern[str]:
    """``words`` as a pattern that a line break between two of them still matches."""
    return re.compile(r"\s+".join(map(re.escape, words.split())))


def allowed_in(where: str) -> list[re.Pattern[str]]:
    """The words ``ALLOWED`` names for ``where``, as patterns."""
    return [words_pattern(words) for path, words, _ in ALLOWED if path == where]


def figures_in(line: str) -> list[str]:
    """The figures of one line as ``visible`` gives it (see the module's docstring)."""
    readable = BOUND.sub(" ", VERSION.sub(" ", line))
    found = [match.group().strip() for match in FIGURE.finditer(readable)]
    if readable.lstrip().startswith("|"):  # a table row: its cells after the first
        cells = re.split(r"(?<!\\)\|", readable.strip())[2:]
        found += [c.strip() for c in cells if CELL.fullmatch(c.strip())]
    return found


def stray_figures(text: str, where: str = "<text>") -> list[str]:
    """Each figure of ``text`` outside a block: ``where:line: figure in 'line'``."""
    in_block: set[int] = set()
    for block in find_blocks(text, where):
        in_block.update(range(block.first, block.last + 1))
    raw = text.split("\n")
    found = []
    for i, line in enumerate(visible(text, where)):
        if i in in_block:
            continue
        found += [
            f"{where}:{i + 1}: {figure!r} in {raw[i].strip()!r}" for figure in figures_in(line)
        ]
    return found


def unused_allowances() -> list[str]:
    """The entries of ALLOWED whose words their file no longer has, as the rule reads it."""
    return [
        f"{path}: ALLOWED names {words!r}, which it no longer has"
        for path, words, _ in ALLOWED
        if not words_pattern(words).search("\n".join(visible(read(path))))
    ]


# -- the command ------------------------------------------------------------------------


def strays() -> list[str]:
    """Figures outside the blocks, and allowances that no longer match."""
    found = [stray for path in doc_files() for stray in stray_figures(read(path), path)]
    return found + unused_allowances()


def check(runs: list[Run]) -> list[str]:
    """What is wrong with the docs: stale blocks, then figures outside blocks."""
    problems = []
    for path in doc_files():
        text = read(path)
        for name in stale_blocks(text, runs, path):
            problems.append(f"{path}: block {name} is stale (python -m bench.docs_figures)")
    return problems + strays()


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if anything is stale"
    )
    args = parser.parse_args(argv)
    try:
        runs = load_runs()
        if args.check:
            problems = check(runs)
            for problem in problems:
                print(problem)
            return 1 if problems else 0
        for path in doc_files():
            text = read(path)
            stale = stale_blocks(text, runs, path)
            if stale:
                (ROOT / path).write_text(render(text, runs, path))
                print(f"{path}: rewrote {', '.join(stale)}")
    except ValueError as exc:  # a marker or a report the blocks cannot use
        print(f"error: {exc}", file=sys.stderr)
        return 2
    left = strays()
    for stray in left:
        print(f"not rendered: {stray}")
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
