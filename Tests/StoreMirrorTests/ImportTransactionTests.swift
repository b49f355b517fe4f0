import StoreCloud
import StoreHistory
@testable import StoreMirror
import StoreSQLite
import XCTest

/// No network inside the import's write transaction: the import fetches its pages and every record it must look
/// up first, then applies them in one transaction; an app's write made meanwhile never waits on the cloud.
final class ImportTransactionTests: XCTestCase {
    /// The guard of these tests can fail: a cloud call inside a write transaction of the store is seen, one
    /// outside it (or inside a transaction that writes only the temporary database) is not.
    func testTheGuardSeesACloudCallInsideTheWriteTransaction() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        var seen: [String] = []
        let cloud = TransactionGuardCloud(try f.cloud(), store: a, onViolation: { seen.append($0) })
        _ = try cloud.ensureZone("default")
        try HistoryTracker(db: a).transaction(author: MirrorState.importAuthor) { _ in
            _ = try cloud.fetchRecord(zone: "default", recordName: "notes/x")
        }
        try a.transaction(.deferred) {
            try a.execute("CREATE TEMP TABLE t(x); INSERT INTO temp.t VALUES (1)")
            _ = try cloud.fetchRecord(zone: "default", recordName: "notes/y")
        }
        XCTAssertEqual(seen, ["fetchRecord"])
        XCTAssertEqual(cloud.violations, ["fetchRecord"])
        XCTAssertEqual(cloud.calls, ["ensureZone", "fetchRecord", "fetchRecord"])
    }

    /// What the staging relies on: a transaction that writes only the connection's temporary database takes no
    /// lock on the store file, so another connection with no busy timeout writes meanwhile; the import's write
    /// transaction does lock it.
    func testStagingTakesNoLockOnTheStoreFile() throws {
        let f = try MirrorFixture()
        let db = try f.store("a")
        let app = try Connection(path: db.path, busyTimeout: 0)
        let staging = try ImportStaging(db: db)
        _ = staging
        try db.transaction(.deferred) {
            try db.run("""
                INSERT INTO temp._storectl_import_staged(page, record_name, record_type, fields, change_tag, seq,
                    deleted, modified_by, modified_at) VALUES (0, 'notes/x', 'notes', '{}', 't', 1, 0, 'd', 0)
                """)
            XCTAssertTrue(db.isInTransaction)
            XCTAssertFalse(db.holdsWriteTransaction)
            try app.run("INSERT INTO settings(key, value) VALUES ('k', 'written while staging')")
        }
        try HistoryTracker(db: db).transaction(author: MirrorState.importAuthor) { _ in
            XCTAssertTrue(db.holdsWriteTransaction)
            XCTAssertThrowsError(try app.run("INSERT INTO settings(key, value) VALUES ('k2', 'waits')")) { error in
                XCTAssertEqual((error as? SQLiteError)?.isBusy, true, "\(error)")
            }
        }
        XCTAssertEqual(try db.scalar("SELECT value FROM settings WHERE key = 'k'")?.string, "written while staging")
    }

    /// A child linked offline to a parent deleted elsewhere, imported by a store that never held the parent: the
    /// parent's tombstone is looked up before the import's transaction (never inside it), and the orphan rule
    /// deletes the child in the cloud, in the same sync.
    func testAParentIsLookedUpBeforeTheWriteTransaction() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        let c = try f.store("c")
        try f.write(a, "INSERT INTO notes(id, uuid, title) VALUES (7, 'n', 'parent')")
        try f.write(a, "INSERT INTO tags(id, name) VALUES (9, 't')")
        try f.sync(a)
        try f.sync(b)
        try f.write(a, "DELETE FROM notes WHERE id = 7")
        try f.sync(a)
        try f.sync(c)
        // b links the note it still holds, and only exports: the link is live in the cloud, its parent deleted.
        try f.write(b, "INSERT INTO note_tags(note_id, tag_id) SELECT n.id, t.id FROM notes n, tags t "
                        + "WHERE n.uuid = 'n' AND t.name = 't'")
        XCTAssertEqual(try b.scalar("SELECT count(*) FROM note_tags")?.int64, 1)
        _ = try f.mirror(b).exportChanges()

        let cloud = TransactionGuardCloud(try f.cloud(), store: c)
        var options = MirrorOptions(zone: "default", mergePolicy: .propertyLocalWins)
        options.pageSize = 1
        let report = try Mirror(db: c, cloud: cloud, options: options).sync()
        XCTAssertEqual(cloud.violations, [])
        XCTAssertTrue(cloud.calls.contains("fetchRecord"), "\(cloud.calls)")
        XCTAssertEqual(report.imported.waitingForParent, 0)
        XCTAssertEqual(try c.scalar("SELECT count(*) FROM note_tags")?.int64, 0)
        XCTAssertEqual(try c.scalar("SELECT count(*) FROM _storectl_inbox WHERE state = 'waiting'")?.int64, 0)
        XCTAssertEqual(try c.scalar("SELECT count(*) FROM _storectl_outgoing")?.int64, 0, "the child's deletion was sent")
        for db in [a, b, c, a, b, c] { try f.sync(db) }
        for db in [a, b, c] {
            XCTAssertEqual(try db.scalar("SELECT count(*) FROM notes")?.int64, 0)
            XCTAssertEqual(try db.scalar("SELECT count(*) FROM note_tags")?.int64, 0)
            XCTAssertEqual(try f.rows(db, "SELECT name FROM tags"), ["t"])
        }
    }

    /// An app writes to the store, with no busy timeout, while the import fetches its pages: the write goes
    /// through at once, the import applies every page, and the app's row is exported.
    func testAnAppWritesWhileTheImportFetches() throws {
        let f = try MirrorFixture()
        let a = try f.store("a")
        let b = try f.store("b")
        for i in 1...5 { try f.write(a, "INSERT INTO notes(uuid, title) VALUES ('n\(i)', 'from a')") }
        try f.sync(a)
        let app = try Connection(path: b.path, busyTimeout: 0)
        let cloud = TransactionGuardCloud(try f.cloud(), store: b)
        var writes = 0
        cloud.whileCalling = { call in
            guard call == "fetchChanges" else { return }
            writes += 1
            try app.run("INSERT INTO notes(uuid, title) VALUES (?, 'by the app')", ["app\(writes)"])
        }
        var options = MirrorOptions(zone: "default", mergePolicy: .propertyLocalWins)
        options.pageSize = 2
        let report = try Mirror(db: b, cloud: cloud, options: options).sync()
        XCTAssertEqual(cloud.violations, [])
        XCTAssertGreaterThanOrEqual(writes, 3, "one write per page fetched")
        XCTAssertEqual(report.imported.applied, 5)
        cloud.whileCalling = nil
        try f.sync(b)
        try f.sync(a)
        let expected = (1...5).map { "n\($0)|from a" } + (1...writes).map { "app\($0)|by the app" }
        XCTAssertEqual(try f.rows(a, "SELECT uuid, title FROM notes"), expected.sorted())
        XCTAssertEqual(try f.rows(b, "SELECT uuid, title FROM notes"), expected.sorted())
    }
}
