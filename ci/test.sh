#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up what is missing, lint, type-check, test.
# Extra arguments go to pytest (e.g. ci/test.sh -k priority).
set -euo pipefail
cd "$(dirname "$0")/.."
# Python's compiled modules are kept (this machine's environment sets
# PYTHONDONTWRITEBYTECODE=1): the suite starts hundreds of Pythons, and each compiled
# fastq afresh, 0.15 s of CPU
unset PYTHONDONTWRITEBYTECODE
# a third of each property test's examples (tests/support/examples.py): each run
# draws others, and at full count they were a tenth of the suite's CPU time
export FASTQ_TEST_EXAMPLES="${FASTQ_TEST_EXAMPLES:-0.3}"

echo "== $(date +%T) setting up"
# what the machine lacks first (a compiler, redis-server...): the other Pythons'
# builds, started next beside this one, need it too
bash ci/setup.sh --system

# Beside the main runs, in the background: fastq at both ends of its dependency range
# (ci/pythons.sh: Python 3.9 with the oldest releases, 3.13 with the newest of the
# day, each in a copy of the tree and a venv of its own), whose builds start now, at
# the lowest priority, on the CPU that this set-up leaves idle (pip's steps run one at
# a time); then, once the main venv is set up (the flag file), the integration tests
# on Valkey (ci/valkey.sh). Their output, with the time each part ended, is printed
# after the main runs'. In a session of their own, so that an early exit of this
# script ends them all, their servers too.
beside_pid=""
if [ $# -eq 0 ]; then
  beside_dir="$(mktemp -d)"
  setsid bash -c 'status=0
    bash ci/pythons.sh || status=1
    while [ ! -e "$1/main-venv" ]; do sleep 1; done
    bash ci/valkey.sh || status=1
    exit "$status"' beside "$beside_dir" >"$beside_dir/log" 2>&1 &
  beside_pid=$!
  trap '[ -z "$beside_pid" ] || kill -- -"$beside_pid" 2>/dev/null || true; rm -rf "$beside_dir"' EXIT
fi

bash ci/setup.sh
VENV="${FASTQ_VENV:-.venv}"
PY="$VENV/bin/python"
[ -z "$beside_pid" ] || touch "$beside_dir/main-venv"

echo "== $(date +%T) ruff, mypy, the docs site"
"$PY" -m ruff check fastq tests bench
bash ci/mypy.sh
# the docs site (mkdocs.yml, docs/): any warning, such as a link to a page or an anchor
# that does not exist, fails the build. Its log is shown only then: mkdocs' --quiet
# would hide the warnings from --strict too, and pass.
docs_site="$(mktemp -d)"
docs_log="$(NO_MKDOCS_2_WARNING=1 "$PY" -m mkdocs build --strict --site-dir "$docs_site" 2>&1)" \
  || { printf '%s\n' "$docs_log" >&2; rm -rf "$docs_site"
       echo "ci/test.sh: the docs site did not build" >&2; exit 1; }
rm -rf "$docs_site"

status=0
if [ $# -gt 0 ]; then
  "$PY" -m pytest -q -p no:cacheprovider "$@" || status=$?
else
  # The suite mostly waits on Redis, on child processes and on the timers of the
  # faults it injects, so tests run side by side: the unit, Lua, integration,
  # benchmark smoke and browser tests four at a time, then the fault tests six at a
  # time, which kill and pause processes on timers and fsync every write (the
  # longest pauses Redis' memory for over a minute): they mostly wait (six at a time:
  # 2.5 min, four: 3.6). In one run of five at a time, the two took 15 minutes, not
  # 10: their disks' and CPUs' waits added up.
  for dir in tests/*/; do  # a new folder of tests must join one of the two runs
    case "$dir" in
      tests/unit/ | tests/lua/ | tests/integration/ | tests/bench/ | tests/browser/ | tests/fault/) ;;
      tests/apps/ | tests/support/) ;;  # what the tests import, no tests of their own
      *) if ls "$dir"test_*.py >/dev/null 2>&1; then
           echo "ci/test.sh: $dir is in neither pytest run" >&2; exit 1
         fi ;;
    esac
  done
  echo "== $(date +%T) the unit, Lua, integration, benchmark smoke and browser tests"
  "$PY" -m pytest -q -p no:cacheprovider -n 4 --durations=10 \
    tests/unit tests/lua tests/integration tests/bench tests/browser || status=$?
  echo "== $(date +%T) the fault tests"
  fault_status=0
  "$PY" -m pytest -q -p no:cacheprovider -n 6 --durations=10 tests/fault || fault_status=$?
  [ "$status" -ne 0 ] || status=$fault_status
fi
if [ "$status" -eq 0 ] && [ $# -eq 0 ]; then
  echo "== $(date +%T) the reference codec"
  # the pure-Python reference codec must pass the behaviour tests too
  FASTQ_NO_EXTENSIONS=1 "$PY" -m pytest -q -p no:cacheprovider \
    tests/integration/test_jobs.py tests/integration/test_bad_input.py || status=$?
fi
if [ -n "$beside_pid" ]; then
  beside_status=0
  wait "$beside_pid" || beside_status=$?
  beside_pid=""
  echo "== $(date +%T) beside the main runs: the oldest and newest releases, then Valkey"
  cat "$beside_dir/log"
  [ "$status" -ne 0 ] || status=$beside_status
fi
if [ "$status" -eq 5 ]; then
  echo "ci/test.sh: pytest collected no tests" >&2
  [ $# -gt 0 ] && exit 0  # a filter that matched nothing is the caller's business
  exit 1
fi
exit "$status"
