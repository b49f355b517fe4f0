#!/usr/bin/env bash
# Runs the model-based convergence test (three stores, every key kind, collisions, schema changes, kills,
# restored backups, mode switches) with many seeds. CI runs 50 on the container file and 8 on PostgreSQL.
#
#   scripts/model-seeds.sh                   # 1000 seeds on the container file (and PostgreSQL if STORECTL_TEST_PG_URL is set)
#   scripts/model-seeds.sh 200 5000          # 200 seeds starting at seed 5000
#   STORECTL_MODEL_SEED=42 scripts/model-seeds.sh        # replay one seed (its schedule is printed on failure)
#   STORECTL_MODEL_KEEP=/tmp/kept scripts/model-seeds.sh # keep the files of failed seeds
#   STORECTL_MODEL_WITHOUT=restore,kill scripts/model-seeds.sh 50   # leave features out to narrow a failure down
#
# Also runs the seeded random-kill test with as many seeds (STORECTL_CRASH_SEEDS), unless MODEL_ONLY=1.
# Prints the failed seeds, and exits non-zero when any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

export STORECTL_MODEL_SEEDS="${1:-1000}"
export STORECTL_MODEL_FIRST_SEED="${2:-1}"
filter='ModelConvergenceTests/testModelOnAContainerFile'
if [ -n "${STORECTL_TEST_PG_URL:-}" ]; then filter='ModelConvergenceTests'; fi
if [ "${MODEL_ONLY:-0}" != 1 ]; then
    export STORECTL_CRASH_SEEDS="${STORECTL_CRASH_SEEDS:-$STORECTL_MODEL_SEEDS}"
    filter="$filter|SeededKillTests"
fi

swift build --build-tests
log=$(mktemp /tmp/storectl-model-seeds.XXXXXX)
status=0
swift test --skip-build --filter "$filter" 2>&1 | tee "$log" | grep -E "model convergence:|seeded kills|failed at:|^replay" || true
grep -qE "with [1-9][0-9]* failures?" "$log" && status=1
echo "full log: $log"
exit $status
