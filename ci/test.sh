#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up what is missing, lint, type-check, test.
# Extra arguments go to pytest (e.g. ci/test.sh -k priority).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
VENV="${FASTQ_VENV:-.venv}"
PY="$VENV/bin/python"

"$PY" -m ruff check fastq tests bench
"$PY" -m mypy fastq

status=0
"$PY" -m pytest -q -p no:cacheprovider --durations=25 "$@" || status=$?
if [ "$status" -eq 0 ] && [ $# -eq 0 ]; then
  # the pure-Python reference codec must pass the behaviour tests too
  FASTQ_NO_EXTENSIONS=1 "$PY" -m pytest -q -p no:cacheprovider \
    tests/integration/test_jobs.py tests/integration/test_bad_input.py || status=$?
fi
if [ "$status" -eq 5 ]; then
  echo "ci/test.sh: pytest collected no tests" >&2
  [ $# -gt 0 ] && exit 0  # a filter that matched nothing is the caller's business
  exit 1
fi
exit "$status"
