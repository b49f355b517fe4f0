import StoreBase
import StoreHistory
import StoreMirror
import StoreSQLite

extension StoreHandle {
    /// The history options this store's settings describe.
    public var trackingOptions: TrackingOptions { settings.trackingOptions }

    /// Creates and initialises the store when it is missing or not initialised (running its `schema:` SQL).
    /// Returns whether anything was done.
    /// - Throws: `StoreError`, `SQLiteError`.
    @discardableResult
    public func ensureInitialized() throws -> Bool {
        if exists, try database().tableExists("_storectl_meta") { return false }
        let db = try database(create: true)
        if let schema = settings.schema {
            let hasUserTables = try db.scalar("""
                SELECT 1 FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'
                AND name NOT LIKE '\\_storectl\\_%' ESCAPE '\\' LIMIT 1
                """) != nil
            if !hasUserTables {
                let sql: String
                do {
                    sql = try String(contentsOfFile: schema, encoding: .utf8)
                } catch {
                    throw StoreError(.noInput, "cannot read the schema file \(schema) of store '\(settings.name)'",
                                     hint: "check stores.\(settings.name).schema in \(config.path)")
                }
                try db.transaction { try db.execute(sql) }
            }
        }
        _ = try HistoryTracker(db: db, options: trackingOptions).install()
        try MirrorState.install(db)
        try Self.enableWAL(db)
        return true
    }

    /// Throws unless history tracking is installed and matches the schema (exit 78 with the reason).
    public func requireTracking() throws {
        try historyTracker().requireTracking()
    }

    /// The tracking state, for `status`.
    public func trackingState() throws -> (name: String, details: [String]) {
        let report = try historyTracker().inspect()
        switch report.state {
        case .ok: return ("ok", [])
        case .notInitialized: return ("not-initialised", [])
        case .drift(let details): return ("drift", details)
        case .triggersMissing(let tables): return ("triggers-missing", tables.map { "triggers of '\($0)' are missing" } + report.drift)
        }
    }
}

import Foundation
