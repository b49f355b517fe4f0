import StoreHistory
import StoreSQLite
import TestSupport
import XCTest

/// Writers that know nothing about storectl are recorded too: they are what the triggers are for.
final class ExternalWriterTests: XCTestCase {
    func testTheSQLite3ShellIsRecordedAsExternal() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT, body TEXT)")
        try f.sqlite3("""
            INSERT INTO notes VALUES (1, 'a', 'x');
            BEGIN; INSERT INTO notes VALUES (2, 'b', 'y'); UPDATE notes SET body = 'z' WHERE id = 1; COMMIT;
            UPDATE notes SET title = title;
            DELETE FROM notes WHERE id = 2;
            """)
        XCTAssertEqual(try f.rows(), [
            "I notes [1] external nil",
            "I notes [2] external nil",
            "U notes [1] external nil changed=body",
            #"D notes [2] external nil tombstone={"id":2}"#,
        ])
        // An unnamed writer's changes are each their own transaction.
        XCTAssertEqual(try f.tracker.transactions().count, 4)
    }

    func testTheSQLite3ShellCanNameItsTransactions() throws {
        let f = try Fixture("CREATE TABLE notes(id INTEGER PRIMARY KEY, title TEXT)")
        try f.sqlite3("""
            BEGIN IMMEDIATE;
            INSERT OR REPLACE INTO _storectl_context(id, author, tx) VALUES (1, 'nightly-script', 900);
            INSERT INTO notes VALUES (1, 'a');
            INSERT INTO notes VALUES (2, 'b');
            DELETE FROM _storectl_context;
            COMMIT;
            INSERT INTO notes VALUES (3, 'c');
            """)
        XCTAssertEqual(try f.rows(), [
            "I notes [1] nightly-script 900",
            "I notes [2] nightly-script 900",
            "I notes [3] external nil",
        ])
        let transactions = try f.tracker.transactions()
        XCTAssertEqual(transactions.map(\.changes.count), [2, 1])
        XCTAssertEqual(transactions.map(\.author), ["nightly-script", "external"])
    }

    func testPythonsSQLiteModuleIsRecordedAsExternal() throws {
        let f = try Fixture("CREATE TABLE items(sku TEXT, store INTEGER, qty INTEGER, PRIMARY KEY (sku, store))")
        try f.python("""
            import sqlite3, sys
            con = sqlite3.connect(sys.argv[1])
            con.execute("INSERT INTO items VALUES ('a-1', 3, 10)")
            con.execute("UPDATE items SET qty = 11 WHERE sku = 'a-1'")
            con.commit()
            con.execute("DELETE FROM items")
            con.commit()
            """)
        XCTAssertEqual(try f.rows(), [
            #"I items ["a-1",3] external nil"#,
            #"U items ["a-1",3] external nil changed=qty"#,
            #"D items ["a-1",3] external nil tombstone={"sku":"a-1","store":3}"#,
        ])
    }

    func testTwoProcessesWritingConcurrentlyInWALLoseNoHistoryRow() throws {
        let f = try Fixture("CREATE TABLE events(id TEXT PRIMARY KEY, n INTEGER)")
        XCTAssertEqual(try f.db.scalar("PRAGMA journal_mode")?.string, "wal")
        let program = """
            import sqlite3, sys
            con = sqlite3.connect(sys.argv[1], timeout=60, isolation_level=None)
            me = sys.argv[2]
            for batch in range(100):
                con.execute("BEGIN IMMEDIATE")
                for i in range(5):
                    n = batch * 5 + i
                    con.execute("INSERT INTO events VALUES (?, ?)", (me + "-" + str(n), n))
                con.execute("UPDATE events SET n = n + 1000 WHERE id = ?", (me + "-" + str(batch * 5),))
                con.execute("COMMIT")
            """
        let processes = try ["p1", "p2"].map { name -> Process in
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            p.arguments = ["-c", program, f.path, name]
            try p.run()
            return p
        }
        // This process writes at the same time, through storectl's own transactions.
        for i in 0..<100 {
            try f.tracker.write { try f.db.run("INSERT INTO events VALUES (?, ?)", ["me-\(i)", i]) }
        }
        for p in processes {
            p.waitUntilExit()
            XCTAssertEqual(p.terminationStatus, 0)
        }
        XCTAssertEqual(try f.count("SELECT count(*) FROM events"), 1100)
        XCTAssertEqual(try f.count("SELECT count(*) FROM _storectl_history WHERE op = 'I'"), 1100)
        XCTAssertEqual(try f.count("SELECT count(*) FROM _storectl_history WHERE op = 'U'"), 200)
        XCTAssertEqual(try f.count("SELECT count(DISTINCT pk) FROM _storectl_history WHERE op = 'I'"), 1100)
        XCTAssertEqual(try f.count("SELECT count(*) FROM _storectl_history WHERE author = 'tester'"), 100)
        // seq is gap-free and monotonic: nothing was lost between the writers.
        XCTAssertEqual(try f.count("SELECT max(seq) - min(seq) + 1 FROM _storectl_history"), 1300)
    }
}
