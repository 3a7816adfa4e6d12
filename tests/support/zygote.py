"""The process that ``run_cli`` (tests/support/processes.py) forks each ``fastq``
command from: it imports fastq's command line once, then, for each request read on
stdin (a JSON line: argv, env, cwd, the files for stdout and stderr), forks a child
that runs the command as ``python -m fastq`` would, and replies with the child's pid
at once and its wait status when it ends (JSON lines on stdout).

Why: a ``python -m fastq`` costs 0.7 s of CPU before it does anything (Python's
start and fastq's imports), and the suite runs hundreds of them on a 2-core machine.
A forked child is still a process of its own: its exit code, its output, its
signals and Redis connections are the command's, as a user's shell would see them.
Single-threaded, so that a fork is safe. It ends when its stdin closes."""

from __future__ import annotations

import os
import sys
import traceback

import orjson

import fastq.cli.main


def _child(request: dict) -> int:
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),  # a command reads no input, as under CI
        (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.path[:0] = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.argv = [fastq.cli.main.__file__, *request["argv"]]
    try:
        return fastq.cli.main.main(request["argv"])
    except SystemExit as exc:  # as the interpreter reads sys.exit's argument
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1


def serve() -> None:
    for line in sys.stdin.buffer:
        request = orjson.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(request)
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code if 0 <= code <= 255 else 1)
        sys.stdout.buffer.write(orjson.dumps({"pid": pid}) + b"\n")
        sys.stdout.buffer.flush()
        _, status = os.waitpid(pid, 0)
        sys.stdout.buffer.write(orjson.dumps({"status": status}) + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    serve()
