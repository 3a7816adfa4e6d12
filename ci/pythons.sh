#!/usr/bin/env bash
# fastq at both ends of what pyproject.toml allows, each in a copy of the source tree
# of its own (.pythons/<end>: the files git tracks or would, copied afresh each run)
# with a virtualenv in it, set up by that copy's ci/setup.sh and stamped like .venv:
#
#   oldest  the oldest Python (pyenv's 3.9, which requires-python promises) with the
#           lowest release of each runtime dependency (ci/constraints-oldest.txt:
#           redis-py 5.0, orjson 3.8, Starlette 0.37...)
#   newest  the newest Python this machine has (3.13) with the newest releases of the
#           runtime dependencies on the day it runs, resolved then with uv from the
#           main lock (the test runner stays locked): a release that breaks fastq
#           turns CI red on its day, before a user meets it
#
# Each runs the integration tests (whatever talks to redis-py, Starlette, uvicorn,
# Jinja2, rich, cronsim, watchfiles, prometheus_client, psutil) and what can differ
# by Python: every module imported, the compiled kernels against the pure-Python
# reference. In copies: their builds write fastq_ext/*.c, and so they can run beside
# the main tree's set-up (ci/test.sh starts this script before it) without a build
# reading what another writes.
#
# Run by ci/test.sh. Alone: bash ci/pythons.sh [oldest|newest ...] (default: both),
# extra pytest arguments in $FASTQ_PYTHONS_PYTEST (default: the tests below).
# A Python that is missing fails the run, with a line saying so: never a silent skip.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -gt 0 ]; then ends=("$@"); else ends=(oldest newest); fi
# what can differ by Python
BY_PYTHON=(
  tests/unit/test_every_module_imports.py
  tests/unit/test_native_vs_reference.py
  tests/unit/test_runner_native_vs_reference.py
)
# what can differ by release too
TESTS=(
  "${BY_PYTHON[@]}"
  tests/integration
  # the wheel's contents (read from git, which a copy is not) and the OpenAPI
  # document (schemathesis, a tool of the main run's): neither depends on the releases
  --deselect tests/integration/test_packaging.py
  --ignore tests/integration/test_serve_openapi.py
)
# On a day when the newest releases are the lock's, the main run has tested them: the
# newest run then tests what differs by Python (and a short drain: the fastq command
# end to end, jobs in a worker, async jobs, the one-line errors), not the integration
# tests again (on a 2-core machine, CI's time is its CPU time)
SAME_AS_LOCK=(
  "${BY_PYTHON[@]}"
  tests/integration/test_cli.py
  tests/integration/test_jobs.py
  tests/integration/test_async_jobs.py
  tests/integration/test_cli_ops.py::test_every_command_fails_in_one_line_on_a_wrong_password_or_no_redis
  tests/integration/test_cli_ops.py::test_bad_input_is_one_line_and_writes_nothing
)

source ci/pyenv.sh  # python_of
pythons=()
for end in "${ends[@]}"; do
  case "$end" in
    oldest) pythons+=("$(python_of 3.9)") ;;
    newest) pythons+=("$(python_of 3.13)") ;;
    *) echo "ci/pythons.sh: unknown end $end: oldest or newest" >&2; exit 1 ;;
  esac
done

# the files of the tree (tracked, or untracked and not ignored), copied into each
# end's own; what a build made there (its venv, the extension) is kept for a rerun
files="$(mktemp)"
logs="$(mktemp -d)"
trap 'rm -rf "$files" "$logs"' EXIT
if ! git ls-files -z --cached --others --exclude-standard >"$files" 2>/dev/null; then
  # not a git checkout: every file but the venvs, the copies and what builds make
  find . \( -name '.venv*' -o -name .pythons -o -name .git -o -name build \
    -o -name __pycache__ -o -name '*.so' -o -name '*.egg-info' \) -prune \
    -o -type f -print0 >"$files"
fi
for end in "${ends[@]}"; do
  tree=".pythons/$end"
  mkdir -p "$tree"
  find "$tree" -mindepth 1 -maxdepth 1 ! -name .venv ! -name fastq_ext ! -name build \
    -exec rm -rf {} +
  if [ -d "$tree/fastq_ext" ]; then
    find "$tree/fastq_ext" -type f ! -name '*.so' ! -name '*.c' -delete
  fi
  # (a file deleted but not yet committed is listed, and not there: skipped)
  xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh <"$files" \
    | tar --null -T - -cf - | tar -xf - -C "$tree"
done

# The newest releases of fastq's runtime dependencies, within pyproject.toml's ranges:
# the main lock, with those packages (ci/deps.py names them) resolved again, by the
# locked uv in a venv of its own. Everything else keeps the lock's versions.
newest_constraints() {
  local tree="$1" py="$2" tools=".pythons/uv"
  [ -x "$tools/bin/python" ] || "$py" -m venv "$tools"
  "$tools/bin/python" -m pip install -q --disable-pip-version-check -c ci/constraints.txt uv
  cp ci/constraints.txt "$tree/ci/constraints-newest.txt"
  # (the lock's own versions are only preferences: --upgrade-package sets them aside)
  (cd "$tree" && UV_CUSTOM_COMPILE_COMMAND="bash ci/pythons.sh newest" \
    "../uv/bin/uv" pip compile --quiet pyproject.toml ci/tools.in --all-extras --universal \
    --python-version 3.9 $("$py" ci/deps.py packages | sed 's/^/--upgrade-package /') \
    -o ci/constraints-newest.txt)
}

# one at a time, at the lowest priority: beside ci/test.sh's own set-up and first run,
# they take the CPU those leave. With the test runner and the runtime extras, not the
# linters nor the browser and API tests' tools; the extension built without
# optimisation (these runs test what it does, not its speed: gcc -O2 took 15 s of CPU
# a Python)
for i in "${!ends[@]}"; do
  end="${ends[$i]}"
  tree=".pythons/$end"
  constraints="ci/constraints-oldest.txt"
  if [ "$end" = newest ]; then
    newest_constraints "$tree" "${pythons[$i]}"
    constraints="ci/constraints-newest.txt"
  fi
  FASTQ_EXTRAS="test-core,$("${pythons[$i]}" ci/deps.py extras)" CFLAGS="${CFLAGS:-} -O0" \
    FASTQ_CONSTRAINTS="$constraints" FASTQ_VENV=.venv FASTQ_PYTHON="${pythons[$i]}" \
    nice -n 19 bash "$tree/ci/setup.sh"
done

# the runtime dependencies' lines of a lock (name==version ; marker)
runtime_pins() {
  grep -iE "^($("${pythons[0]}" ci/deps.py packages | tr '\n_' '|-' | sed 's/|$//'))==" "$1"
}

# side by side, each printed whole when it ends: they mostly wait on Redis and children
pids=()
for end in "${ends[@]}"; do
  (
    cd ".pythons/$end"
    if [ "$end" = newest ] && [ -z "${FASTQ_PYTHONS_PYTEST:-}" ] \
      && [ "$(runtime_pins ci/constraints-newest.txt)" = "$(runtime_pins ci/constraints.txt)" ]; then
      echo "== the newest releases are the lock's, which the main run tests: here what differs by Python"
      TESTS=("${SAME_AS_LOCK[@]}")
    fi
    echo "== $(date +%T) the $end releases: $(.venv/bin/python -V 2>&1);" \
      "$(.venv/bin/python -m pip list --disable-pip-version-check 2>/dev/null \
         | awk 'NR > 2 && tolower($1) ~ /^(redis|hiredis|orjson|psutil|starlette|uvicorn|jinja2)$/ {printf "%s %s ", $1, $2}')"
    if [ -n "${FASTQ_PYTHONS_PYTEST:-}" ]; then read -ra TESTS <<<"$FASTQ_PYTHONS_PYTEST"; fi
    status=0
    .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 "${TESTS[@]}" || status=$?
    echo "== $(date +%T) the $end releases: done"
    exit "$status"
  ) >"$logs/$end" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!ends[@]}"; do
  wait "${pids[$i]}" || status=1
  cat "$logs/${ends[$i]}"
done
exit "$status"
