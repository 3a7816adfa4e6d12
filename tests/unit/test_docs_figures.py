"""The docs' benchmark figures are measured, never copied: every block between
``<!-- figures: NAME -->`` and ``<!-- /figures -->`` is what ``python -m
bench.docs_figures`` writes from the JSON reports committed under bench/results/, and
no page (README.md, bench/README.md, docs/*.md) holds a figure outside those blocks
(what counts as a figure: ``bench/docs_figures.py``'s docstring, and the cases below)."""

from __future__ import annotations

import re

import pytest

from bench import docs_figures
from bench.docs_figures import ROOT, Run


@pytest.fixture(scope="module")
def runs() -> list[Run]:
    return docs_figures.load_runs()


def read(path: str) -> str:
    return (ROOT / path).read_text()


def test_every_block_is_what_the_committed_reports_give(runs: list[Run]) -> None:
    stale = [
        f"{path}: {name}"
        for path in docs_figures.doc_files()
        for name in docs_figures.stale_blocks(read(path), runs, path)
    ]
    assert not stale, "stale blocks (python -m bench.docs_figures rewrites them): " + "; ".join(
        stale
    )


def test_no_figure_outside_a_block(runs: list[Run]) -> None:
    strays = [
        stray
        for path in docs_figures.doc_files()
        for stray in docs_figures.stray_figures(read(path), path)
    ]
    assert not strays, (
        "figures typed by hand: render them from a committed report (bench/docs_figures.py)"
        " or name the command that measures them instead:\n" + "\n".join(strays)
    )


def test_the_docs_quote_the_peer_comparison(runs: list[Run]) -> None:
    for path in ("README.md", "docs/benchmarks.md"):
        names = [b.name for b in docs_figures.find_blocks(read(path), path)]
        assert "peers-summary" in names, path
    summary = docs_figures.peers_summary(runs)
    full = docs_figures.latest_of(docs_figures.peer_runs(runs), "drain", lambda run: True)
    assert full is not None and f"{full.date}, {full.commit}" in summary


def test_the_rtt_sentence_is_fastqs_own_ratio_of_one_run(runs: list[Run]) -> None:
    run = docs_figures.latest_of(docs_figures.peer_runs(runs), "rtt", lambda run: True)
    assert run is not None
    fastq = run.report["results"]["fastq"]
    sentence = docs_figures.peers_rtt(runs)
    assert f"**{fastq['rtt']['jobs_s'] / fastq['drain']['jobs_s']:.2f}**" in sentence
    assert f"{run.date} at commit {run.commit}" in sentence and run.name in sentence
    for path in ("docs/redis.md", "docs/internals.md"):
        assert "peers-rtt" in [b.name for b in docs_figures.find_blocks(read(path), path)]


def test_each_run_quoted_says_when_and_what_it_measured(runs: list[Run]) -> None:
    for run in runs:
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", run.date), run.path
        assert re.match(r"[0-9a-f]{7}\b", run.commit), run.path
    with pytest.raises(ValueError, match="no date"):
        _ = Run("bench/results/x.json", {"source": {"commit": "0" * 40}}).date
    with pytest.raises(ValueError, match="no commit"):
        _ = Run("bench/results/x.json", {"date": "2026-11-23T21:19:08Z"}).commit


def test_a_block_edited_by_hand_is_stale(runs: list[Run]) -> None:
    text = read("README.md")
    [block] = [b for b in docs_figures.find_blocks(text, "README.md") if b.name == "peers-summary"]
    lines = text.split("\n")
    inside = "\n".join(lines[block.first : block.last + 1])
    # a rate of fastq's from the latest run that measured one (the latest may be a
    # memory run alone)
    figure = next(
        f"{r['jobs_s']:,.0f}"
        for run in reversed(docs_figures.peer_runs(runs))
        for r in run.report["results"]["fastq"].values()
        if r.get("jobs_s")
    )
    assert figure in inside
    edited = text.replace(inside, inside.replace(figure, "1" + figure, 1))
    assert docs_figures.stale_blocks(edited, runs) == ["peers-summary"]
    assert docs_figures.render(edited, runs) == text


def test_a_figure_typed_into_any_page_is_found() -> None:
    for path in docs_figures.doc_files():
        title, rest = read(path).split("\n", 1)
        text = f"{title}\n\nA drain at 1.47× the best peer.\n{rest}"
        [stray] = docs_figures.stray_figures(text, path)
        assert stray.startswith(f"{path}:3: '1.47×'"), stray
    text = read("docs/records.md").replace(
        "a folded record is one hash field a job",
        "a folded record is one hash field a job, about 107 B",
    )
    [stray] = docs_figures.stray_figures(text, "docs/records.md")
    assert "'107 B'" in stray


@pytest.mark.parametrize(
    ("line", "figures"),
    [
        ("a drain at 1.47× and a bulk enqueue at 13.65× the best peer", ["1.47×", "13.65×"]),
        ("176 bytes of Redis per queued job (0.97 of huey's 181)", ["176 bytes", "0.97"]),
        ("`enqueue_many` 311,363 jobs/s vs bare 92,653", ["311,363 jobs/s"]),
        ("fastq 1.58–1.81 µs at batch 100", ["1.58", "1.81 µs"]),
        ("lateness p50 1.52 ms, p99 4.79, max 10.6", ["1.52", "4.79", "10.6"]),
        (
            "over 20 times faster, 20x the rate, 152 B a job, at 95%",
            ["20 times", "20x", "152 B", "95%"],
        ),
        ("USS 7.1 → 7.9 MiB per child", ["7.1", "7.9 MiB"]),
        ("| bullmq | 5,259 (6,497) | **19,500** |", ["5,259 (6,497)", "**19,500**"]),
        ("drain 20,000 queued jobs with 2 worker processes, batch 100", []),
        ("async jobs of 20 ms through a proxy adding 1 ms of RTT, `-c 2`", []),
        ("`--memory-jobs 20000 --io-ms 0.5` in code is not read", []),
        ("Python 3.11.7, redis-server 7.0.15, Redis 7.0, on 2026-11-23 at 90a2975", []),
        ("[notes](results/peers-2026-11-23.md) <!-- figures: x 1.5× -->", []),
        ("| `python -m bench.e2e_worker` | 100,000 no-op jobs, batch 100 |", []),
        ("| 1 | `NS:{Q}:jobs` | hash |", []),
        ("| 404 | no such job |", []),
        ("| run 1 | 81,828 | 85,411 |", ["81,828", "85,411"]),
        (
            "106,932 commands/s, 1,878 requests/s; 3,000 jobs at 100/s",
            ["106,932 commands/s", "1,878 requests/s"],
        ),
        ("2 × 200 coroutines, 10 × `--batch`; but 1.01× and 3× the rate", ["1.01×", "3×"]),
        ("crc32 of its UTF-8 bytes; Python 3.9 and 3.13, OpenAPI 3.1, Redis 7.2+", []),
        ("ids of at most 200 bytes, results at most 512 KiB, 4 MiB by default", []),
        ("a busy queue holds at most about 21 MB", ["21 MB"]),
        ("a lease of 60 s, 500 ms, every 5 s; but 0.5 s", ["0.5"]),
    ],
)
def test_what_counts_as_a_figure(line: str, figures: list[str]) -> None:
    found = docs_figures.stray_figures(line)
    assert [f.split("'")[1] for f in found] == figures


def test_code_spans_that_wrap_a_line_are_not_read() -> None:
    text = "says `age limit: 61.2 s ago,\nits next at 63.2 s` after 1.5 µs\n\n`a\n\nb 2.5 µs`"
    found = docs_figures.stray_figures(text)
    assert [f.split("'")[1] for f in found] == ["1.5 µs", "2.5 µs"]
    assert found[0].startswith("<text>:2: ")


def test_a_setting_allowed_by_name_is_not_a_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = ("docs/x.md", "every 2.5–5 s", "why it is a setting")
    monkeypatch.setattr(docs_figures, "ALLOWED", (entry,))
    line = "retried every 2.5–5 s, in 1.5 µs"
    assert [f.split("'")[1] for f in docs_figures.stray_figures(line, "docs/x.md")] == ["1.5 µs"]
    assert len(docs_figures.stray_figures(line, "docs/y.md")) == 2
    assert docs_figures.stray_figures("retried every\n2.5–5 s", "docs/x.md") == []
    monkeypatch.setattr(docs_figures, "ALLOWED", (("README.md", "every 2.5–5 s", "gone"),))
    [unused] = docs_figures.unused_allowances()
    assert "README.md" in unused and "no longer has" in unused


def test_markers_that_do_not_pair_are_refused() -> None:
    with pytest.raises(ValueError, match="never closed"):
        docs_figures.find_blocks("<!-- figures: peers-table -->\ntext", "x.md")
    with pytest.raises(ValueError, match="closes no block"):
        docs_figures.find_blocks("<!-- /figures -->", "x.md")
    with pytest.raises(ValueError, match="no block is named"):
        docs_figures.find_blocks("<!-- figures: e2e-typed -->\n<!-- /figures -->", "x.md")
