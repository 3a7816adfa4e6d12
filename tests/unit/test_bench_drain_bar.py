"""The benchmarks' drain bar (bench/harness.py): on stderr only when it is a
terminal or ``--progress`` forces it, never with ``--no-progress``; a polled bar
reads nothing unless it is shown."""

from __future__ import annotations

import io
import sys
from types import ModuleType

import pytest


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def drain_bar() -> ModuleType:
    from bench import harness  # run from the repository's top, as ci/test.sh does

    return harness


def drain(drain_bar: ModuleType, total: int = 5) -> None:
    with drain_bar.drain_bar("c2", total) as shown:
        shown.update(2)
        shown.update(total, final=True)


def test_no_bar_without_a_terminal_unless_forced(
    drain_bar: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    drain_bar.configure_progress(None)  # stderr is pytest's capture here, not a terminal
    drain(drain_bar)
    assert capsys.readouterr() == ("", "")
    drain_bar.configure_progress(True)  # --progress: plain lines without a terminal
    drain(drain_bar)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[-1].startswith("c2: 5/5 done")


def test_a_terminal_gets_the_rich_bar_unless_no_progress(
    drain_bar: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("rich")
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    drain_bar.configure_progress(False)  # --no-progress
    drain(drain_bar)
    assert terminal.getvalue() == ""
    drain_bar.configure_progress(None)
    drain(drain_bar)
    assert "5/5" in terminal.getvalue()


def test_polled_reads_only_while_a_bar_is_shown(
    drain_bar: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    reads: list[int] = []

    def read_done() -> int:
        reads.append(1)
        return 4

    drain_bar.configure_progress(False)
    with drain_bar.polled_drain_bar("bare", 4, read_done):
        pass
    assert reads == []
    drain_bar.configure_progress(True)
    with drain_bar.polled_drain_bar("bare", 4, read_done):
        pass
    assert reads  # at least the last read, after the drain
    assert capsys.readouterr().err.splitlines()[-1].startswith("bare: 4/4 done")
