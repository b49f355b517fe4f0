#!/usr/bin/env bash
# `storectl status --json` on a store that has just imported N rows, against `sqlite3 STORE 'select 1'`: the
# store a user gets from `storectl mode cloud` on a new device. A container of N records is made by
# `storectl-bench export --keep`, a new store is switched to cloud mode on it (the whole import), and then each
# command runs R times, alternating; the figures are medians of whole processes (wall time).
#
# usage: Benchmarks/after_import.sh [--rows N] [--repeat R] [--storectl PATH]   (defaults 1000000, 15,
#        .build/release/storectl; needs .build/release/storectl-bench, python3 and sqlite3)
set -euo pipefail

rows=1000000
repeat=15
storectl=.build/release/storectl
while [ $# -gt 0 ]; do
    case "$1" in
        --rows) rows="$2"; shift 2 ;;
        --repeat) repeat="$2"; shift 2 ;;
        --storectl) storectl="$2"; shift 2 ;;
        -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
done
storectl=$(realpath "$storectl")
bench=$(dirname "$storectl")/storectl-bench
[ -x "$bench" ] || { echo "error: $bench is missing; run: swift build -c release --product storectl-bench" >&2; exit 66; }
parent=$(mktemp -d /tmp/storectl-after-import.XXXXXX)
trap 'rm -rf "$parent"' EXIT
"$bench" export --rows "$rows" --repeat 1 --keep --dir "$parent" --storectl "$storectl" >/dev/null
lab=$(ls -d "$parent"/storectl-bench-*)
mkdir "$lab/new"
cp "$lab/b-$rows/config.yaml" "$lab/new/config.yaml"
cd "$lab/new"
export STORECTL_BENCH_SECRET=bench-secret-not-for-production
"$storectl" init >/dev/null
start=$(date +%s.%N)
STORECTL_TRACE=1 "$storectl" mode cloud 2>trace.txt >/dev/null
end=$(date +%s.%N)
echo "mode cloud (import of $rows rows, then verify): $(python3 -c "print(round($end - $start, 2))") s"
grep -E 'import\.(apply|commit)' trace.txt || true
python3 - "$storectl" "$repeat" <<'EOF'
import statistics, subprocess, sys, time
storectl, repeat = sys.argv[1], int(sys.argv[2])
runs = {"status": [storectl, "status", "--json"], "sqlite3": ["sqlite3", "store.sqlite", "select 1"]}
times = {name: [] for name in runs}
for _ in range(repeat):
    for name, argv in runs.items():
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times[name].append(time.perf_counter() - t)
status, sqlite = (statistics.median(times[n]) * 1000 for n in ("status", "sqlite3"))
print(f"status --json {status:.1f} ms, sqlite3 {sqlite:.1f} ms: {status / sqlite:.2f}x (medians of {repeat})")
EOF
