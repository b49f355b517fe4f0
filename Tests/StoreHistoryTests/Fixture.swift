import Foundation
import StoreHistory
import StoreSQLite
import TestSupport
import XCTest

/// A store in a temporary folder: the file, a connection, and a tracker.
final class Fixture {
    let dir: TempDirectory
    let path: String
    let db: Connection
    var tracker: HistoryTracker

    init(_ schema: String, options: TrackingOptions = TrackingOptions(author: "tester"), install: Bool = true) throws {
        dir = try TempDirectory("storectl-history")
        path = dir.file("store.sqlite")
        db = try Connection(path: path)
        try db.execute(schema)
        tracker = HistoryTracker(db: db, options: options)
        if install { try tracker.install() }
    }

    /// Every history row, as `op entity pk author tx changed tombstone` lines, for exact comparisons.
    func rows(after token: Int64 = 0) throws -> [String] {
        try tracker.changes(after: token).map { c in
            var s = "\(c.op.rawValue) \(c.entity) \(c.pk) \(c.author) \(c.tx.map(String.init) ?? "nil")"
            if let changed = c.changed { s += " changed=" + changed.joined(separator: ",") }
            if let t = try db.scalar("SELECT tombstone FROM _storectl_history WHERE seq = ?", [c.seq])?.string {
                s += " tombstone=" + t
            }
            return s
        }
    }

    /// Runs `sql` through the real sqlite3 command-line shell, as a process that knows nothing about storectl.
    @discardableResult
    func sqlite3(_ sql: String) throws -> ProcessResult {
        let result = try Binary.run("/usr/bin/sqlite3", [path], in: dir.path, stdin: sql)
        XCTAssertEqual(result.status, 0, "\(result)")
        XCTAssertEqual(result.stderr, "", "\(result)")
        return result
    }

    /// Runs a Python program with the store's path as `sys.argv[1]`.
    @discardableResult
    func python(_ program: String) throws -> ProcessResult {
        let result = try Binary.run("/usr/bin/python3", ["-c", program, path], in: dir.path)
        XCTAssertEqual(result.status, 0, "\(result)")
        return result
    }

    func count(_ sql: String) throws -> Int64 {
        try db.scalar(sql)?.int64 ?? -1
    }
}
