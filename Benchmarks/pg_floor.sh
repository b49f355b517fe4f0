#!/usr/bin/env bash
# The server's floor for a PostgreSQL export: psql '\copy' of N records (the shape `storectl-bench postgres` writes)
# into a plain table (the benchmark's reference), into a table with the container's keys (primary key on
# (zone, record_name), unique (zone, seq), collation "C"), and into one that also has its JSON check; then the
# engine's statement shape, one INSERT ... SELECT computing the change tags, into the keyed and checked table.
#
# usage: Benchmarks/pg_floor.sh [--rows N]      (default 100000)
# Needs psql and STORECTL_TEST_PG_URL (e.g. postgresql://postgres@/postgres?host=/tmp/pg); uses and drops the
# schema storectl_floor. Each figure is the wall time of one psql process, median of 3.
set -euo pipefail

rows=100000
while [ $# -gt 0 ]; do
    case "$1" in
        --rows) rows="$2"; shift 2 ;;
        -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
done
export PGOPTIONS='-c client_min_messages=warning'
url="${STORECTL_TEST_PG_URL:?error: set STORECTL_TEST_PG_URL to a PostgreSQL server URL}"
dir=$(mktemp -d /tmp/storectl-pgfloor.XXXXXX)
trap 'psql "$url" -qc "DROP SCHEMA IF EXISTS storectl_floor CASCADE" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
sql() { psql "$url" -v ON_ERROR_STOP=1 -q -c "$1" >/dev/null; }

columns='zone text COLLATE "C" NOT NULL, record_name text COLLATE "C" NOT NULL, record_type text NOT NULL,
    fields text NOT NULL, change_tag text NOT NULL, seq bigint NOT NULL, deleted boolean NOT NULL,
    modified_by text NOT NULL, modified_at double precision NOT NULL'
sql "DROP SCHEMA IF EXISTS storectl_floor CASCADE; CREATE SCHEMA storectl_floor;
     CREATE TABLE storectl_floor.plain ($columns);
     CREATE TABLE storectl_floor.keyed ($columns, PRIMARY KEY (zone, record_name));
     CREATE UNIQUE INDEX ON storectl_floor.keyed (zone, seq);
     CREATE TABLE storectl_floor.checked ($columns, PRIMARY KEY (zone, record_name),
         CHECK (json_typeof(fields::json) = 'object'));
     CREATE UNIQUE INDEX ON storectl_floor.checked (zone, seq)"
# The records as storectl-bench writes them: a 123-byte body, names from the store id and the rowid.
psql "$url" -v ON_ERROR_STOP=1 -q -c "\\copy (SELECT 'default', format('notes/0123456789abcdef%s', lpad(to_hex(i), 12, '0')),
    'notes', json_build_object('uuid', md5(i::text), 'title', 'title ' || i, 'body', repeat('x', 123),
    'updated_at', i)::text, to_hex(i) || '-reference', i, false, 'reference-device', 1700000000
    FROM generate_series(1, $rows) i) TO '$dir/records.tsv'"

now() { date +%s.%N; }
median3() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
measure() {  # measure TABLE STATEMENT: median of 3 wall times, the table emptied before each
    local times=() start end
    for _ in 1 2 3; do
        sql "TRUNCATE storectl_floor.$1"
        start=$(now)
        psql "$url" -v ON_ERROR_STOP=1 -q -c "$2" >/dev/null
        end=$(now)
        times+=("$(echo "$end - $start" | bc)")
    done
    median3 "${times[@]}"
}
copy() { measure "$1" "\\copy storectl_floor.$1 FROM '$dir/records.tsv'"; }

plain=$(copy plain)
keyed=$(copy keyed)
checked=$(copy checked)
insert=$(measure checked "INSERT INTO storectl_floor.checked SELECT zone, record_name, record_type, fields,
    to_hex(seq) || '-' || left(md5('epoch'), 8), seq, deleted, modified_by,
    extract(epoch FROM statement_timestamp())::float8 FROM storectl_floor.plain")
ratio() { echo "scale=2; $1 / $2" | bc; }
echo "rows: $rows"
printf '%-62s %8.3f s\n' "\\copy into a plain table (the benchmark's reference)" "$plain"
printf '%-62s %8.3f s  %sx\n' "\\copy into a table with the container's two unique keys" "$keyed" "$(ratio "$keyed" "$plain")"
printf '%-62s %8.3f s  %sx\n' "\\copy into the same with the JSON check" "$checked" "$(ratio "$checked" "$plain")"
printf '%-62s %8.3f s  %sx\n' "INSERT ... SELECT with change tags into the same" "$insert" "$(ratio "$insert" "$plain")"
