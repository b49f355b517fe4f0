import Foundation
import StoreCloud
import StoreHistory
import StoreMirror
import StoreSQLite
import TestSupport
import XCTest

/// Stores sharing one real container file, for sync-engine tests.
final class MirrorFixture {
    let dir: TempDirectory
    let containerPath: String
    let schema: String

    static let notesSchema = """
        CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title TEXT NOT NULL DEFAULT '',
                           body TEXT NOT NULL DEFAULT '', updated_at INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE tags(id INTEGER PRIMARY KEY, name TEXT NOT NULL);
        CREATE TABLE note_tags(note_id INTEGER NOT NULL REFERENCES notes(id) ON DELETE CASCADE,
                               tag_id INTEGER NOT NULL REFERENCES tags(id) ON DELETE CASCADE,
                               PRIMARY KEY (note_id, tag_id));
        CREATE TABLE settings(key TEXT PRIMARY KEY, value TEXT);
        """

    var uniqueRules: [String: UniqueRule] = [:]

    init(schema: String = MirrorFixture.notesSchema) throws {
        dir = try TempDirectory("storectl-mirror")
        containerPath = dir.file("cloud/test.container")
        self.schema = schema
        _ = try FileCloudDatabase.create(path: containerPath, container: "iCloud.com.example.test", account: "demo",
                                         secret: "s3cret", iterations: 1000)
    }

    func cloud() throws -> FileCloudDatabase {
        try FileCloudDatabase.open(path: containerPath, container: "iCloud.com.example.test", account: "demo",
                                   secret: "s3cret")
    }

    /// A new store with the schema and tracking installed.
    func store(_ name: String) throws -> Connection {
        let db = try Connection(path: dir.file("\(name).sqlite"))
        try db.execute(schema)
        _ = try HistoryTracker(db: db, options: TrackingOptions(author: "app")).install()
        return db
    }

    func mirror(_ db: Connection, policy: MergePolicy = .propertyLocalWins, batchSize: Int = 500,
                pageSize: Int = 1000) throws -> Mirror
    {
        var options = MirrorOptions(zone: "default", mergePolicy: policy)
        options.batchSize = batchSize
        options.pageSize = pageSize
        options.uniqueRules = uniqueRules
        // Every sync of these tests fails if it calls the cloud inside the store's write transaction.
        return try Mirror(db: db, cloud: TransactionGuardCloud(try cloud(), store: db), options: options)
    }

    @discardableResult
    func sync(_ db: Connection, policy: MergePolicy = .propertyLocalWins) throws -> SyncReport {
        try mirror(db, policy: policy).sync()
    }

    /// Writes as the app would, with an author.
    func write(_ db: Connection, _ sql: String, _ args: [any SQLBindable] = []) throws {
        _ = try HistoryTracker(db: db, options: TrackingOptions(author: "app")).write {
            try db.run(sql, args)
        }
    }

    /// Every row of every table, internal ones included: equal dumps mean nothing changed.
    func dump(_ db: Connection) throws -> [String] {
        var out: [String] = []
        for table in try db.query("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").compactMap({ $0[0].string }) {
            out += try rows(db, "SELECT * FROM \(quoteIdentifier(table))").map { table + ": " + $0 }
        }
        return out
    }

    /// Every row of a table with surrogate keys replaced, sorted, as text: comparable across stores.
    func rows(_ db: Connection, _ sql: String) throws -> [String] {
        try db.query(sql).map { $0.values.map(\.description).joined(separator: "|") }.sorted()
    }
}
