#!/usr/bin/env python3
"""Counts the SQLite instructions per single-row update for the update trigger of store format 2 (one `IS NOT` test
per column) and of store format 3 (the same test, or a `typeof` comparison: a change of type alone is a change).

The store is made by storectl itself (`storectl init` on a table of N columns without a declared type, the only
kind that pays for the test; a typed column keeps format 2's text), so the trigger is exactly the one storectl
installs; format 2's is the same text without the `typeof` comparisons. Run under callgrind, counting
only inside sqlite3_step, so that the figures are exact and do not depend on the machine's load:

    for f in 2 3; do for n in 5 50 100; do
      valgrind --tool=callgrind --callgrind-out-file=/dev/null --toggle-collect=sqlite3_step \
        /usr/bin/python3 Benchmarks/type_test_cost.py .build/debug/storectl $n $f 2>&1 | grep -o 'Collected : [0-9]*'
    done; done

Divide by the update count (20,000); the 10,000 inserts before them are counted too, the same in both formats.
"""
import os
import re
import sqlite3
import subprocess
import sys
import tempfile

binary, columns, fmt = os.path.abspath(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
folder = tempfile.mkdtemp(prefix="storectl-type-test-")
names = ", ".join(f"c{i}" for i in range(1, columns + 1))
with open(os.path.join(folder, "schema.sql"), "w") as f:
    f.write(f"CREATE TABLE IF NOT EXISTS w(id INTEGER PRIMARY KEY, {names});\n")
with open(os.path.join(folder, "config.yaml"), "w") as f:
    f.write("version: 1\nstores:\n  s:\n    path: s.sqlite\n    schema: schema.sql\n")
subprocess.run([binary, "init"], cwd=folder, check=True, capture_output=True)
db = sqlite3.connect(os.path.join(folder, "s.sqlite"), isolation_level=None)
sql = db.execute("SELECT sql FROM sqlite_master WHERE name = '_storectl_w_upd'").fetchone()[0]
if fmt == 2:
    sql = re.sub(r' OR typeof\(OLD\."c\d+"\) <> typeof\(NEW\."c\d+"\)', "", sql)
db.execute("DROP TRIGGER _storectl_w_upd")
db.execute(sql)
db.execute("BEGIN")
for i in range(10000):
    db.execute("INSERT INTO w(id, c1) VALUES (?, 'x')", (i,))
for i in range(20000):
    db.execute("UPDATE w SET c1 = ? WHERE id = ?", (str(i), i % 10000))
db.execute("COMMIT")
