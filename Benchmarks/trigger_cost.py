#!/usr/bin/env python3
"""Counts the SQLite instructions per inserted row for variants of the history insert trigger.

Run under callgrind, counting only inside sqlite3_step, so that the figures are exact and do not depend on
the machine's load:

    for v in plain const full; do
      valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect=sqlite3_step \
        /usr/bin/python3 Benchmarks/trigger_cost.py $v 2>&1 | grep -o 'Collected : [0-9]*'
    done

Divide by the row count (20,000) and compare with `plain`.
"""
import os
import sqlite3
import sys
import tempfile

H = "INSERT INTO _storectl_history(tx, author, ts, entity, pk, op)"
TS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
CTX = ("(SELECT tx FROM _storectl_context WHERE id = 1), "
       "coalesce((SELECT author FROM _storectl_context WHERE id = 1), 'external')")


def trigger(body):
    return "CREATE TRIGGER t AFTER INSERT ON notes BEGIN " + body + "; END;"


VARIANTS = {
    "plain": "",
    # The floor: any AFTER INSERT trigger that writes one row.
    "const": trigger(f"{H} VALUES (1, 'a', 0, 'notes', '[1]', 'I')"),
    "ts": trigger(f"{H} VALUES (1, 'a', {TS}, 'notes', '[1]', 'I')"),
    "context": trigger(f"{H} VALUES ({CTX}, 0, 'notes', '[1]', 'I')"),
    "json": trigger(f"{H} VALUES (1, 'a', 0, 'notes', json_array(NEW.id), 'I')"),
    # What storectl installs on a table whose key is a rowid alias.
    "full": trigger(f"{H} VALUES ({CTX}, {TS}, 'notes', json_array(NEW.id), 'I')"),
}

ROWS = 20000


def main():
    name = sys.argv[1] if len(sys.argv) > 1 else "full"
    with tempfile.TemporaryDirectory() as tmp:
        con = sqlite3.connect(os.path.join(tmp, "t.sqlite"), isolation_level=None)
        con.executescript("""
            PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
            CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT, title TEXT, body TEXT, updated_at INTEGER);
            CREATE TABLE _storectl_context(id INTEGER PRIMARY KEY CHECK (id = 1), author TEXT NOT NULL,
                                           tx INTEGER NOT NULL);
            CREATE TABLE _storectl_history(seq INTEGER PRIMARY KEY, tx INTEGER, author TEXT NOT NULL,
                ts INTEGER NOT NULL, entity TEXT NOT NULL, pk TEXT NOT NULL, op TEXT NOT NULL, changed TEXT,
                tombstone TEXT);
            """ + VARIANTS[name])
        body = "x" * 230
        rows = [(i, "uuid-%d" % i, "Note number %d" % i, body, i) for i in range(1, ROWS + 1)]
        con.execute("BEGIN IMMEDIATE")
        con.execute("INSERT OR REPLACE INTO _storectl_context(id, author, tx) VALUES (1, 'bench', 1)")
        con.executemany("INSERT INTO notes VALUES (?, ?, ?, ?, ?)", rows)
        con.execute("DELETE FROM _storectl_context")
        con.execute("COMMIT")
        con.close()


if __name__ == "__main__":
    main()
