"""The house holds its shape: imports in fastq/ run one way, down the layers of
docs/internals.md ("The code's layout"), with no cycle, and ``import fastq`` loads
nothing a worker, a pool or the CLI needs.

Every import counts: at module level, inside functions, and under ``TYPE_CHECKING``
(a cycle hidden in a function is still a cycle to whoever reads the code).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from redis.commands.core import CoreCommands

import fastq

# the rank of each top-level module or package of fastq/: a module imports only from
# its own rank or a lower one (docs/internals.md, "The code's layout")
RANKS = {
    # leaves
    "errors": 0,
    "validate": 0,
    "retry": 0,
    "periodic": 0,
    "logs": 0,
    "_accel": 0,
    "_pyimpl": 0,
    "_version": 0,
    "testing": 0,
    "connection": 1,
    "protocol": 2,
    # the job model and what master and children share
    "job": 3,
    "options": 3,
    "policy": 3,
    "hooks": 3,
    "context": 3,
    "ratelimit": 3,
    "circuit": 3,
    "keytemplate": 3,
    "shm": 3,
    "producer": 4,
    "admin": 4,
    "app": 5,
    "__init__": 5,
    "runners": 6,
    "testmode": 6,
    "monitor": 6,
    "worker": 7,
    "reaper": 7,
    "pool": 8,
    "cli": 9,
    "serve": 9,
    "__main__": 9,
}
# what `import fastq` (a producer) must not load
NOT_FOR_PRODUCERS = ("runners", "testmode", "monitor", "worker", "reaper", "pool", "cli", "serve")


def module_names(package_dir: Path) -> dict[str, Path]:
    """Dotted name -> file, for every module under ``package_dir``."""
    root = package_dir.name
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = [root, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                module = ".".join(parts[: len(parts) - node.level + 1] + [node.module or ""])
                module = module.rstrip(".")
            else:
                module = node.module or ""
            # `from pkg import mod` depends on pkg.mod; `from mod import name`, on mod
            targets = [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            # the deepest module known: `import a.b.c` depends on a.b.c, not on a
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    modules = module_names(package_dir)
    known = set(modules)
    graph = {name: imports_of(name, path, known) for name, path in modules.items()}
    # a package's __init__ is imported with each of its modules, but that is Python's
    # doing, not a dependency: only what a module names counts
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layer_of(module: str, ranks: dict[str, int]) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(graph: dict[str, set[str]], ranks: dict[str, int]) -> list[str]:
    """Each import of a module from a higher layer, as 'a (rank) -> b (rank)'."""
    wrong = []
    for module, targets in sorted(graph.items()):
        own = ranks[layer_of(module, ranks)]
        for target in sorted(targets):
            theirs = ranks[layer_of(target, ranks)]
            if theirs > own:
                wrong.append(f"{module} ({own}) -> {target} ({theirs})")
    return wrong


FASTQ_DIR = Path(fastq.__file__).parent


def test_every_module_of_fastq_has_a_layer() -> None:
    layers = {layer_of(m, RANKS) for m in module_names(FASTQ_DIR)}
    assert layers - set(RANKS) == set(), "add the new module or package to RANKS"


def test_fastq_has_no_import_cycle() -> None:
    assert cycles(import_graph(FASTQ_DIR)) == []


def test_no_module_of_fastq_imports_from_a_higher_layer() -> None:
    assert upward_imports(import_graph(FASTQ_DIR), RANKS) == []


def test_import_fastq_loads_no_worker_pool_or_cli_module() -> None:
    code = "import sys, fastq; print(' '.join(m for m in sys.modules if m.startswith('fastq')))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "fastq.app" in loaded  # the check reads what it thinks it reads
    assert [m for m in loaded if layer_of(m, RANKS) in NOT_FOR_PRODUCERS] == []


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "fastq"
    for rel, text in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text)
    return pkg


def test_the_check_finds_a_cycle_hidden_in_a_function_and_under_type_checking(
    tmp_path: Path,
) -> None:
    pkg = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "connection/__init__.py": "",
            "connection/url.py": "def f():\n    from fastq.connection import client\n",
            "connection/client.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from fastq.connection.url import f\n"
            ),
            "errors.py": "",
        },
    )
    assert cycles(import_graph(pkg)) == [["fastq.connection.client", "fastq.connection.url"]]


def test_the_check_finds_an_upward_import(tmp_path: Path) -> None:
    pkg = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "errors.py": "from . import app\n",
            "app.py": "from fastq.worker.worker import Worker\n",
            "worker/__init__.py": "",
            "worker/worker.py": "from fastq import errors\nclass Worker: ...\n",
        },
    )
    assert upward_imports(import_graph(pkg), RANKS) == [
        "fastq.app (5) -> fastq.worker.worker (7)",
        "fastq.errors (0) -> fastq.app (5)",
    ]


# A module is split by what it does, never by its length. Past this many lines it is
# a smell to explain: a module that is this long and still one thing says why here.
LONG_LINES = 800
LONG_AND_WHY: dict[str, str] = {}


def test_a_module_over_800_lines_says_why() -> None:
    long = {
        name: n
        for name, path in module_names(FASTQ_DIR).items()
        if (n := len(path.read_text().splitlines())) > LONG_LINES and name not in LONG_AND_WHY
    }
    assert long == {}


# protocol/ is what Redis holds and the calls that change or read it; a thread that
# polls or announces belongs to the process that runs it (monitor/, worker/, pool/)
THREAD_MODULES = ("threading", "_thread", "concurrent.futures")


def threads_in(package_dir: Path, layer: str) -> list[str]:
    """Each module of ``layer`` that imports a thread module or defines a class on a
    ``Thread``, as 'module: what'."""
    found = []
    for name, path in module_names(package_dir).items():
        if layer_of(name, RANKS) != layer:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                modules = [node.module or ""]
            elif isinstance(node, ast.ClassDef):
                bases = [ast.unparse(base) for base in node.bases]
                modules = []
                found += [f"{name}: class {node.name}({b})" for b in bases if "Thread" in b]
            else:
                continue
            found += [
                f"{name}: import {m}"
                for m in modules
                if any(m == t or m.startswith(t + ".") for t in THREAD_MODULES)
            ]
    return found


def test_protocol_runs_no_thread() -> None:
    assert threads_in(FASTQ_DIR, "protocol") == []


def test_the_check_finds_a_thread_in_protocol(tmp_path: Path) -> None:
    pkg = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "protocol/__init__.py": "",
            "protocol/a.py": "import threading\n",
            "protocol/b.py": "def f():\n    from concurrent.futures import ThreadPoolExecutor\n",
            "protocol/c.py": "from fastq.x import base\nclass Poller(base.Thread): ...\n",
            "protocol/d.py": "import redis\nclass Keys: ...\n",
            "worker/__init__.py": "import threading\n",
        },
    )
    assert threads_in(pkg, "protocol") == [
        "fastq.protocol.a: import threading",
        "fastq.protocol.b: import concurrent.futures",
        "fastq.protocol.c: class Poller(base.Thread)",
    ]


# Every key name is built in protocol/keys.py: a key spelled by hand elsewhere drifts
# from docs/internals.md ("Keys") and from the other places that spell it. What counts
# as building one: the namespace followed by ':' (an f-string, a '+', a ':'.join), or a
# hash tag, ':{' + a name + '}'.
KEYS_MODULE = "fastq.protocol.keys"
NAMESPACE_NAMES = ("namespace", "ns", "prefix")


def _names_the_namespace(node: ast.expr) -> bool:
    last = ast.unparse(node).replace("()", "").rpartition(".")[2]
    return last in NAMESPACE_NAMES or last.endswith(("_namespace", "_ns"))


def _text(node: object) -> str:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""


def key_names_built(package_dir: Path) -> list[str]:
    """Each place outside protocol/keys.py that builds a key name, as 'module:line'."""
    found = []
    for name, path in module_names(package_dir).items():
        if name == KEYS_MODULE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.JoinedStr):
                parts = [None, *node.values, None]
                builds = any(
                    isinstance(part, ast.FormattedValue)
                    and (
                        (_names_the_namespace(part.value) and _text(after).startswith(":"))
                        or (_text(before).endswith(":{") and _text(after).startswith("}"))
                    )
                    for before, part, after in zip(parts, parts[1:], parts[2:])
                )
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
                builds = _names_the_namespace(node.left) and _text(node.right).startswith(":")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "join"
                and _text(node.func.value) == ":"
            ):
                builds = any(
                    _names_the_namespace(n)
                    for arg in node.args
                    for n in ast.walk(arg)
                    if isinstance(n, (ast.Name, ast.Attribute))
                )
            else:
                continue
            if builds:
                found.append(f"{name}:{node.lineno}")
    return found


def test_key_names_are_built_only_in_protocol_keys() -> None:
    assert key_names_built(FASTQ_DIR) == []


@pytest.mark.parametrize(
    "line",
    [
        'key = f"{self.store.namespace}:queues"',
        'key = f"{app.namespace}:{{{queue}}}:ready"',
        'key = f"fastq:{{{queue}}}:ready"',
        'key = ns + ":workers"',
        'key = ":".join([namespace, "shards"])',
        'key = f"{self.app.namespace()}:queues"',
    ],
)
def test_the_check_finds_a_key_name_built_outside_keys(tmp_path: Path, line: str) -> None:
    pkg = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "protocol/__init__.py": "",
            # keys.py may; a message naming a queue may; a key taken from keys.py may
            "protocol/keys.py": 'def queues(namespace):\n    return f"{namespace}:queues"\n',
            "cli/ops.py": 'def f(queue, n):\n    print(f"{queue}: {n} jobs")\n',
            "admin/ok.py": "def f(store):\n    return store.namespace_keys.queues\n",
            "admin/bad.py": f"def f(self, app, ns, namespace, queue):\n    {line}\n",
        },
    )
    assert key_names_built(pkg) == ["fastq.admin.bad:2"]


# Redis is changed and read by protocol/'s functions (reached through connection/):
# a Redis command called anywhere else is one to move there. A command is known by
# redis-py's method name, less the names that are common Python methods as well.
NOT_ONLY_REDIS = {
    *("get", "set", "delete", "exists", "info", "wait", "type", "time", "keys", "copy"),
    *("append", "sort", "move", "echo", "object", "dump", "digest", "unlink", "select"),
    *("save", "reset", "sync", "quit", "hello", "role", "auth", "command", "cluster"),
    *("rename", "touch", "restore", "shutdown", "persist", "readonly", "watch"),
    *("unwatch", "register_script", "publish", "ping", "lcs", "substr"),
}
REDIS_COMMANDS = {n for n in dir(CoreCommands) if not n.startswith("_")} - NOT_ONLY_REDIS
REDIS_COMMANDS |= {"pipeline"}
# where commands are issued: protocol/ and the layers under it (the transport, the
# test servers)
REDIS_LAYERS = ("protocol", "connection", "testing")


def redis_commands_outside_protocol(package_dir: Path) -> list[str]:
    """Each call of a Redis command outside ``REDIS_LAYERS``, as 'module:line command'."""
    found = []
    for name, path in module_names(package_dir).items():
        layer = layer_of(name, RANKS)
        if layer in REDIS_LAYERS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in REDIS_COMMANDS
            ):
                found.append(f"{name}:{node.lineno} {node.func.attr}")
    return sorted(found)


def test_redis_commands_are_issued_in_protocol() -> None:
    assert redis_commands_outside_protocol(FASTQ_DIR) == []


def test_the_check_finds_a_redis_command_outside_protocol(tmp_path: Path) -> None:
    pkg = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "protocol/__init__.py": "",
            "protocol/reads.py": "def f(client, key):\n    return client.hget(key, 'x')\n",
            "admin/__init__.py": "",
            "admin/bad.py": (
                "def f(self, client, key, log, stopped):\n"
                "    log.info('x')\n"  # a logger's, an event's: not Redis
                "    stopped.wait(1)\n"
                "    pipe = self.store.redis.pipeline(transaction=False)\n"
                "    pipe.zadd(key, {'a': 1})\n"
                "    return client.smembers(key)\n"
            ),
        },
    )
    assert redis_commands_outside_protocol(pkg) == [
        "fastq.admin.bad:4 pipeline",
        "fastq.admin.bad:5 zadd",
        "fastq.admin.bad:6 smembers",
    ]
