#!/bin/sh
# A fleet of storectl watchers on one PostgreSQL server (storectl-bench fleet): 8 and 24 devices each writing
# 2 changes a second for 30 s, then 48 idle watchers for 30 s, then 8 devices again in stores whose schema declares
# a foreign key (--references). Writes the four JSON documents into Benchmarks/results-fleet.json (an array, in
# that order) and prints each run's table on stderr.
#
# usage: Benchmarks/fleet.sh [storectl-bench fleet options added to every run, e.g. --pg-bin DIR]
# Needs STORECTL_TEST_PG_URL (a server on this machine, whose role may create a schema) and pgbench (from the
# server's bin folder: --pg-bin, or STORECTL_TEST_PG_BIN, or PATH).
set -eu
cd "$(dirname "$0")/.."
: "${STORECTL_TEST_PG_URL:?set STORECTL_TEST_PG_URL to a PostgreSQL server URL (BENCHMARKS.md shows how to start one)}"
# One product per build: SwiftPM builds only the last of several --product options.
swift build -c release --product storectl >&2
swift build -c release --product storectl-bench >&2
out=Benchmarks/results-fleet.json
tmp=$(mktemp -d /tmp/storectl-fleet-runs.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
status=0
run() {  # run NAME ARGS...: one fleet run, its JSON kept, its table shown
    name=$1; shift
    echo "== storectl-bench fleet $*" >&2
    .build/release/storectl-bench fleet "$@" --json-file "$tmp/$name.json" >&2 || status=$?
}
run a --devices 8 --rate 2 --seconds 30 "$@"
run b --devices 24 --rate 2 --seconds 30 "$@"
run c --devices 48 --rate 0 --seconds 30 "$@"
run d --devices 8 --rate 2 --seconds 30 --references "$@"
{
    echo "["
    first=1
    for name in a b c d; do
        [ -f "$tmp/$name.json" ] || continue
        [ "$first" = 1 ] || echo ","
        first=0
        cat "$tmp/$name.json"
    done
    echo "]"
} > "$out"
echo "wrote $out" >&2
exit "$status"
