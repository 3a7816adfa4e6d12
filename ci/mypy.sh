#!/usr/bin/env bash
# mypy --strict on fastq/, against the two redis-py majors it runs on, whose types
# differ: 8 (the main venv's, locked) and 7 (the newest for Python 3.9: the lock's
# choice there, installed with fastq's other typed dependencies into a venv of
# Python 3.9's, .pythons/mypy-redis7, that mypy reads the packages of).
# Run by ci/test.sh, after ci/setup.sh. Alone: bash ci/mypy.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${FASTQ_VENV:-.venv}/bin/python"

echo "mypy against redis-py $("$PY" -c 'import redis; print(redis.__version__)')"
"$PY" -m mypy fastq

source ci/pyenv.sh  # python_of
py39="$(python_of 3.9)"
env=".pythons/mypy-redis7"
# the packages whose types fastq uses, as the lock pins them for Python 3.9
want="$(cat ci/constraints.txt; "$PY" ci/deps.py packages; echo types-psutil)"
if [ "$(cat "$env/.stamp" 2>/dev/null)" != "$(printf '%s' "$want" | sha256sum)" ]; then
  rm -rf "$env"
  "$py39" -m venv "$env"
  "$env/bin/python" -m pip install -q --disable-pip-version-check -c ci/constraints.txt \
    $("$PY" ci/deps.py packages) types-psutil
  printf '%s' "$want" | sha256sum >"$env/.stamp"
fi
echo "mypy against redis-py $("$env/bin/python" -c 'import redis; print(redis.__version__)')"
"$PY" -m mypy --python-executable "$env/bin/python" fastq
