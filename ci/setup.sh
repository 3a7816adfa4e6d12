#!/usr/bin/env bash
# Installs what is missing on a Debian/Ubuntu machine, then fastq itself (with its
# compiled extension and test extras) into a virtualenv: .venv, or $FASTQ_VENV,
# made by python3, or by the interpreter $FASTQ_PYTHON names (ci/pythons.sh).
# Run by ci/test.sh and ci/demo.sh; safe to run again (it only adds what lacks).
# With --system: only what the machine lacks (ci/test.sh, before the other Pythons'
# builds start beside this one).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SYSTEM_ONLY=0
if [ "${1:-}" = "--system" ]; then SYSTEM_ONLY=1; fi

VENV="${FASTQ_VENV:-.venv}"
PYTHON="${FASTQ_PYTHON:-python3}"
# the exact version of every package installed (ci/lock.sh writes the locks): the
# main lock, or another (ci/pythons.sh: the oldest releases, or the newest of today)
CONSTRAINTS="${FASTQ_CONSTRAINTS:-ci/constraints.txt}"
# the extras installed with it: all that the suite uses, or fewer (ci/pythons.sh)
EXTRAS="${FASTQ_EXTRAS:-test,cron,progress,docs,reload,web}"
# A set-up already done is skipped: the stamp is the hash of what decides it (this
# script, the packaging files, the extension's sources); any change redoes it all.
STAMP="$VENV/.fastq-setup-stamp"
want_stamp() {
  # the files that exist of these (there may be no .pxd): a missing one is not an error
  local f
  { for f in ci/setup.sh "$CONSTRAINTS" pyproject.toml setup.py fastq_ext/*.pyx fastq_ext/*.pxd; do
    if [ -f "$f" ]; then printf '%s\n' "$f"; cat "$f"; fi
  done
  printf 'extras %s\n' "$EXTRAS"
  } | sha256sum | cut -d' ' -f1
}
if [ "$SYSTEM_ONLY" -eq 0 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(want_stamp)" ] \
  && command -v redis-server >/dev/null 2>&1 && [ -x /usr/bin/chromium ] \
  && "$VENV/bin/python" -c 'import fastq, sys; sys.exit(not fastq.ACCELERATED)' 2>/dev/null; then
  exit 0
fi
[ "$SYSTEM_ONLY" -eq 1 ] || rm -f "$STAMP"

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# the tests' workers and producers of another language (tests/integration/test_http_workers_node.py)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
# the clock tests run pools under a moved wall clock (tests/fault/test_clock_skew.py)
if command -v dpkg >/dev/null 2>&1 && ! dpkg -s libfaketime >/dev/null 2>&1; then missing+=(libfaketime); fi
command -v "$PYTHON" >/dev/null 2>&1 || missing+=(python3)
command -v cc >/dev/null 2>&1 || missing+=(build-essential)
# the dashboard's browser tests (tests/browser) drive Debian's Chromium
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
if command -v "$PYTHON" >/dev/null 2>&1; then
  "$PYTHON" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || missing+=(python3-dev)
  "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
else
  missing+=(python3-dev python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "ci/setup.sh: installing ${missing[*]} with apt-get"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

[ "$SYSTEM_ONLY" -eq 0 ] || exit 0

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check -c "$CONSTRAINTS")
"${pip[@]}" pip
# what builds the extension, from the lock: the build below uses them (no isolated
# build environment, which would take the newest setuptools and Cython of the day)
"${pip[@]}" setuptools Cython uv
# editable: the Cython extension is compiled in place, so tests import what they test
"${pip[@]}" --no-build-isolation -e ".[$EXTRAS]"
"$VENV/bin/python" -c 'import fastq, sys; sys.exit(0 if fastq.ACCELERATED else "fastq_ext did not build")'
want_stamp >"$STAMP"
