"""docs/protocol.md says one number of KEYS for the enqueue script everywhere (it
said 18 in one place and 15 in others): the number the script's contract declares,
in its key table, its prose and each of its examples."""

from __future__ import annotations

import re

from fastq.protocol.contracts import ENQUEUE
from tests.support.processes import ROOT

DOC = (ROOT / "docs" / "protocol.md").read_text()


def test_every_key_count_of_the_enqueue_script_in_the_doc_is_the_contracts() -> None:
    n = len(ENQUEUE.keys)
    (said,) = re.findall(r"The enqueue script takes (\d+) KEYS", DOC)
    table = DOC[DOC.index("The enqueue script takes") :]
    table = table[: table.index("\n\n", table.index("| # |"))]
    rows = re.findall(r"^\| (\d+) \| `NS:\{Q\}:(\w+)`", table, re.M)
    assert int(said) == n and [int(i) for i, _ in rows] == list(range(1, n + 1))
    assert [suffix for _, suffix in rows] == list(ENQUEUE.keys)
    counts = re.findall(r"EVALSHA sha1 (\d+)|lua enqueue\)\" (\d+)|\"EVALSHA\", sha, (\d+)", DOC)
    assert len(counts) == 3 and all(int("".join(c)) == n for c in counts), counts
    (js_keys,) = re.findall(r"const keys = (\[\".*?\])", DOC, re.S)
    assert re.findall(r'"(\w+)"', js_keys) == list(ENQUEUE.keys)
    example = DOC[DOC.index('redis-cli EVAL "$(fastq lua enqueue)"') :]
    cli = re.findall(r"'fastq:\{count\}:(\w+)'", example[: example.index("```")])
    assert cli == list(ENQUEUE.keys)
