"""What every ``fastq`` command shares: the one-line error and its exit codes, the
parser, the argument types, the connection options, and loading the app."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import traceback
from typing import Any, NoReturn, Optional

from fastq.app import DEFAULT_REDIS_URL, App
from fastq.connection.url import with_tls_files
from fastq.protocol.keys import validate_queue_name

# the commands' logger keeps the name it had when the CLI was one module
log = logging.getLogger("fastq.cli")

EXIT_USAGE = 2
EXIT_APP_LOAD = 3

OPTIONAL_APP = "module (or module:attr) of the app (optional: Redis alone is enough)"


class CliError(Exception):
    """A one-line error for the user; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


class Formatter(argparse.RawDescriptionHelpFormatter):
    """--help keeps the examples' line breaks and shows each option's default (one
    that means something: not None, not a flag's False, not one the help names)."""

    def _get_help_string(self, action: argparse.Action) -> Optional[str]:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or default in (None, False, argparse.SUPPRESS)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # one line, not argparse's usage block
        raise CliError(f"{message} (see `{self.prog} --help`)")


# -- argument types -------------------------------------------------------------------


def parse_queues(text: str) -> list[str]:
    queues = [q.strip() for q in text.split(",") if q.strip()]
    if not queues:
        raise CliError("no queue given: use -q NAME[,NAME...]")
    for q in queues:
        try:
            validate_queue_name(q)
        except ValueError as exc:
            raise CliError(str(exc)) from None
    return queues


def one_queue(args: argparse.Namespace) -> str:
    """``-q``'s queue, for a command that acts on exactly one."""
    queues = parse_queues(args.queue)
    if len(queues) != 1:
        raise CliError(f"name one queue with -q, not {len(queues)}")
    return queues[0]


def one_or_all_queues(args: argparse.Namespace) -> Optional[str]:
    """``-q``'s one queue, or None (every known queue) without ``-q``."""
    return one_queue(args) if args.queue is not None else None


_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """``30s``, ``5m``, ``2h``, ``1d``, ``250ms`` or plain seconds: seconds."""
    raw = text.strip().lower()
    unit = next((u for u in ("ms", "s", "m", "h", "d") if raw.endswith(u)), "")
    try:
        value = float(raw[: len(raw) - len(unit)]) * _DURATION_UNITS.get(unit, 1.0)
    except ValueError:
        raise CliError(f"invalid duration {text!r}: use e.g. 30s, 5m, 2h or 1d") from None
    if not 0 <= value < float("inf"):
        raise CliError(f"a duration must be finite and >= 0, not {text!r}")
    return value


def call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(...)``; a bad or unknown queue, id or limit is a one-line usage error."""
    try:
        return fn(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc)) from None


# -- Redis and the app ----------------------------------------------------------------


def add_connection_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--redis-url",
        help="Redis to use: redis://[[user]:password@]host:port/db, rediss:// (TLS), "
        "unix:///path.sock or redis+sentinel://host:port[,host:port...]/service_name/db "
        "(default: the --app's, else $FASTQ_REDIS_URL, else redis://127.0.0.1:6379/0); a "
        "password is safer in $FASTQ_REDIS_URL: a command line shows in `ps`",
    )
    p.add_argument("--namespace", help="key prefix (default: the app's, else fastq)")
    p.add_argument("--tls-ca-cert", help="rediss://: the CA certificate file that signed Redis'")
    p.add_argument("--tls-cert", help="rediss://: the client certificate file")
    p.add_argument("--tls-key", help="rediss://: the client certificate's key file")


def load_app(spec: str) -> App:
    """Import ``module`` or ``module:attribute`` and return its fastq App."""
    module_name, _, attr = spec.partition(":")
    if module_name.endswith(".py"):
        # a file name, as `python myapp.py` takes it: --app wants the module's name
        suggestion = module_name[:-3].replace(os.sep, ".").lstrip(".")
        raise CliError(
            f"--app takes a module, not a file: --app {suggestion}{':' + attr if attr else ''}",
            EXIT_APP_LOAD,
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CliError(
                f"cannot import app module {module_name!r}: {exc}", EXIT_APP_LOAD
            ) from None
        raise CliError(f"importing {module_name!r} failed: {exc}", EXIT_APP_LOAD) from None
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise CliError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc} "
            f"(at {frame.filename}, line {frame.lineno})",
            EXIT_APP_LOAD,
        ) from None
    if attr:
        if not hasattr(module, attr):
            names = sorted(k for k, v in vars(module).items() if isinstance(v, App))
            raise CliError(
                f"module {module_name!r} has no attribute {attr!r} (its fastq.App: "
                f"{', '.join(names) or 'none'})",
                EXIT_APP_LOAD,
            )
        app = getattr(module, attr)
        if not isinstance(app, App):
            raise CliError(
                f"{module_name}:{attr} is a {type(app).__name__}, not a fastq.App", EXIT_APP_LOAD
            )
        return app
    apps = {id(v): v for v in vars(module).values() if isinstance(v, App)}
    if len(apps) != 1:
        found = "no fastq.App" if not apps else "several fastq.App objects"
        raise CliError(
            f"module {module_name!r} has {found}: name one as {module_name}:ATTR", EXIT_APP_LOAD
        )
    return next(iter(apps.values()))


def configured_app(args: argparse.Namespace, *, fresh: bool = False) -> App:
    """The --app's App, on its own Redis unless --redis-url says another, and
    --namespace.

    ``fresh``: forget the app's modules first and import them again (a pool's
    SIGHUP picks up new code this way).
    """
    if fresh:
        top = args.app.partition(":")[0].split(".")[0]
        for name in [m for m in sys.modules if m == top or m.startswith(top + ".")]:
            if not name.startswith("fastq"):
                del sys.modules[name]
    app = load_app(args.app)
    # the Redis the app names (App() reads $FASTQ_REDIS_URL itself when it names
    # none): an environment left from another project must not move it elsewhere;
    # an explicit --redis-url does
    url = args.redis_url
    try:
        tls = {k: getattr(args, f"tls_{k}", None) for k in ("ca_cert", "cert", "key")}
        if any(tls.values()):
            url = with_tls_files(url or app.redis_url, **tls)
        app.configure(redis_url=url, namespace=args.namespace)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if getattr(args, "max_stalls", None) is not None:
        app.max_stalls = args.max_stalls
    return app


def app_hint(args: argparse.Namespace) -> str:
    """What to add to an "unknown queue" error of a command given no --app: it read
    $FASTQ_REDIS_URL or the default, not the Redis the user's app names."""
    if getattr(args, "app", None) or args.redis_url:
        return ""
    source = "$FASTQ_REDIS_URL" if os.environ.get("FASTQ_REDIS_URL") else "the default Redis"
    return f"; without --app this command reads {source}: add --app MODULE to read the app's"


def known_queue(args: argparse.Namespace, app: App, queue: str) -> None:
    """A one-line usage error, naming the Redis read, unless ``app`` knows ``queue``."""
    try:
        app.admin.known_queue(queue)
    except (TypeError, ValueError) as exc:
        raise CliError(f"{exc}{app_hint(args)}") from None


def operator_app(args: argparse.Namespace) -> App:
    """The --app's App, or without one a bare App on --redis-url and --namespace: the
    operator commands act on Redis alone, the app only adds its registered jobs."""
    if getattr(args, "app", None):
        return configured_app(args)
    url = args.redis_url or os.environ.get("FASTQ_REDIS_URL")
    try:
        tls = {k: getattr(args, f"tls_{k}", None) for k in ("ca_cert", "cert", "key")}
        if any(tls.values()):
            url = with_tls_files(url or DEFAULT_REDIS_URL, **tls)
        return App(url, namespace=args.namespace or "fastq")
    except ValueError as exc:
        raise CliError(str(exc)) from None
