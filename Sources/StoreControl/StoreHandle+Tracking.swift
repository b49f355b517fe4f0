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
        // A store that config.yaml has in cloud mode was made and synced before: missing now, it was moved or
        // deleted, and an empty store in its place would look to every other device like all its rows deleted.
        if !exists && settings.mode == .cloud { throw missingStoreError() }
        // A store file made here and refused (its schema fails, an entity names a missing table) is removed.
        return try leavingNothingBehind(container: false) {
            let db = try database(create: true)
            try db.transaction {
                try runSchema(on: db)
                _ = try HistoryTracker(db: db, options: trackingOptions).install()
            }
            try MirrorState.install(db)
            try Self.enableWAL(db)
            return true
        }
    }

    /// Runs the store's `schema:` SQL file, only while the database has no tables of its own. Returns whether it
    /// ran. Meant to run inside the transaction that installs tracking.
    /// - Throws: `StoreError` 66 when the file cannot be read, 65 when its SQL fails.
    @discardableResult
    public func runSchema(on db: Connection) throws -> Bool {
        guard let path = settings.schema,
              try HistoryTracker(db: db, options: trackingOptions).userTables().isEmpty else { return false }
        guard let sql = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw StoreError(.noInput, "cannot read the schema file \(path) of store '\(settings.name)'",
                             hint: "check stores.\(settings.name).schema in the config; nothing was created")
        }
        do {
            try db.execute(sql)
        } catch let error as SQLiteError {
            throw StoreError(.dataError, "the schema file \(path) failed: \(error.message)",
                             details: error.details,
                             hint: "fix the SQL (it runs inside init's transaction, so it must not BEGIN or COMMIT); "
                                + "nothing was created")
        }
        return true
    }

    /// Throws unless history tracking is installed and matches the schema (exit 78 with the reason).
    public func requireTracking() throws {
        // Every change to a trigger or a table, by any connection, moves the schema version ("The schema version
        // is ... incremented on each schema change"): while it stands still, the triggers are as last checked.
        let version = try database().scalar("PRAGMA schema_version")?.int64
        if let version, version == trackingCheckedAt { return }
        try historyTracker().requireTracking()
        trackingCheckedAt = version
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

import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif

extension StoreHandle {
    /// After `migrate` added columns: fills them, in rows that have no value of their own, with what other devices
    /// sent for them before (the record map keeps fields the table lacked). Returns how many values were filled.
    /// Changes nothing in the cloud; values written here before `migrate` (under stale triggers) are found and
    /// exported by the next sync.
    /// - Throws: `SQLiteError`.
    @discardableResult
    public func fillAddedColumns() throws -> Int {
        let db = try database()
        guard try db.tableExists("_storectl_records") else { return 0 }
        return try Mirror.fillAddedColumns(db)
    }
}
