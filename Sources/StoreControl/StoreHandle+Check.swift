import StoreBase
import StoreMirror
import StoreSQLite

extension StoreHandle {
    /// Checks the schema fit of the tracked tables (`storectl cloud check`). Changes nothing.
    /// - Throws: `StoreError` when the store is missing or not initialised.
    public func cloudCheck() throws -> CloudCheckReport {
        let db = try database()
        try checkEntityColumns()
        var tables = try db.tableExists("_storectl_meta") ? try Mirror.trackedTables(db) : []
        if tables.isEmpty {
            tables = settings.entities.isEmpty ? try historyTracker().userTables() : settings.entities.map(\.name)
        }
        return try CloudCheck.run(db, tables: tables, uniqueRules: uniqueRules, everyTable: settings.entities.isEmpty,
                                  encrypted: encryptedColumns)
    }
}
