import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
import StoreBase
import StoreSQLite

/// History tracking that lives in the store file: installs and verifies the triggers, names storectl's own
/// transactions, reads history, and keeps consumers, tokens and pruning.
///
/// A tracker wraps one connection and is not `Sendable`, like the connection itself.
///
///     let tracker = HistoryTracker(db: db, options: TrackingOptions(author: "notes-app"))
///     try tracker.install()
///     let tx = try tracker.write {
///         try db.run("INSERT INTO notes(title) VALUES (?)", ["hello"])
///     }
///     let changes = try tracker.changes(after: 0)
public struct HistoryTracker {
    /// The store's connection.
    public let db: Connection
    /// Which tables are tracked, the author of storectl's writes, and the tombstone columns.
    public let options: TrackingOptions

    public init(db: Connection, options: TrackingOptions = TrackingOptions()) {
        self.db = db
        self.options = options
    }

    // MARK: - Install

    /// Creates the `_storectl_*` tables, the meta keys and the triggers, in one transaction.
    ///
    /// An existing database with data is adopted: its rows are not recorded as history. Running it again on an
    /// initialized, up-to-date store changes nothing (`installed` is false).
    /// - Throws: `StoreError`: exit 78 when tracking is off, when the schema drifted (run migrate) or the
    ///   triggers are missing (run migrate --force), or when `entities` names a missing table; exit 65 when a
    ///   tracked table has no primary key or the store's format is newer than this storectl.
    @discardableResult
    public func install() throws -> InstallReport {
        try requireTrackingOn()
        return try db.transaction(.immediate) {
            if try isInitialized() {
                try checkFormatVersion()
                let report = try inspect()
                switch report.state {
                case .ok, .notInitialized:
                    break
                case .drift(let details):
                    throw driftError(details)
                case .triggersMissing(let tables):
                    throw trackingLostError(tables)
                }
                if report.state == .ok {
                    return InstallReport(installed: false, storeID: try meta(MetaKey.storeID) ?? "",
                                         tables: try storedTrackedNames(),
                                         schemaHash: try meta(MetaKey.schemaHash) ?? "")
                }
            }
            try db.execute(StoreFormat.createTablesSQL)
            let tables = try trackedTables()
            let now = String(Self.nowMilliseconds())
            let defaults: [(MetaKey, String)] = [
                (MetaKey.formatVersion, StoreFormat.version),
                (MetaKey.storeID, UUID().uuidString.lowercased()),
                (MetaKey.mode, "local"),
                (MetaKey.nextTx, "1"),
                (MetaKey.createdAt, now),
            ]
            for (key, value) in defaults { try StoreMeta.setIfAbsent(db, key, value) }
            try installTriggers(tables)
            let hash = try writeSchemaMeta(tables)
            return InstallReport(installed: true, storeID: try meta(MetaKey.storeID) ?? "",
                                 tables: tables.map(\.name).sorted(by: utf8Less), schemaHash: hash)
        }
    }

    /// Regenerates every trigger from the current schema in ONE transaction, and updates the schema hash.
    ///
    /// History rows are never touched, so no history is lost. When tracking was lost (triggers missing), it
    /// refuses unless `force` is true; then it records the gap in meta `history_gap` (the newest seq at that
    /// moment), so that a later cloud enable re-baselines instead of silently missing changes. The failpoint
    /// `migrate.before-commit` fires after the triggers were regenerated, before the commit.
    /// - Throws: `StoreError`: exit 78 when tracking is off, not installed, or lost without `force`; exit 65
    ///   when a tracked table has no primary key.
    @discardableResult
    public func migrate(force: Bool = false) throws -> MigrateReport {
        try requireTrackingOn()
        return try db.transaction(.immediate) {
            guard try isInitialized() else { throw notInitializedError() }
            try checkFormatVersion()
            let before = try inspect()
            if case .triggersMissing(let tables) = before.state, !force {
                throw trackingLostError(tables)
            }
            if before.state == .ok && !force {
                return MigrateReport(before: before.state, repaired: [], regenerated: false,
                                     tables: try storedTrackedNames(),
                                     schemaHash: try meta(MetaKey.schemaHash) ?? "", historyGap: nil)
            }
            let tables = try trackedTables()
            try installTriggers(tables)
            let hash = try writeSchemaMeta(tables)
            var gap: Int64?
            var repaired = before.drift
            if case .triggersMissing(let lost) = before.state {
                let seq = try latestSeq()
                gap = seq
                try setMeta(MetaKey.historyGap, String(seq))
                try setMeta(MetaKey.historyGapReason,
                            "triggers of \(lost.joined(separator: ", ")) were missing; reinstalled with --force at "
                                + "\(Self.nowMilliseconds()) ms; changes made while they were missing were not recorded")
                repaired.append(contentsOf: lost.map { "triggers of table \(quoteIdentifier($0)) reinstalled" })
            }
            Failpoint.hit("migrate.before-commit")
            return MigrateReport(before: before.state, repaired: repaired, regenerated: true,
                                 tables: tables.map(\.name).sorted(by: utf8Less), schemaHash: hash, historyGap: gap)
        }
    }

    /// Throws unless tracking is installed and up to date. Sync and mode switches call this first.
    /// - Throws: `StoreError` exit 78 with the reason.
    public func requireTracking() throws {
        try requireTrackingOn()
        let report = try inspect()
        switch report.state {
        case .ok: return
        case .notInitialized: throw notInitializedError()
        case .drift(let details): throw driftError(details)
        case .triggersMissing(let tables): throw trackingLostError(tables)
        }
    }

    /// Throws unless the store has been initialized (`storectl init`).
    /// - Throws: `StoreError` exit 78 with a hint to run init.
    public func requireInitialized() throws {
        guard try isInitialized() else { throw notInitializedError() }
    }

    /// The state of tracking: ok, not initialized, drift, or triggers missing.
    /// - Throws: `SQLiteError`.
    public func verify() throws -> TrackingState {
        try inspect().state
    }

    // MARK: - Tables

    /// The user tables: every table of the main schema except `sqlite_*`, `_storectl_*`, virtual tables and
    /// their shadow tables. Sorted by name.
    /// - Throws: `SQLiteError`.
    public func userTables() throws -> [String] {
        try db.query("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table'")
            .compactMap { $0[0].string }
            .filter { !StoreFormat.isInternalTable($0) }
            .sorted(by: utf8Less)
    }

    /// The tables history tracks, as the schema is now: every user table, or exactly those `entities` names.
    /// - Throws: `StoreError` exit 65 naming a tracked table with no primary key, exit 78 when `entities` names
    ///   a table the store does not have or a tombstone column the table does not have.
    public func trackedTables() throws -> [TableSchema] {
        try trackedTables(strict: true)
    }

    func trackedTables(strict: Bool) throws -> [TableSchema] {
        let all = try userTables()
        var names: [String] = []
        if let entities = options.entities {
            for entity in entities {
                if let actual = all.first(where: { $0 == entity }) ?? all.first(where: { $0.lowercased() == entity.lowercased() }) {
                    if !names.contains(actual) { names.append(actual) }
                } else if strict {
                    var hint = "create the table (e.g. in the schema: file), or remove it from entities:"
                    if let near = Suggest.closest(entity, in: all) { hint = "did you mean '\(near)'? " + hint }
                    throw StoreError(.config, "entities: names table '\(entity)', which \(db.path) does not have",
                                     hint: hint)
                }
            }
        } else {
            names = all
        }
        let rowless = Set(try db.query("SELECT name FROM pragma_table_list WHERE schema = 'main' AND wr = 1")
            .compactMap { $0[0].string })
        var result: [TableSchema] = []
        for name in names.sorted(by: utf8Less) {
            let columns = try db.columns(of: name)
            let pk = columns.filter { $0.primaryKeyIndex > 0 }.sorted { $0.primaryKeyIndex < $1.primaryKeyIndex }
                .map(\.name)
            if pk.isEmpty && strict {
                throw StoreError(.dataError, "table '\(name)' in \(db.path) has no primary key, so its rows cannot be tracked",
                                 hint: "add an explicit PRIMARY KEY to '\(name)', or narrow entities: so that it is not tracked")
            }
            var tombstone = pk
            if let configured = tombstoneColumns(for: name) {
                tombstone = []
                for column in configured {
                    if let actual = columns.first(where: { $0.name == column })
                        ?? columns.first(where: { $0.name.lowercased() == column.lowercased() })
                    {
                        tombstone.append(actual.name)
                    } else if strict {
                        throw StoreError(.config, "entities.\(name).tombstone names column '\(column)', which table '\(name)' does not have",
                                         hint: "the columns of '\(name)' are: " + columns.map(\.name).joined(separator: ", "))
                    }
                }
            }
            // A rowid alias is a single INTEGER primary key of a rowid table that has no index of its own
            // ("INTEGER PRIMARY KEY DESC" is not an alias, and SQLite gives it an automatic index).
            var keyIsRowID = false
            if !rowless.contains(name), pk.count == 1,
               columns.first(where: { $0.name == pk[0] })?.declaredType.uppercased() == "INTEGER"
            {
                keyIsRowID = try db.scalar("SELECT count(*) FROM pragma_index_list(?) WHERE origin = 'pk'", [name])?
                    .int64 == 0
            }
            result.append(TableSchema(name: name, columns: columns, primaryKey: pk,
                                      foreignKeys: try db.foreignKeys(of: name), tombstone: tombstone,
                                      withoutRowID: rowless.contains(name), keyIsRowID: keyIsRowID))
        }
        return result
    }

    private func tombstoneColumns(for table: String) -> [String]? {
        if let exact = options.tombstones[table] { return exact }
        return options.tombstones.first { $0.key.lowercased() == table.lowercased() }?.value
    }

    // MARK: - Authors and transactions

    /// Runs `body` in a transaction whose history rows carry `author` (default: the options' author) and a new
    /// transaction id, and returns that id.
    ///
    /// It is the two statements any program can use to name its own transactions: first
    /// `INSERT OR REPLACE INTO _storectl_context(id, author, tx) VALUES (1, ?, ?)`, and before the commit
    /// `DELETE FROM _storectl_context`. Nested inside another transaction it runs in a savepoint and puts the
    /// outer author back afterwards.
    /// - Throws: the body's error (after rolling back), or `StoreError` exit 78 when the store is not initialized.
    @discardableResult
    public func write(author: String? = nil, _ body: () throws -> Void) throws -> Int64 {
        try transaction(author: author) { tx in
            try body()
            return tx
        }
    }

    /// Like `write(author:_:)`, but passes the transaction id to `body` and returns the body's result.
    /// - Throws: the body's error (after rolling back), or `StoreError` exit 78 when the store is not initialized.
    public func transaction<T>(author: String? = nil, _ body: (_ tx: Int64) throws -> T) throws -> T {
        let name = author ?? options.author
        return try db.transaction(.immediate) {
            let previous = try db.query("SELECT author, tx FROM _storectl_context WHERE id = 1").first
            let tx = try nextTransactionID()
            try db.run("INSERT OR REPLACE INTO _storectl_context(id, author, tx) VALUES (1, ?, ?)", [name, tx])
            let result = try body(tx)
            if let previous {
                try db.run("INSERT OR REPLACE INTO _storectl_context(id, author, tx) VALUES (1, ?, ?)",
                           [previous[0], previous[1]])
            } else {
                try db.run("DELETE FROM _storectl_context")
            }
            return result
        }
    }

    /// `write(author:_:)` on a connection, for callers that hold no tracker.
    /// - Throws: the body's error, or `StoreError` exit 78 when the store is not initialized.
    @discardableResult
    public static func write(db: Connection, author: String, _ body: () throws -> Void) throws -> Int64 {
        try HistoryTracker(db: db, options: TrackingOptions(author: author)).write(body)
    }

    private func nextTransactionID() throws -> Int64 {
        let sql = """
            UPDATE _storectl_meta SET value = CAST(value AS INTEGER) + 1 WHERE key = ?
            RETURNING CAST(value AS INTEGER) - 1
            """
        guard try db.tableExists("_storectl_meta"), let tx = try db.query(sql, [MetaKey.nextTx.rawValue]).first?[0].int64
        else {
            throw notInitializedError()
        }
        return tx
    }

    // MARK: - Meta and tokens

    /// The value of meta `key`, or nil.
    /// - Throws: `SQLiteError` (when the store is not initialized, too).
    public func meta(_ key: MetaKey) throws -> String? {
        try StoreMeta.value(db, key)
    }

    /// Sets meta `key` to `value`; nil removes it.
    /// - Throws: `SQLiteError`.
    public func setMeta(_ key: MetaKey, _ value: String?) throws {
        try StoreMeta.set(db, key, value)
    }

    /// The opaque token `name` in `_storectl_tokens` (e.g. a server change token), or nil.
    /// - Throws: `SQLiteError`.
    public func token(_ name: String) throws -> String? {
        try db.scalar("SELECT value FROM _storectl_tokens WHERE name = ?", [name])?.string
    }

    /// Sets the opaque token `name`; nil removes it.
    /// - Throws: `SQLiteError`.
    public func setToken(_ name: String, _ value: String?) throws {
        if let value {
            try db.run("INSERT OR REPLACE INTO _storectl_tokens(name, value) VALUES (?, ?)", [name, value])
        } else {
            try db.run("DELETE FROM _storectl_tokens WHERE name = ?", [name])
        }
    }

    /// The store id (meta `store_id`).
    /// - Throws: `StoreError` exit 78 when the store is not initialized.
    public func storeID() throws -> String {
        guard try isInitialized(), let id = try meta(MetaKey.storeID) else { throw notInitializedError() }
        return id
    }

    /// The newest history seq, or 0 when the history is empty.
    /// - Throws: `SQLiteError`.
    public func latestSeq() throws -> Int64 {
        try db.scalar("SELECT max(seq) FROM _storectl_history")?.int64 ?? 0
    }

    /// Whether the store has been initialized (meta holds a format version).
    /// - Throws: `SQLiteError`.
    public func isInitialized() throws -> Bool {
        guard try db.tableExists("_storectl_meta") else { return false }
        return try meta(MetaKey.formatVersion) != nil
    }

    /// The current time in unix milliseconds, as the triggers record it.
    public static func nowMilliseconds() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
    }

    // MARK: - Internals

    func storedTrackedNames() throws -> [String] {
        guard let text = try meta(MetaKey.tracked), let rows = try? db.query(
            "SELECT value FROM json_each(?1) WHERE json_type(?1) = 'array' ORDER BY key", [text])
        else { return [] }
        return rows.compactMap { $0[0].string }
    }

    func checkFormatVersion() throws {
        let version = try meta(MetaKey.formatVersion)
        guard version == StoreFormat.version else {
            if let number = Int(version ?? ""), number >= StoreFormat.oldestUpgradable,
               number < StoreFormat.currentVersion
            {
                throw StoreError(.dataError, "\(db.path) has store format version \(number), "
                                    + "older than this storectl's \(StoreFormat.version)",
                                 hint: "any storectl command that writes to the store upgrades it (a copy is saved "
                                    + "first), e.g. 'storectl sync'")
            }
            throw StoreError(.dataError, "\(db.path) has store format version \(version ?? "?"), "
                                + "this storectl knows version \(StoreFormat.version)",
                             hint: "upgrade storectl; the store was not changed")
        }
    }

    private func requireTrackingOn() throws {
        guard options.tracking else {
            throw StoreError(.config, "history tracking cannot be turned off",
                             details: ["  history tracking is what lets data survive a switch between local and cloud modes"],
                             hint: "remove 'tracking: false' from the store's history: settings; "
                                + "prune old history with 'storectl history prune --older-than 30d' instead")
        }
    }

    func notInitializedError() -> StoreError {
        StoreError(.config, "history tracking is not installed in \(db.path)",
                   hint: "run 'storectl init' to install it; existing rows are kept and are not recorded as history")
    }

    func driftError(_ details: [String]) -> StoreError {
        StoreError(.config, "the schema of \(db.path) changed since the history triggers were generated",
                   details: details.map { "  " + $0 },
                   hint: "run 'storectl migrate' to regenerate the triggers; no history is lost")
    }

    func trackingLostError(_ tables: [String]) -> StoreError {
        StoreError(.config, "history tracking is lost in \(db.path): the triggers of "
                    + tables.map { "'\($0)'" }.joined(separator: ", ") + " are missing",
                   details: ["  changes made to \(tables.count == 1 ? "this table" : "these tables") "
                                + "while the triggers were missing were not recorded"],
                   hint: "run 'storectl migrate --force' to reinstall them; it records a history gap in the store meta, "
                    + "so that the next cloud enable re-baselines instead of missing those changes")
    }

    /// Drops every storectl history trigger and creates the triggers of `tables`. The fence of a store file that
    /// was moved away (`_storectl_moved_*`) stays: it is what keeps writes out of the old file.
    func installTriggers(_ tables: [TableSchema]) throws {
        let existing = try db.query("""
            SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE '\\_storectl\\_%' ESCAPE '\\'
            """).compactMap { $0[0].string }.filter { !StoreFormat.isMoveFence($0) }
        for name in existing {
            try db.execute("DROP TRIGGER IF EXISTS main.\(quoteIdentifier(name))")
        }
        for table in tables {
            for trigger in try triggerSQL(for: table).triggers {
                try db.execute(trigger.sql)
            }
        }
    }

    func triggerSQL(for table: TableSchema, format: Int = StoreFormat.currentVersion) throws -> TriggerSQL {
        var jsonNames: [String: String] = [:]
        for column in table.nonKeyColumns {
            jsonNames[column] = try db.scalar("SELECT json_quote(?)", [column])?.string
        }
        var sql = TriggerSQL(table: table, jsonNames: jsonNames)
        sql.format = format
        return sql
    }

    /// The store's format version as a number (0 when it has none or it is not a number).
    public func formatVersion() throws -> Int {
        Int(try meta(MetaKey.formatVersion) ?? "") ?? 0
    }

    func writeSchemaMeta(_ tables: [TableSchema]) throws -> String {
        let description = SchemaDescription(
            tables: Dictionary(uniqueKeysWithValues: tables.map { ($0.name, $0.description) }),
            userTables: try userTables())
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let schema = String(decoding: try encoder.encode(description), as: UTF8.self)
        let tracked = String(decoding: try encoder.encode(tables.map(\.name).sorted(by: utf8Less)), as: UTF8.self)
        try setMeta(MetaKey.schemaHash, description.hash)
        try setMeta(MetaKey.tracked, tracked)
        try setMeta(MetaKey.schema, schema)
        return description.hash
    }
}

/// What `HistoryTracker.upgradeFormat` did.
public struct FormatUpgradeReport: Sendable, Codable, Equatable {
    /// The format the store had.
    public var from: Int
    /// The format it has now.
    public var to: Int
    /// Where the copy of the store taken before the upgrade is.
    public var backup: String
    /// The tables whose triggers were regenerated (tables with schema drift keep theirs until `storectl migrate`).
    public var regenerated: [String]
}

extension HistoryTracker {
    /// Upgrades a store of an older format to this storectl's format, in place: first a copy of the whole store is
    /// saved at `backupPath` (`VACUUM INTO`, a consistent copy even while others write), then ONE transaction
    /// regenerates the triggers of the tracked tables, runs `more` (the sync engine's own upgrade steps) and writes
    /// the new format version. Returns nil when the store is already current (or not initialised).
    ///
    /// - Throws: `StoreError` (exit 65) for a format newer than this storectl, exit 73 when the copy cannot be
    ///   written; `SQLiteError`. Nothing changes in the store when it throws.
    public func upgradeFormat(backupPath: String, _ more: (_ from: Int) throws -> Void = { _ in })
        throws -> FormatUpgradeReport?
    {
        guard try isInitialized() else { return nil }
        let version = try formatVersion()
        if version == StoreFormat.currentVersion { return nil }
        guard version >= StoreFormat.oldestUpgradable, version < StoreFormat.currentVersion else {
            try checkFormatVersion()
            return nil
        }
        do {
            try db.run("VACUUM INTO ?", [backupPath])
        } catch let error as SQLiteError {
            throw StoreError(.cantCreate, "cannot save a copy of \(db.path) at \(backupPath) before upgrading its "
                                + "format (\(error.message))",
                             hint: "free some space or fix the permissions of the folder; the store was not changed")
        }
        return try db.transaction(.immediate) {
            guard try formatVersion() == version else { return nil }  // another process upgraded it meanwhile
            var regenerated: [String] = []
            if try inspect().state == .ok {
                let tables = try trackedTables()
                try installTriggers(tables)
                _ = try writeSchemaMeta(tables)
                regenerated = tables.map(\.name).sorted(by: utf8Less)
            }
            try more(version)
            try setMeta(MetaKey.formatVersion, StoreFormat.version)
            try setMeta(.formatUpgradedFrom, String(version))
            return FormatUpgradeReport(from: version, to: StoreFormat.currentVersion, backup: backupPath,
                                       regenerated: regenerated)
        }
    }
}
