#!/usr/bin/env bash
# fastq under the oldest and the newest Python this machine has (pyenv's 3.9, which
# requires-python promises, and 3.13), each in a copy of the source tree of its own
# (.pythons/3.9, .pythons/3.13: the files git tracks or would, copied afresh each run)
# with a virtualenv in it, set up by that copy's ci/setup.sh and stamped like .venv,
# so the package and its Cython extension are built by and for that Python once, and
# a rerun is quick. In copies: their builds write fastq_ext/*.c, and so they can run
# beside the main tree's set-up (ci/test.sh starts this script before it) without a
# build reading what another writes. Then what can differ by Python: every module
# imported (syntax, annotations), the compiled kernels against the pure-Python
# reference, and a short real drain: the fastq command end to end (a burst worker of
# 10,000 jobs, `fastq demo` draining 3,000 with a pool on its own throwaway
# redis-server, signals), jobs in an in-process worker, async jobs, and the one-line
# errors (redis-py 7, the newest for 3.9, words its errors differently). Not the
# whole unit suite: it tests fastq, not the Python, and beside the main runs on a
# 2-core machine it doubled CI's time.
#
# Run by ci/test.sh. Alone: bash ci/pythons.sh [VERSION...] (default: 3.9 3.13).
# A Python that is missing fails the run, with a line saying so: never a silent skip.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -gt 0 ]; then versions=("$@"); else versions=(3.9 3.13); fi
TESTS=(
  tests/unit/test_every_module_imports.py
  tests/unit/test_native_vs_reference.py
  tests/unit/test_runner_native_vs_reference.py
  tests/integration/test_cli.py
  tests/integration/test_jobs.py
  tests/integration/test_async_jobs.py
  tests/integration/test_cli_ops.py::test_every_command_fails_in_one_line_on_a_wrong_password_or_no_redis
  tests/integration/test_cli_ops.py::test_bad_input_is_one_line_and_writes_nothing
)

root="${PYENV_ROOT:-}"
if [ -z "$root" ]; then
  root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
fi

# the newest patch release of each version that pyenv has
pythons=()
for v in "${versions[@]}"; do
  py=""
  for dir in $(ls -d "$root/versions/$v".* 2>/dev/null | sort -V); do
    if [ -x "$dir/bin/python" ]; then py="$dir/bin/python"; fi
  done
  if [ -z "$py" ]; then
    echo "ci/pythons.sh: no Python $v under $root/versions (pyenv has:" \
      "$(ls "$root/versions" 2>/dev/null | tr '\n' ' ')): the machine image should" \
      "bring it; \`pyenv install $v\` adds it" >&2
    exit 1
  fi
  pythons+=("$py")
done

# the files of the tree (tracked, or untracked and not ignored), copied into each
# Python's own; what a build made there (its venv, the extension) is kept for a rerun
files="$(mktemp)"
trap 'rm -f "$files"' EXIT
if ! git ls-files -z --cached --others --exclude-standard >"$files" 2>/dev/null; then
  # not a git checkout: every file but the venvs, the copies and what builds make
  find . \( -name '.venv*' -o -name .pythons -o -name .git -o -name build \
    -o -name __pycache__ -o -name '*.so' -o -name '*.egg-info' \) -prune \
    -o -type f -print0 >"$files"
fi
for v in "${versions[@]}"; do
  tree=".pythons/$v"
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

# one at a time, at the lowest priority: beside ci/test.sh's own set-up and first run,
# they take the CPU those leave. With the test runner and the runtime extras (every
# module must import), not the linters nor the browser and API tests' tools; the
# extension built without optimisation (these runs test what it does, not its speed:
# gcc -O2 took 15 s of CPU a Python)
for i in "${!versions[@]}"; do
  FASTQ_EXTRAS="test-core,cron,progress,reload,web,metrics" CFLAGS="${CFLAGS:-} -O0" \
    FASTQ_VENV=.venv FASTQ_PYTHON="${pythons[$i]}" nice -n 19 bash ".pythons/${versions[$i]}/ci/setup.sh"
done

# side by side, each printed whole when it ends: they mostly wait on Redis and children
logs="$(mktemp -d)"
trap 'rm -rf "$logs" "$files"' EXIT
pids=()
for v in "${versions[@]}"; do
  (
    cd ".pythons/$v"
    echo "== $(.venv/bin/python -V 2>&1): unit tests and a short drain"
    .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 "${TESTS[@]}"
  ) >"$logs/$v" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!versions[@]}"; do
  wait "${pids[$i]}" || status=1
  cat "$logs/${versions[$i]}"
done
exit "$status"
