import Foundation
@testable import StoreHistory
import StoreSQLite
import TestSupport

extension Fleet {
    /// Puts `store` back to what store format `format` left: its version in the meta table and that format's
    /// triggers on every tracked table. Returns the triggers' SQL.
    @discardableResult
    func putBackStoreFormat(_ store: String, _ format: Int) throws -> [String] {
        let db = try Connection(path: path(store), mode: .readWrite, busyTimeout: 10_000, wal: true, foreignKeys: true)
        let tracker = HistoryTracker(db: db)
        var sql: [String] = []
        try db.transaction {
            try tracker.setMeta(MetaKey.formatVersion, String(format))
            for table in try tracker.trackedTables() {
                for trigger in try tracker.triggerSQL(for: table, format: format).triggers {
                    try db.execute("DROP TRIGGER \(quoteIdentifier(trigger.name))")
                    try db.execute(trigger.sql)
                    sql.append(trigger.sql)
                }
            }
        }
        return sql
    }
}
