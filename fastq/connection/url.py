"""Redis URLs as fastq shows them: the one place that hides a URL's password.

Every message, log line or title that names the Redis a process uses goes through
:func:`mask_url`, so that a password given in ``redis://user:secret@host``,
``?password=secret`` or a sentinel URL's ``?sentinel_password=secret`` never reaches
a log, a terminal or ``ps``.
"""

from __future__ import annotations

from typing import Optional
from urllib.parse import parse_qsl, urlencode, urlsplit

MASK = "***"
# query parameters redis-py turns into connection options that hold a secret
_SECRET_PARAMS = frozenset({"password", "ssl_password", "sentinel_password"})


def mask_url(url: str) -> str:
    """``url`` with its password (in the user part or the query) replaced by ``***``.

    A URL that cannot be parsed is shown as its scheme alone: it may hold anything.
    """
    try:
        parts = urlsplit(url)
        password = parts.password
        netloc = parts.netloc
    except ValueError:
        scheme = url.partition("://")[0] if "://" in url else ""
        return f"{scheme}://{MASK}" if scheme.replace("+", "").isalpha() else MASK
    if password is not None:
        userinfo, _, hostinfo = netloc.rpartition("@")
        user = userinfo.partition(":")[0]
        netloc = f"{user}:{MASK}@{hostinfo}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(name in _SECRET_PARAMS for name, _ in pairs):
            query = urlencode(
                [(name, MASK if name in _SECRET_PARAMS else value) for name, value in pairs],
                safe="/*",
            )
    if netloc == parts.netloc and query == parts.query:
        return url
    # by hand: urlunsplit drops the empty host of unix:///path
    return (
        f"{parts.scheme}://{netloc}{parts.path}"
        + (f"?{query}" if query else "")
        + (f"#{parts.fragment}" if parts.fragment else "")
    )


def with_tls_files(
    url: str, *, ca_cert: Optional[str], cert: Optional[str], key: Optional[str]
) -> str:
    """``url`` with the TLS files given (the CLI's ``--tls-*`` options) as the query
    parameters redis-py reads: ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``.

    Raises:
        ValueError: a file given with a URL that is not ``rediss://`` or
            ``rediss+sentinel://``.
    """
    given = [("ssl_ca_certs", ca_cert), ("ssl_certfile", cert), ("ssl_keyfile", key)]
    params = [(name, value) for name, value in given if value]
    if not params:
        return url
    if not url.startswith(("rediss://", "rediss+sentinel://")):
        raise ValueError(f"--tls-* options need a rediss:// URL, not {mask_url(url)!r}")
    sep = "&" if "?" in url else "?"
    return url + sep + urlencode(params, safe="/")
