#!/bin/sh
# Runs every storectl benchmark in one run (see BENCHMARKS.md) and draws the scaling plot.
# Usage: Benchmarks/run.sh [storectl-bench all options, e.g. --rows 1000000 --repeat 7; --schema single for the
# one-table store of the earlier runs, the default being the users' realistic schema]
# For the PostgreSQL rows, export STORECTL_TEST_PG_URL first (BENCHMARKS.md shows how to start a throwaway server).
set -eu
cd "$(dirname "$0")/.."
swift build -c release --product storectl-bench >&2
swift build -c release --product storectl >&2
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), SQLite $(sqlite3 --version | cut -d' ' -f1)" >&2
.build/release/storectl-bench all --json-file Benchmarks/results.json "$@"
for py in python3 /usr/bin/python3; do
    if "$py" -c 'import matplotlib' 2>/dev/null; then
        "$py" Benchmarks/plot_scaling.py Benchmarks/results.json Benchmarks/scaling.png >&2
        exit 0
    fi
done
echo "matplotlib is not installed (apt-get install python3-matplotlib): no plot" >&2
