"""The PNG chart of the peer harness's JSON reports; needs only matplotlib (the
optional extra ``bench``), so it also runs on reports from another machine:

    python -m bench.peers.chart bench/results/peers-a.json [more.json ...] -o chart.png

Several reports (say one of drain and blast, one of memory) are merged, a later
report's figures replacing an earlier one's for the same peer and workload.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

WORKLOADS = ("drain", "io", "rtt", "blast", "memory")  # run.py's, in its order
TITLES = {"io": "io (5 ms jobs)", "rtt": "rtt (drain, 1 ms RTT)"}
COLUMNS = 3


def merge(reports: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {**reports[0], "results": {}, "options": {}}
    for report in reports:
        merged["options"].update(report["options"])
        for peer, workloads in report["results"].items():
            merged["results"].setdefault(peer, {}).update(workloads)
    merged["date"] = " / ".join(sorted({r["date"][:10] for r in reports}))
    return merged


def draw_chart(report: dict[str, Any], path: Path) -> Optional[str]:
    """A bar chart per workload, fastq in red; returns why it was skipped, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'): no chart drawn"
    workloads = [w for w in WORKLOADS if any(w in r for r in report["results"].values())]
    cols = min(COLUMNS, len(workloads))
    rows_n = -(-len(workloads) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(6 * cols, 4.5 * rows_n), squeeze=False)
    for ax in axes.flat[len(workloads) :]:
        ax.set_visible(False)
    for ax, workload in zip(axes.flat, workloads):
        memory = workload == "memory"
        key = "bytes_per_job" if memory else "jobs_s"
        rows = []
        for name, results in report["results"].items():
            r = results.get(workload)
            if r is None:
                continue
            label = name if r.get("ok") else f"{name} (count not N)"
            if r.get("jobs") and r["jobs"] != _size(report, workload):
                label += f" ({r['jobs']:,} jobs)"
            rows.append((label, r.get(key) or 0, name == "fastq"))
        rows.sort(key=lambda x: -x[1] if memory else x[1])  # the best at the top
        values = [value for _, value, _ in rows]
        bars = ax.barh(
            [label for label, _, _ in rows],
            values,
            color=["tab:red" if ours else "tab:gray" for _, _, ours in rows],
        )
        ax.bar_label(bars, labels=[f"{v:,.0f}" for v in values], padding=2, fontsize=8)
        shown = [v for v in values if v > 0]
        if shown and max(shown) / min(shown) > 20:  # one bar would flatten the others
            ax.set_xscale("log")
        ax.margins(x=0.15)
        title = TITLES.get(workload, workload)
        if workload == "io" and report["options"].get("io_ms"):
            title = f"io ({report['options']['io_ms']:g} ms jobs)"
        ax.set_title(f"{title}: {_size(report, workload):,} jobs")
        log = ", log scale" if ax.get_xscale() == "log" else ""
        unit = "Redis bytes per queued job (lower" if memory else "jobs/s (higher"
        ax.set_xlabel(f"{unit} is better{log})")
    cpus = report["machine"]["cpus"]
    fig.suptitle(f"fastq and peers: 2 worker processes each, {report['date']}, {cpus} CPUs")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def _size(report: dict[str, Any], workload: str) -> int:
    """The workload's N, as the run was asked (a capped peer ran fewer)."""
    asked = report["options"].get(f"{workload}_jobs")
    if asked is None:  # a report from before the option: the largest run
        asked = max(r[workload].get("jobs", 0) for r in report["results"].values() if workload in r)
    return int(asked)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+")
    parser.add_argument("-o", "--output", help="default: the first report's name, .png")
    args = parser.parse_args(argv)
    reports = [json.loads(Path(p).read_text()) for p in args.reports]
    out = Path(args.output) if args.output else Path(args.reports[0]).with_suffix(".png")
    skipped = draw_chart(merge(reports), out)
    print(skipped or f"chart: {out}")
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
