#!/usr/bin/env bash
# Writes the locks CI installs from, with uv (itself locked; ci/setup.sh puts it in .venv):
#
#   ci/constraints.txt         every package CI installs, at one exact version for each
#                              Python from 3.9 up (uv's universal resolution): the main
#                              run, and the tools of every run. pip reads it as
#                              constraints (-c), so it pins only what an install asks for.
#   ci/constraints-oldest.txt  Python 3.9 with the lowest release of each runtime
#                              dependency that pyproject.toml allows (uv's lowest-direct),
#                              the test runner at the versions of the lock above
#                              (ci/pythons.sh tests fastq on it)
#
#   bash ci/lock.sh            after a change of pyproject.toml's ranges: resolves again,
#                              keeping every version the locks already hold where it can
#   bash ci/lock.sh --upgrade  the bump: the newest release of everything, then a CI run
#
# The newest releases of the runtime dependencies are not locked: ci/pythons.sh
# resolves them on the day it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${FASTQ_VENV:-.venv}"
PY="$VENV/bin/python"
UV="$VENV/bin/uv"
[ -x "$UV" ] || {
  echo "ci/lock.sh: no $UV: run ci/setup.sh first (it installs the locked uv)" >&2
  exit 1
}
upgrade=()
if [ "${1:-}" = "--upgrade" ]; then upgrade=(--upgrade); fi
export UV_CUSTOM_COMPILE_COMMAND="bash ci/lock.sh"

"$UV" pip compile --quiet "${upgrade[@]}" pyproject.toml ci/tools.in --all-extras \
  --universal --python-version 3.9 -o ci/constraints.txt

# the test runner of the oldest run, pinned as the lock above pins it for 3.9, so that
# lowest-direct lowers fastq's own dependencies only
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$PY" ci/deps.py requires test-core >"$tmp/test-core.in"
"$UV" pip compile --quiet --no-header --no-annotate ci/tools.in "$tmp/test-core.in" \
  -c ci/constraints.txt --python-version 3.9 -o "$tmp/runner.txt"
"$UV" pip compile --quiet "${upgrade[@]}" pyproject.toml ci/tools.in \
  $("$PY" ci/deps.py extras | tr ',' '\n' | sed 's/^/--extra /') --extra test-core \
  -c "$tmp/runner.txt" --resolution lowest-direct --python-version 3.9 --no-annotate \
  -o ci/constraints-oldest.txt
