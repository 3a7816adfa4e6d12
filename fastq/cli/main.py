"""The ``fastq`` command. The only place that reads argv and the environment.

The commands live by what they act on: :mod:`fastq.cli.run` (worker, pool, reaper,
demo), :mod:`fastq.cli.ops` (queues), :mod:`fastq.cli.jobs` (jobs),
:mod:`fastq.cli.batches` (batches); what they share is :mod:`fastq.cli.common`;
who serves them, :mod:`fastq.cli.workers`. This module assembles their parsers and
runs one.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Optional, Sequence

from fastq._version import __version__
from fastq.cli import batches, jobs, ops, run, serve, workers
from fastq.cli.common import CliError, Parser
from fastq.errors import FastqError
from fastq.logs import FORMATS, configure_logging

# the commands in the order `fastq --help` lists them
ORDER = (
    "stats",
    "queues",
    "dead",
    "broken",
    "enqueue",
    "wait",
    "workers",
    "worker",
    "pool",
    "reaper",
    "pause",
    "resume",
    "purge",
    "inspect",
    "limit",
    "groups",
    "cancel",
    "jobs",
    "batch",
    "periodic",
    "demo",
    "lua",
    "serve",
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="fastq", description="fastq: a fast Redis-backed job queue", epilog=_MAIN_EPILOG
    )
    parser.add_argument("--version", action="version", version=f"fastq {__version__}")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    parser.add_argument(
        "--log-format", default="text", choices=FORMATS, help="text, or json: one object a line"
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    commands: dict[str, Callable[[Any], None]] = {
        **run.COMMANDS,
        **ops.COMMANDS,
        **jobs.COMMANDS,
        **batches.COMMANDS,
        **workers.COMMANDS,
        **serve.COMMANDS,
    }
    assert sorted(commands) == sorted(ORDER), "a new command goes in ORDER"
    for name in ORDER:
        commands[name](sub)
    for command in sub.choices.values():
        # after the subcommand too; SUPPRESS: an absent one keeps the top-level value
        command.add_argument(
            "--log-level", default=argparse.SUPPRESS, help="DEBUG, INFO, WARNING or ERROR"
        )
    return parser


_MAIN_EPILOG = """\
examples:
  fastq pool --app myapp -c 8               run 8 worker children and a reaper
  fastq worker --app myapp -q mailer        one worker process on one queue
  fastq stats --watch                       counts and rates of every queue
  fastq wait -q mailer                      a progress bar until mailer is drained
  fastq dead list -q mailer                 jobs that failed for good
  fastq dead retry -q mailer                put them back, attempts reset
  fastq workers -v                          who holds which job now
  fastq enqueue send_email --app myapp --args '["a@example.com", "hi"]'
  fastq demo                                a 30,000-email blast on a throwaway Redis

Every command takes --redis-url (default: the --app's Redis, else $FASTQ_REDIS_URL)
and --namespace; `fastq COMMAND --help` shows its options and examples.
"""


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        for warning in dict.fromkeys(getattr(args, "deprecated", ())):
            print(f"fastq: warning: {warning}", file=sys.stderr)
        try:
            configure_logging(args.log_level, args.log_format)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        return int(args.func(args))
    except CliError as exc:
        print(f"fastq: error: {exc}", file=sys.stderr)
        return exc.code
    except FastqError as exc:
        print(f"fastq: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`fastq jobs ... | head -1`): stop quietly, as a command
        # that SIGPIPE ends would, and let the exit's flush write to nowhere
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
