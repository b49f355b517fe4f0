#!/usr/bin/env bash
# Runs the convergence property test with many seeds (CI runs a few).
#
#   scripts/convergence.sh                 # 200 seeds on the container file (and PostgreSQL if STORECTL_TEST_PG_URL is set)
#   scripts/convergence.sh 1000            # 1000 seeds
#   scripts/convergence.sh 50 5000         # 50 seeds starting at seed 5000
#   STORECTL_CONVERGENCE_SEED=42 scripts/convergence.sh   # replay one seed
#
# A failure prints its seed; STORECTL_CONVERGENCE_KEEP=DIR keeps the files of failed seeds in DIR.
set -euo pipefail
cd "$(dirname "$0")/.."

export STORECTL_CONVERGENCE_SEEDS="${1:-200}"
export STORECTL_CONVERGENCE_FIRST_SEED="${2:-1}"

swift build --build-tests
swift test --skip-build --filter ConvergenceTests
