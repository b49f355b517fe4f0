#!/usr/bin/env bash
# Soak test of `storectl watch --all` (not part of CI): three stores sharing a container file, a writer on each
# store (inserts, updates and deletes through the sqlite3 CLI), one watcher serving all three. Samples the
# watcher's RSS every 30 s, then stops the writers and checks that every store converges to the same rows.
#
#   scripts/watch-soak.sh              # 10 minutes
#   scripts/watch-soak.sh 60           # an hour
#   STORECTL_BIN=.build/release/storectl scripts/watch-soak.sh 10
#   STORECTL_SOAK_KEEP=/tmp/soak scripts/watch-soak.sh   # keep the folder (stores, events, log, RSS samples)
#   STORECTL_SOAK_HOOK=0 scripts/watch-soak.sh            # without the on_remote_change command
#
# Exits 0 when the stores converged and the watcher stopped cleanly on SIGTERM; prints the RSS samples either way.
set -euo pipefail
cd "$(dirname "$0")/.."

minutes="${1:-10}"
bin="${STORECTL_BIN:-}"
if [ -z "$bin" ]; then
    swift build --product storectl >&2
    bin="$(swift build --show-bin-path)/storectl"
fi
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

dir="${STORECTL_SOAK_KEEP:-$(mktemp -d /tmp/storectl-soak.XXXXXX)}"
mkdir -p "$dir"
cd "$dir"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ -z "${STORECTL_SOAK_KEEP:-}" ]; then rm -rf "$dir"; fi
}
trap cleanup EXIT

cat > schema.sql <<'EOF'
CREATE TABLE IF NOT EXISTS notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL UNIQUE, title TEXT NOT NULL DEFAULT '',
                                 body TEXT NOT NULL DEFAULT '');
EOF
{
    echo "version: 1"
    echo "stores:"
    for s in a b c; do
        cat <<EOF
  $s:
    path: data/$s.sqlite
    schema: schema.sql
    cloud:
      container: iCloud.com.example.soak
      url: file:cloud/soak.container
      create_if_missing: true
      account: demo
      secret: \${SOAK_SECRET:-demo-secret}
      merge_policy: property-local-wins
EOF
        if [ "${STORECTL_SOAK_HOOK:-1}" = 1 ]; then echo "      on_remote_change: 'echo \"\$STORECTL_COUNT\"'"; fi
    done
} > config.yaml
chmod 600 config.yaml
for s in a b c; do
    "$bin" --store "$s" init --quiet > /dev/null
    "$bin" --store "$s" mode cloud --quiet > /dev/null
done

"$bin" watch --all --json --interval 2 > events.jsonl 2> watch.log &
watcher=$!
pids+=("$watcher")

# A writer per store: about 5 changes a second, a fifth of them updates of the store's own rows and a tenth deletes.
writer() {
    local s="$1" i=0 deadline="$2"
    while [ "$(date +%s)" -lt "$deadline" ]; do
        i=$((i + 1))
        local sql="INSERT INTO notes(uuid, title) VALUES ('$s-$i', 'note $i from $s');"
        if [ $((i % 5)) -eq 0 ]; then sql="$sql UPDATE notes SET body = 'edited $i' WHERE uuid = '$s-$((i / 2))';"; fi
        if [ $((i % 10)) -eq 0 ]; then sql="$sql DELETE FROM notes WHERE uuid = '$s-$((i - 7))';"; fi
        sqlite3 -cmd ".timeout 10000" "data/$s.sqlite" "$sql" || echo "writer $s: sqlite3 failed at $i" >&2
        sleep 0.2
    done
}
start=$(date +%s)
deadline=$((start + minutes * 60))
for s in a b c; do
    writer "$s" "$deadline" &
    pids+=("$!")
done

rss() { awk '/^VmRSS/ { print $2 }' "/proc/$watcher/status"; }
echo "soak: $minutes minute(s), watcher pid $watcher, folder $dir"
printf '%8s %10s %8s\n' "elapsed" "rss_kb" "events" | tee rss.log
while [ "$(date +%s)" -lt "$deadline" ]; do
    printf '%7ss %10s %8s\n' "$(( $(date +%s) - start ))" "$(rss)" "$(wc -l < events.jsonl)" | tee -a rss.log
    sleep 30
done
wait "${pids[@]:1}" 2>/dev/null || true
printf '%7ss %10s %8s  (writers stopped)\n' "$(( $(date +%s) - start ))" "$(rss)" "$(wc -l < events.jsonl)" \
    | tee -a rss.log

# Converged: the three stores hold the same rows.
converged=no
for _ in $(seq 1 60); do
    a=$(sqlite3 data/a.sqlite "SELECT uuid, title, body FROM notes ORDER BY uuid" | md5sum)
    b=$(sqlite3 data/b.sqlite "SELECT uuid, title, body FROM notes ORDER BY uuid" | md5sum)
    c=$(sqlite3 data/c.sqlite "SELECT uuid, title, body FROM notes ORDER BY uuid" | md5sum)
    if [ "$a" = "$b" ] && [ "$b" = "$c" ]; then converged=yes; break; fi
    sleep 1
done
printf '%7ss %10s %8s  (after convergence)\n' "$(( $(date +%s) - start ))" "$(rss)" "$(wc -l < events.jsonl)" \
    | tee -a rss.log
kill -TERM "$watcher"
status=0
wait "$watcher" || status=$?

rows=$(sqlite3 data/a.sqlite "SELECT count(*) FROM notes")
echo "rows per store: a=$rows b=$(sqlite3 data/b.sqlite 'SELECT count(*) FROM notes')" \
     "c=$(sqlite3 data/c.sqlite 'SELECT count(*) FROM notes')"
for t in import export error retry mode; do
    printf '%s events: %s\n' "$t" "$(grep -c "\"type\":\"$t\"" events.jsonl || true)"
done
echo "converged: $converged; watcher exit status on SIGTERM: $status"
[ "$converged" = yes ] && [ "$status" -eq 0 ]
