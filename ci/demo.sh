#!/usr/bin/env bash
# Sets up what is missing, then runs the demo mailing blast (fastq demo) on a
# throwaway redis-server. Arguments go to `fastq demo` (e.g. --jobs 100000).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
exec "${FASTQ_VENV:-.venv}/bin/fastq" demo "$@"
