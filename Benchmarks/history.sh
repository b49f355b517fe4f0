#!/bin/sh
# Measures the overhead of storectl's history triggers (see BENCHMARKS.md, "History tracking overhead").
# Usage: Benchmarks/history.sh [storectl-bench history options, e.g. --rows 200000 --json]
set -eu
cd "$(dirname "$0")/.."
swift build -c release --product storectl-bench >&2
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), SQLite $(sqlite3 --version | cut -d' ' -f1)" >&2
exec .build/release/storectl-bench history "$@"
