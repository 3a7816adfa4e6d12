"""``fastq serve``: the HTTP API (:mod:`fastq.serve`) on uvicorn, with its token
and its bind checked before it listens."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
from typing import Any, Callable, Optional

from fastq.cli.common import CliError, add_connection_options, log, operator_app
from fastq.cli.run import parse_size

WEB_EXTRA = "fastq serve needs the web extra: pip install 'fastq[web]'"
DEFAULT_SESSION_MAX_AGE_S = 12 * 3600  # fastq.serve.pages.session's, without importing it
MIN_TOKEN_CHARS = 16
TOKEN_ENV = "FASTQ_TOKEN"


def read_token(args: argparse.Namespace) -> Optional[str]:
    """``--token-file``'s token, else ``$FASTQ_TOKEN``'s, else None.

    Raises:
        CliError: an unreadable file, or a token too short or not header-safe
            (printable ASCII without spaces). The message never shows it.
    """
    where = f"--token-file {args.token_file}"
    if args.token_file is not None:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"cannot read the token: {exc}") from None
    else:
        where = f"${TOKEN_ENV}"
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            return None
    if len(token) < MIN_TOKEN_CHARS:
        raise CliError(
            f"the token of {where} is {len(token)} characters: use at least "
            f"{MIN_TOKEN_CHARS}: `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    if not (token.isascii() and token.isprintable() and " " not in token):
        raise CliError(f"the token of {where} must be printable ASCII without spaces")
    return token


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds this machine's loopback only (a name other than
    ``localhost`` counts as reachable from elsewhere)."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def port_number(text: str) -> int:
    """The type of --port: 0 (a free one) to 65535."""
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise CliError(f"--port must be a whole number within 0..65535, not {text!r}")
    return int(text)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (port 0: a free one, said in the
    start-up line)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc}") from None
    sock.set_inheritable(True)
    return sock


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from fastq.serve.app import create_app
        from fastq.serve.connections import bounded_protocol
    except ImportError as exc:
        if exc.name not in ("uvicorn", "starlette") and not str(exc.name).startswith("starlette."):
            raise
        raise CliError(WEB_EXTRA, 1) from None
    token = read_token(args)
    if token is None and not is_loopback(args.host):
        raise CliError(
            f"refusing to serve on {args.host} without a token: anyone who reaches it could "
            f"enqueue and cancel jobs; give one with --token-file PATH or ${TOKEN_ENV} "
            "(or bind 127.0.0.1)"
        )
    if token is None:
        log.warning(
            "fastq serve: no token (--token-file or $%s): any program on this host can "
            "enqueue and cancel jobs through it; it answers only requests to localhost",
            TOKEN_ENV,
        )
    if (args.ssl_certfile is None) != (args.ssl_keyfile is None):
        raise CliError("give --ssl-certfile and --ssl-keyfile together")
    app = operator_app(args)
    if args.revoke_sessions:
        return revoke_sessions(app)
    root_path = (args.root_path or "").rstrip("/")
    if root_path and not root_path.startswith("/"):
        raise CliError(f"--root-path must start with /, not {args.root_path!r}")
    if token is None and (root_path or args.forwarded_allow_ips):
        raise CliError(
            "refusing --root-path and --forwarded-allow-ips without a token: behind a "
            "proxy, every request would come from the proxy's loopback and anyone who "
            "reaches the proxy could enqueue and cancel jobs; give one with "
            f"--token-file PATH or ${TOKEN_ENV}"
        )
    asgi = create_app(
        app,
        token,
        max_body_bytes=args.max_body,
        read_only=args.read_only,
        body_timeout_s=args.client_timeout,
        session_max_age_s=args.session_max_age,
    )
    config = uvicorn.Config(
        asgi,
        log_config=None,  # fastq's logging (--log-format json included), not uvicorn's
        log_level=logging.getLogger().getEffectiveLevel(),
        access_log=not args.no_access_log,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile,
        server_header=False,
        # a proxy's X-Forwarded-For and -Proto believed only from the addresses given:
        # the client's address (the login throttle) and https (Secure cookies)
        proxy_headers=bool(args.forwarded_allow_ips),
        forwarded_allow_ips=args.forwarded_allow_ips or None,
        root_path=root_path,
        http=bounded_protocol(args.client_timeout),
        limit_concurrency=args.limit_concurrency,
    )
    sock = bind(args.host, args.port)
    port = sock.getsockname()[1]
    scheme = "https" if args.ssl_certfile else "http"
    host = f"[{args.host.strip('[]')}]" if ":" in args.host else args.host
    log.info(
        "fastq serve: listening on %s://%s:%d (namespace %s, %s)",
        scheme,
        host,
        port,
        app.namespace,
        "token required" if token else "no token: localhost only",
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def revoke_sessions(app: Any) -> int:
    """``--revoke-sessions``: end every dashboard session of the namespace, on every
    server (a new session epoch, :mod:`fastq.protocol.dashboard`)."""
    from fastq.protocol import dashboard

    with app.store.producer_call():
        epoch = dashboard.revoke_all_sessions(app.store.redis, app.store.namespace_keys)
    print(f"every dashboard session of namespace {app.namespace!r} ended (epoch {epoch})")
    return 0


def positive_seconds(text: str) -> float:
    """The type of a timeout option: a number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise CliError(f"a timeout must be a number of seconds > 0, not {text!r}")
    return value


def positive_int(text: str) -> int:
    """The type of a count option: a whole number >= 1."""
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise CliError(f"expected a whole number >= 1, not {text!r}")
    return int(text)


def add_serve(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="the HTTP API: jobs over HTTP and JSON, for any language",
        epilog="examples:\n"
        "  FASTQ_TOKEN=$(cat /etc/fastq/token) fastq serve --app myapp\n"
        "  fastq serve --app myapp --host 0.0.0.0 --port 8000 --token-file /etc/fastq/token\n"
        "See docs/http.md for every route, TLS and running several servers.",
    )
    p.add_argument(
        "--app",
        help="module (or module:attr) of the app (optional: Redis alone "
        "is enough; an app's registered jobs have their arguments checked)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind")
    p.add_argument("--port", type=port_number, default=8000, help="port to bind (0: a free one)")
    p.add_argument(
        "--token-file",
        help=f"a file holding the bearer token every request must carry (default: "
        f"${TOKEN_ENV}); required unless --host is a loopback address",
    )
    p.add_argument(
        "--max-body",
        type=parse_size,
        default="8M",
        help="the largest request body taken, e.g. 8M (413 beyond)",
    )
    p.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (PEM)")
    p.add_argument("--ssl-keyfile", help="the certificate's private key (PEM)")
    p.add_argument("--no-access-log", action="store_true", help="no line per request")
    p.add_argument(
        "--read-only",
        action="store_true",
        help="the dashboard shows and takes no action (pause, retry, purge...)",
    )
    p.add_argument(
        "--root-path",
        default="",
        help="the path prefix a reverse proxy serves it under, e.g. /fastq (needs a token)",
    )
    p.add_argument(
        "--forwarded-allow-ips",
        default="",
        help="addresses of the reverse proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed, e.g. 127.0.0.1 (needs a token); behind a "
        "proxy that ends TLS, the session cookie is then Secure",
    )
    p.add_argument(
        "--client-timeout",
        type=positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="the time a client has to send a request's headers, and again its body "
        "(the connection is closed, or the request answered 408)",
    )
    p.add_argument(
        "--limit-concurrency",
        type=positive_int,
        default=1000,
        metavar="N",
        help="connections and requests served at once; beyond, requests are answered 503",
    )
    p.add_argument(
        "--session-max-age",
        type=positive_int,
        default=DEFAULT_SESSION_MAX_AGE_S,
        metavar="SECONDS",
        help="how long a dashboard login lasts (default: 12 hours)",
    )
    p.add_argument(
        "--revoke-sessions",
        action="store_true",
        help="end every dashboard session of the namespace, on every server, then exit",
    )
    add_connection_options(p)
    p.set_defaults(func=cmd_serve)


COMMANDS: dict[str, Callable[[Any], None]] = {"serve": add_serve}
