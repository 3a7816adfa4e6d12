"""Redis as it is run in production: a password, an ACL user, TLS with client
certificates; the password never shown; the start-up checks of the Redis given."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator, Optional

import psutil
import pytest
import redis

import fastq
from fastq.connection.client import new_client
from fastq.testing.redis_server import RedisSentinel, RedisServer, free_port
from tests.support.processes import fastq_cmd, run_cli, subprocess_env

PASSWORD = "Pw-7f3a9c-s3cret"  # grepped for in every output
SENTINEL_PASSWORD = "Spw-41d2e8-s3cret"  # the sentinels' own, grepped for too
JOBS = 50


def _enqueue_counting(url: str, namespace: str, n: int = JOBS) -> None:
    app = fastq.App(url, namespace=namespace)
    app.enqueue_many("count", [(i,) for i in range(n)], queue="count")
    app.close()


def _runs(url: str, namespace: str) -> int:
    client = new_client(url)  # a sentinel URL too
    try:
        return len(client.hgetall(f"{namespace}:runs"))
    finally:
        client.close()


def _run_pool_until(url: str, namespace: str, n: int, log: Path, level: str = "INFO") -> str:
    """A ``fastq pool`` on tests.apps.counting until ``n`` jobs ran, then SIGTERM;
    returns everything it wrote (stdout and stderr), and the titles and command
    lines of its processes."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            fastq_cmd(
                "--log-level",
                level,
                "pool",
                "--app",
                "tests.apps.counting",
                "--namespace",
                namespace,
                "-q",
                "count",
                "-c",
                "1",
            ),
            env=subprocess_env(url),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while _runs(url, namespace) < n:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            master = psutil.Process(proc.pid)
            titles = [f"{p.name()} {' '.join(p.cmdline())}" for p in [master, *master.children()]]
            assert any("fastq-worker" in t for t in titles), titles
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    return log.read_text() + "\n".join(titles)


@pytest.fixture(scope="module")
def locked_server() -> Iterator[RedisServer]:
    """A server with a default password, and an ACL user ``worker`` that may not
    use CONFIG (as managed Redis often has it)."""
    server = RedisServer(extra_args=["--requirepass", PASSWORD]).start()
    admin = redis.Redis(port=server.port, password=PASSWORD)
    admin.execute_command(
        "ACL", "SETUSER", "worker", "on", f">{PASSWORD}", "~*", "&*", "+@all", "-config"
    )
    admin.close()
    yield server
    server.cleanup()


def test_a_pool_with_a_password_runs_jobs_and_never_shows_the_password(
    locked_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{locked_server.port}/0"
    _enqueue_counting(url, namespace)
    output = _run_pool_until(url, namespace, JOBS, tmp_path / "pool.log", "DEBUG")
    assert "persists nothing" in output  # the check ran (this server saves nothing)
    outputs = {"pool": output}
    for args in (
        ["--help"],
        ["pool", "--help"],
        ["worker", "--help"],
        ["stats", "--app", "tests.apps.counting", "--namespace", namespace],
    ):
        proc = run_cli(url, *args)
        assert proc.returncode == 0, proc.stderr
        outputs[" ".join(args)] = proc.stdout + proc.stderr
    # an error naming the URL: a queue that is down, as producers see it
    down = fastq.App(f"redis://:{PASSWORD}@127.0.0.1:{free_port()}/0", namespace=namespace)
    with pytest.raises(fastq.RedisUnavailable) as info:
        down.enqueue("count", (1,), queue="count")
    outputs["RedisUnavailable"] = str(info.value)
    assert ":***@127.0.0.1" in str(info.value)
    for where, text in outputs.items():
        assert PASSWORD not in text, where


def test_an_acl_user_works_and_a_refused_config_is_said_in_one_line(
    locked_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    url = f"redis://worker:{PASSWORD}@127.0.0.1:{locked_server.port}/0"
    _enqueue_counting(url, namespace)
    output = _run_pool_until(url, namespace, JOBS, tmp_path / "pool.log")
    assert _runs(url, namespace) == JOBS
    lines = [line for line in output.splitlines() if "could not check" in line]
    assert len(lines) == 1 and " INFO " in lines[0], output
    assert PASSWORD not in output


@pytest.mark.parametrize("command", ["pool", "worker"])
@pytest.mark.parametrize("user", ["", "worker", "nobody"])
def test_a_wrong_password_is_one_error_and_a_nonzero_exit(
    locked_server: RedisServer, namespace: str, command: str, user: str
) -> None:
    url = f"redis://{user}:wrong-{PASSWORD}@127.0.0.1:{locked_server.port}/0"
    proc = subprocess.run(
        fastq_cmd(command, "--app", "tests.apps.counting", "--namespace", namespace, "-q", "count"),
        env=subprocess_env(url),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, proc.stderr  # no retry storm, no traceback
    assert errors[0].startswith("fastq: error: Redis at redis://")
    assert "refused the connection" in errors[0] and "check the user and password" in errors[0]
    assert PASSWORD not in proc.stderr


def test_the_startup_check_warns_about_eviction_and_persistence(
    namespace: str, tmp_path: Path
) -> None:
    with RedisServer(extra_args=["--maxmemory-policy", "allkeys-lru"]) as server:
        _enqueue_counting(server.url, namespace, 5)
        output = _run_pool_until(server.url, namespace, 5, tmp_path / "pool.log")
    warnings = [line for line in output.splitlines() if " WARNING " in line]
    assert any("maxmemory-policy allkeys-lru" in w and "noeviction" in w for w in warnings)
    assert any("persists nothing" in w for w in warnings), output
    with RedisServer(appendonly=True) as server:  # noeviction is the default
        _enqueue_counting(server.url, namespace, 5)
        output = _run_pool_until(server.url, namespace, 5, tmp_path / "pool2.log")
    assert "maxmemory-policy" not in output and "persists nothing" not in output, output


def test_a_sentinel_url_with_passwords_runs_jobs_and_never_shows_them(
    locked_server: RedisServer, namespace: str, tmp_path: Path
) -> None:
    """The master's password in the user part, the sentinels' own as a query option:
    neither in a log line, a process title, a CLI output or an error."""
    with RedisSentinel(
        locked_server.port, quorum=1, password=SENTINEL_PASSWORD, master_password=PASSWORD
    ) as sentinel:
        url = (
            f"redis+sentinel://:{PASSWORD}@127.0.0.1:{sentinel.port}/mymaster/0"
            f"?sentinel_password={SENTINEL_PASSWORD}"
        )
        _enqueue_counting(url, namespace)
        output = _run_pool_until(url, namespace, JOBS, tmp_path / "pool.log", "DEBUG")
        assert "persists nothing" in output  # the start-up check reached the master
        assert f"redis+sentinel://:***@127.0.0.1:{sentinel.port}/mymaster/0" in output
        outputs = {"pool": output}
        proc = run_cli(url, "stats", "--app", "tests.apps.counting", "--namespace", namespace)
        assert proc.returncode == 0 and "count" in proc.stdout, proc.stderr
        outputs["stats"] = proc.stdout + proc.stderr
        # the same URL given on the command line
        proc = subprocess.run(
            fastq_cmd(
                "worker",
                "--app",
                "tests.apps.counting",
                "--namespace",
                namespace,
                "-q",
                "count",
                "--burst",
                "--redis-url",
                url,
            ),
            env=subprocess_env("redis://127.0.0.1:1/0"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        outputs["worker --redis-url"] = proc.stdout + proc.stderr
        # the sentinels refuse a wrong password of theirs: an outage, as producers see it
        wrong = url.replace(f"={SENTINEL_PASSWORD}", f"=wrong-{SENTINEL_PASSWORD}")
        down = fastq.App(wrong, namespace=namespace)
        with pytest.raises(fastq.RedisUnavailable) as info:
            down.enqueue("count", (1,), queue="count")
        outputs["RedisUnavailable"] = str(info.value)
        assert "sentinel_password=***" in str(info.value)
        # a worker started on it stops at once, in one line: no retrying forever
        proc = subprocess.run(
            fastq_cmd(
                "worker",
                "--app",
                "tests.apps.counting",
                "--namespace",
                namespace,
                "-q",
                "count",
                "--burst",
            ),
            env=subprocess_env(wrong),
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert "the sentinels of redis+sentinel://:***@127.0.0.1:" in lines[0]
        assert "sentinel_password" in lines[0]
        outputs["worker, wrong sentinel password"] = proc.stdout + proc.stderr
    for where, text in outputs.items():
        assert PASSWORD not in text, where
        assert SENTINEL_PASSWORD not in text, where


# -- TLS ---------------------------------------------------------------------------------


def _has_tls() -> Optional[str]:
    """Why TLS cannot be tested here, or None."""
    if shutil.which("openssl") is None:
        return "openssl is not installed"
    if shutil.which("redis-server") is None:
        return "redis-server is not installed"
    probe = subprocess.run(
        ["redis-server", "--port", "0", "--tls-port", "1", "--test-memory", "1"],
        capture_output=True,
        text=True,
    )
    if "tls-port" in probe.stdout + probe.stderr and "Bad directive" in probe.stdout + probe.stderr:
        return "this redis-server is built without TLS"
    return None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _make_certificates(d: Path) -> None:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, signed by it.
    With the extensions Python 3.13's strict verification (VERIFY_X509_STRICT, on by
    default) requires: the CA's key usage, the certificates' authority key id."""
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=fastq test CA",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        cwd=d,
    )
    (d / "san.ext").write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    for name in ("server", "client"):
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={name}",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.csr",
            cwd=d,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "san.ext",
            "-out",
            f"{name}.crt",
            cwd=d,
        )


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    why = _has_tls()
    if why is not None:
        pytest.skip(f"no TLS test: {why}")
    d = tmp_path_factory.mktemp("tls")
    _make_certificates(d)
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            "0",
            "--tls-port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--tls-cert-file",
            str(d / "server.crt"),
            "--tls-key-file",
            str(d / "server.key"),
            "--tls-ca-cert-file",
            str(d / "ca.crt"),
            "--tls-auth-clients",
            "yes",
            "--requirepass",
            PASSWORD,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(d),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(
        port=port,
        password=PASSWORD,
        ssl=True,
        ssl_ca_certs=str(d / "ca.crt"),
        ssl_certfile=str(d / "client.crt"),
        ssl_keyfile=str(d / "client.key"),
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError as exc:  # a refused certificate too: say which
            assert proc.poll() is None and time.monotonic() < deadline, f"TLS redis-server: {exc}"
            time.sleep(0.05)
    client.close()
    yield port, d
    proc.terminate()
    proc.wait(timeout=10)


def test_a_pool_over_tls_with_client_certificates(
    tls_server: tuple[int, Path], namespace: str, tmp_path: Path
) -> None:
    port, d = tls_server
    url = (
        f"rediss://:{PASSWORD}@127.0.0.1:{port}/0?ssl_cert_reqs=required"
        f"&ssl_ca_certs={d / 'ca.crt'}&ssl_certfile={d / 'client.crt'}"
        f"&ssl_keyfile={d / 'client.key'}"
    )
    _enqueue_counting(url, namespace)
    output = _run_pool_until(url, namespace, JOBS, tmp_path / "pool.log")
    assert _runs(url, namespace) == JOBS
    assert PASSWORD not in output


def test_a_pool_through_a_sentinel_over_tls(
    tls_server: tuple[int, Path], namespace: str, tmp_path: Path
) -> None:
    """``rediss+sentinel://``: the sentinel and the master both over TLS, with the
    URL's certificates for both."""
    port, d = tls_server
    sentinel_port = free_port()
    config = tmp_path / "sentinel.conf"
    config.write_text(
        f"port 0\ntls-port {sentinel_port}\nbind 127.0.0.1\ndir {tmp_path}\n"
        f"tls-cert-file {d / 'server.crt'}\ntls-key-file {d / 'server.key'}\n"
        f"tls-ca-cert-file {d / 'ca.crt'}\ntls-replication yes\n"
        f"sentinel monitor mymaster 127.0.0.1 {port} 1\n"
        f"sentinel auth-pass mymaster {PASSWORD}\n"
    )
    proc = subprocess.Popen(
        ["redis-server", str(config), "--sentinel"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = (
            f"rediss+sentinel://:{PASSWORD}@127.0.0.1:{sentinel_port}/mymaster/0"
            f"?ssl_cert_reqs=required&ssl_ca_certs={d / 'ca.crt'}"
            f"&ssl_certfile={d / 'client.crt'}&ssl_keyfile={d / 'client.key'}"
        )
        client = new_client(url, retries=0)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert proc.poll() is None and time.monotonic() < deadline, "TLS sentinel"
                time.sleep(0.05)
        assert client.connection_pool.master_address == ("127.0.0.1", port)  # type: ignore[attr-defined]
        client.close()
        _enqueue_counting(url, namespace)
        output = _run_pool_until(url, namespace, JOBS, tmp_path / "pool.log")
        assert _runs(url, namespace) == JOBS
        assert PASSWORD not in output
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_tls_files_as_cli_options(tls_server: tuple[int, Path], namespace: str) -> None:
    port, d = tls_server
    url = f"rediss://:{PASSWORD}@127.0.0.1:{port}/0"
    _enqueue_counting(
        f"{url}?ssl_ca_certs={d / 'ca.crt'}&ssl_certfile={d / 'client.crt'}"
        f"&ssl_keyfile={d / 'client.key'}",
        namespace,
        5,
    )
    tls = [
        "--tls-ca-cert",
        str(d / "ca.crt"),
        "--tls-cert",
        str(d / "client.crt"),
        "--tls-key",
        str(d / "client.key"),
    ]
    proc = run_cli(
        url,
        "worker",
        "--app",
        "tests.apps.counting",
        "--namespace",
        namespace,
        "-q",
        "count",
        "--burst",
        *tls,
    )
    assert proc.returncode == 0, proc.stderr
    assert "stopped after 5 jobs" in proc.stderr
    plain = f"redis://127.0.0.1:{port}/0"
    proc = run_cli(plain, "stats", "--app", "tests.apps.counting", *tls)
    assert proc.returncode == 2
    assert proc.stderr == (f"fastq: error: --tls-* options need a rediss:// URL, not '{plain}'\n")


def test_tls_without_the_ca_is_refused_in_one_line(
    tls_server: tuple[int, Path], namespace: str
) -> None:
    port, _ = tls_server
    app = fastq.App(f"rediss://:{PASSWORD}@127.0.0.1:{port}/0", namespace=namespace)
    with pytest.raises(fastq.RedisUnavailable) as info:
        app.enqueue("count", (1,), queue="count")
    assert "certificate verify failed" in str(info.value)
    assert PASSWORD not in str(info.value)


def test_a_unix_socket_url_with_the_password_as_a_query_parameter(
    namespace: str, tmp_path: Path
) -> None:
    sock = tmp_path / "redis.sock"
    extra = ["--requirepass", PASSWORD, "--unixsocket", str(sock), "--unixsocketperm", "700"]
    with RedisServer(extra_args=extra):  # its TCP port stays unused here
        url = f"unix://{sock}?db=0&password={PASSWORD}"
        _enqueue_counting(url, namespace, 5)
        proc = run_cli(
            url,
            "worker",
            "--app",
            "tests.apps.counting",
            "--namespace",
            namespace,
            "-q",
            "count",
            "--burst",
        )
        assert proc.returncode == 0, proc.stderr
        assert "stopped after 5 jobs" in proc.stderr
        assert f"unix://{sock}?db=0&password=***" in proc.stderr  # the persistence warning
        assert PASSWORD not in proc.stdout + proc.stderr
