import FoundationEssentials
import StoreBase
import StoreCloud
import StoreCrypto
import StoreHistory
import StoreMirror
import StoreSQLite

/// What `storectl migrate --sql FILE` did. The JSON form is stable.
public struct SchemaMigrationReport: Sendable, Codable, Equatable {
    public var store: String
    public var file: String
    /// SHA-256 of the file's bytes.
    public var sha256: String
    /// The schema version before, and the one recorded now (the same when nothing was done).
    public var previousVersion: Int
    public var version: Int
    /// Whether the SQL ran (false: the store is at `version` already).
    public var applied: Bool
    /// The tracked tables after the migration.
    public var tables: [String]
    /// Rows whose key changed in a rebuild (a table copied into a new one) and that kept their record names.
    public var keptRecordNames: Int
    /// Rows whose values the SQL changed where no trigger saw it (a table copy): recorded in history, so that the
    /// next sync exports them as updates.
    public var changedRows: Int
    /// Rows that appeared where no trigger saw it: exported as new records.
    public var newRows: Int
    /// Synced rows that are gone and matched no new row: exported as deletions.
    public var removedRows: Int
    /// Whether the file changed values (a data migration): the zone's schema version is then raised to `version`
    /// by the first device that syncs after running it, and the zone's other devices wait until they run it too.
    public var dataMigration: Bool = false
}

extension StoreHandle {
    /// The author of the rows `migrate --sql` changes.
    static let schemaMigrationAuthor = SchemaGate.migrationAuthor

    /// `storectl migrate --sql FILE [--version N]`: runs a schema change ALTER TABLE cannot make (a column type
    /// change, a table rebuilt by copying it) in ONE transaction, with foreign keys off and checked before the
    /// commit; regenerates the history triggers; keeps the record names of rebuilt rows; records the schema
    /// version.
    ///
    /// The file may not control the transaction (BEGIN, COMMIT, ROLLBACK), ATTACH a database, set pragmas, or
    /// touch storectl's own tables and triggers. Rows of a rebuilt table that got new keys are matched to the rows
    /// they were copied from (same values, else same values as text over the columns both shapes have) and keep
    /// their record names, so the cloud sees updates, never a mass delete and re-insert. Changes no trigger saw
    /// are found by comparing each row with its record map entry, and recorded in history for the next export.
    /// - Parameter version: the version the file brings the schema to; at or below the store's, nothing is done.
    ///   Nil: the store's version plus one.
    /// - Throws: `StoreError` 66 (no file or store), 65 (the SQL failed, a refused statement, a foreign key
    ///   violated), 78 (tracking lost); nothing is changed then.
    public func migrateSchema(sqlFile path: String, version requested: Int? = nil,
                              log: (String) -> Void = { _ in }) throws -> SchemaMigrationReport
    {
        try requireExists()
        guard let bytes = FileManager.default.contents(atPath: path).map({ [UInt8]($0) }),
              let sql = String(validating: bytes, as: UTF8.self)
        else {
            throw StoreError(.noInput, "cannot read the SQL file \(path)", hint: "check the path; nothing was changed")
        }
        let db = try database()
        let tracker = try historyTracker()
        try tracker.requireInitialized()
        if case .triggersMissing(let tables) = try tracker.verify() {
            throw StoreError(.config, "history tracking is lost in \(settings.path): the triggers of "
                             + tables.joined(separator: ", ") + " are missing",
                             hint: "run 'storectl migrate --force' first (it records the gap), then migrate --sql")
        }
        let previous = Int(try MirrorState.meta(db, .schemaVersion) ?? "0") ?? 0
        let version = requested ?? previous + 1
        var report = SchemaMigrationReport(store: settings.name, file: path,
                                           sha256: Hex.string(try Crypto.sha256(bytes)), previousVersion: previous,
                                           version: previous, applied: false, tables: try Mirror.trackedTables(db),
                                           keptRecordNames: 0, changedRows: 0, newRows: 0, removedRows: 0)
        guard version > previous else {
            log("version: store '\(settings.name)' is at schema version \(previous) already; nothing to do")
            return report
        }
        let withdraw = try Self.readableMirrorState(db)
        defer { withdraw() }
        // "foreign key constraint enforcement ... cannot be enabled or disabled in the middle of a transaction":
        // off before it starts, so that dropping a table in a rebuild cascades nowhere; checked before the commit.
        try db.execute("PRAGMA foreign_keys = OFF")
        defer { try? db.execute("PRAGMA foreign_keys = ON") }
        if try storeMode() == .cloud {
            // A store in cloud mode syncs first (`syncBeforeDataMigration`), but only once the file is known to
            // run: it runs once in a transaction that is rolled back, so that a refused file changes nothing at all.
            var trial = report
            do {
                try applySchemaFile(db, sql: sql, path: path, version: version, tracker: tracker, report: &trial,
                                    trial: true, log: { _ in })
            } catch is SchemaTrialRollback {}
            try syncBeforeDataMigration(log: log)
        }
        try applySchemaFile(db, sql: sql, path: path, version: version, tracker: tracker, report: &report,
                            trial: false, log: log)
        report.version = version
        report.applied = true
        log("record names: \(report.keptRecordNames) rebuilt row(s) kept theirs; \(report.changedRows) changed, "
            + "\(report.newRows) new and \(report.removedRows) removed row(s) recorded for the next export")
        log("version: \(previous) -> \(version)")
        return report
    }

    /// Digests of every tracked table's values as the exporter encodes them, one per column (and one for the set of
    /// keys), to tell whether a file changed values: rows no trigger saw and no record map entry describes (a store
    /// that never synced, a row not exported yet) count too, and a column dropped or added is no change of values.
    /// Valid within this process only.
    static func valuesDigest(_ db: Connection, _ entities: [EntityMap]) throws -> [String: Int] {
        var digests: [String: Int] = [:]
        for e in entities {
            var keys = Hasher()
            var lastKey: String?
            var columns: [String: Hasher] = [:]
            try db.prepare("""
                SELECT l.pk, j.key, j.type, CAST(j.value AS TEXT) FROM (\(e.localRecordsSQL)) l, json_each(l.fields) j
                ORDER BY l.pk, j.key
                """).forEach { row in
                let pk = row.column(0).string
                let key = row.column(1).string ?? ""
                columns[key, default: Hasher()].combine(pk)
                columns[key, default: Hasher()].combine(row.column(2).string)
                columns[key, default: Hasher()].combine(row.column(3).string)
                if pk != lastKey { keys.combine(pk) }
                lastKey = pk
            }
            digests[e.name] = keys.finalize()
            for (column, hasher) in columns { digests[e.name + "\u{1f}" + column] = hasher.finalize() }
        }
        return digests
    }

    /// Whether two `valuesDigest`s differ in a table or column both have.
    static func valuesDiffer(_ a: [String: Int], _ b: [String: Int]) -> Bool {
        a.contains { key, digest in b[key].map { $0 != digest } ?? false }
    }

    /// Rolls back the trial run of a schema file.
    private struct SchemaTrialRollback: Error {}

    /// Runs the schema file in ONE transaction with author `migrate`, regenerates the triggers, keeps record
    /// names, records the changes no trigger saw and the version; with `trial`, rolls it all back at the end
    /// (`SchemaTrialRollback`).
    private func applySchemaFile(_ db: Connection, sql: String, path: String, version: Int, tracker: HistoryTracker,
                                 report: inout SchemaMigrationReport, trial: Bool, log: (String) -> Void) throws
    {
        let before = try Mirror.entityMaps(db)
        defer { try? db.execute("DROP TABLE IF EXISTS temp._storectl_before") }
        let valuesBefore = try Self.valuesDigest(db, before)
        try HistoryTracker(db: db, options: trackingOptions).transaction(author: Self.schemaMigrationAuthor) { tx in
            try Self.snapshotSyncedRows(db, entities: before)
            do {
                try Self.runSchemaFile(db, sql, path: path, store: settings.name, synced: before)
            } catch let refusal as AuthorizerRefusal {
                throw StoreError(.dataError, "\(path): \(refusal.reason)", details: refusal.details,
                                 hint: "change the file; nothing was changed")
            } catch let error as SQLiteError {
                throw StoreError(.dataError, "\(path) failed: \(error.message)", details: error.details,
                                 hint: "fix the SQL; it ran in one transaction, which was rolled back: nothing was changed")
            }
            db.clearStatementCache()
            let violations = try db.query("PRAGMA foreign_key_check")
            guard violations.isEmpty else {
                let lines = violations.prefix(10).map { row in
                    "  \(row[0].string ?? "?") row \(row[1].description) points at a missing \(row[2].string ?? "?") row"
                }
                throw StoreError(.dataError, "\(path) leaves \(violations.count) foreign key violation(s)",
                                 details: lines, hint: "fix the SQL; nothing was changed")
            }
            log("sql: ran \(path) in one transaction")
            // The triggers, for the schema as it is now. Missing ones (a rebuilt table) are no gap: every row the
            // SQL touched is reconciled below.
            let gap = (try MirrorState.meta(db, .historyGap), try MirrorState.meta(db, .historyGapReason))
            let regenerated = try tracker.migrate(force: true)
            try MirrorState.setMeta(db, .historyGap, gap.0)
            try MirrorState.setMeta(db, .historyGapReason, gap.1)
            report.tables = regenerated.tables
            log("triggers: regenerated for \(regenerated.tables.count) table(s)")
            let after = try Mirror.entityMaps(db)
            let synced = try MirrorState.meta(db, .baselineContainer) != nil
            // A record map made before its bases were fingerprints is converted first (the comparison below reads
            // fingerprints), with the values of columns the file dropped kept in `extra`.
            if synced { try MirrorState.hashBases(db) }
            // Parents first: a child's fields name its parent by record name, which the parent's pass may move.
            for e in EntityMap.parentFirst(after) {
                guard let old = before.first(where: { $0.name == e.name }) else { continue }
                report.keptRecordNames += try Self.keepRecordNames(db, old: old, new: e)
                if synced { try Self.recordUnseenChanges(db, e, tx: tx, report: &report) }
            }
            try MirrorState.setMeta(db, .schemaVersion, String(version))
            try MirrorState.setMeta(db, .schemaVersionSHA256, report.sha256)
            try MirrorState.setMeta(db, .schemaVersionAt, String(HistoryTracker.nowMilliseconds()))
            // A file that changed values is a data migration: the zone learns its version at the next sync, which
            // raises it or finds it there (`SchemaGate`). One that changed none (a column dropped, a table rebuilt
            // as it was) leaves the other devices' values as valid as before.
            if try db.scalar("SELECT EXISTS (SELECT 1 FROM _storectl_history WHERE tx = ?)", [tx])?.int64 == 1
                || Self.valuesDiffer(valuesBefore, try Self.valuesDigest(db, after))
            {
                try SchemaGate.recordDataMigration(db, ZoneSchemaVersion(
                    version: version, sha256: report.sha256, file: configValue(forPath: path)))
                report.dataMigration = true
            }
            if trial { throw SchemaTrialRollback() }
            Failpoint.hit("schema.before-commit")
        }
    }

    /// A store in cloud mode first takes in what its zone holds (one sync round), so that the migration transforms
    /// every record other devices saved at the old version: the zone's schema version can then be raised by this
    /// store (`SchemaGate`). When the cloud cannot be reached (offline), or the zone is at the new version already
    /// (another device migrated first), the migration runs on what the store has.
    private func syncBeforeDataMigration(log: (String) -> Void) throws {
        guard try storeMode() == .cloud else { return }
        do {
            let round = try sync(SyncOptions())
            log("sync: took in what zone '\(settings.cloud?.zone ?? "")' holds before the migration ("
                + "\(round.imported.applied) record(s) in, \(round.exported.saved) saved)")
        } catch {
            let why = (error as? any DiagnosedError)?.summary ?? "\(error)"
            log("sync: not done before the migration (\(why)); the migration runs on what this store has")
        }
    }

    /// What a schema file may do: anything to the user's tables, but no transaction control, no ATTACH, no pragma
    /// that sets something, nothing to storectl's own tables and triggers (the history triggers still write
    /// history as the file changes tracked tables).
    static func schemaFileRule(_ r: AuthorizerRequest) -> String? {
        // DDL writes sqlite_master itself: that is the DDL's own request, judged as `.schema`.
        let own = { (name: String?) in name.map { $0.lowercased().hasPrefix(StoreFormat.triggerPrefix) } ?? false }
        switch r.kind {
        case .transaction:
            return "the file controls the transaction (BEGIN, COMMIT, ROLLBACK or END), but migrate --sql runs it in "
                + "one transaction of its own: remove those statements"
        case .attach:
            return "the file attaches or detaches a database, which migrate --sql does not allow"
        case .pragma where r.pragmaValue != nil && r.trigger == nil:
            return "the file sets PRAGMA \(r.pragma ?? "?"); migrate --sql runs with foreign keys off and checks "
                + "them before the commit, and allows no other pragma to be set"
        case .write where r.trigger == nil && own(r.table):
            return "the file writes storectl's own table \(r.table ?? "?")"
        // Only storectl's own triggers (history, fences) write its tables; a trigger or view of the file's never.
        case .write where own(r.table) && !own(r.trigger):
            return "the trigger \(r.trigger ?? "?") writes storectl's own table \(r.table ?? "?")"
        case .schema where r.creates && own(r.object):
            return "the file creates \(r.object ?? "?"), a name storectl keeps for its own objects "
                + "(prefix \(StoreFormat.triggerPrefix)): choose another name"
        // The history triggers of a user table go with it when it is dropped (and come back, regenerated): only
        // storectl's own tables (and their indexes) are refused.
        case .schema where r.trigger == nil && own(r.table):
            return "the file changes storectl's own \(r.object ?? r.table ?? "?")"
        default:
            return nil
        }
    }

    /// Runs a schema file under `schemaFileRule`, inside the migration's transaction, then refuses what the
    /// authorizer cannot see while the file runs: a trigger it created (TEMP or not, on a table or on a view) whose
    /// body writes storectl's own tables, which would run later; and a synced table it renamed or dropped, whose
    /// records would stay live in the cloud. The TEMP objects the file created are dropped: none outlives it.
    /// - Throws: `StoreError` 65 naming the object, 75 when the store moved meanwhile; `AuthorizerRefusal`,
    ///   `SQLiteError` from the file.
    static func runSchemaFile(_ db: Connection, _ sql: String, path: String, store: String, synced: [EntityMap])
        throws
    {
        try refuseMovedStore(db, store: store, path: path)
        let before = try schemaObjects(db)
        let roots = try rootPages(db, synced.map(\.name))
        // "ALTER TABLE DROP COLUMN ... fails if the column is used ... in a trigger": the history triggers name
        // every column. They are dropped here and made again for the new shape once the file ran.
        let dropping = tablesDroppingColumns(sql)
        if dropping != [] { try dropHistoryTriggers(db, tables: dropping) }
        do {
            try db.withAuthorizer(Self.schemaFileRule) { try db.execute(sql) }
        } catch let error as SQLiteError where error.isBusy || error.isStoreMoved {
            throw StoreError(.tempFail, "store '\(store)' is busy or moved while \(path) ran: \(error.message)",
                             hint: "run 'storectl --store \(store) migrate --sql \(path)' again; nothing was changed")
        }
        let after = try schemaObjects(db)
        // A name storectl keeps for its own objects, reached by a rename (CREATE is refused as it runs): the next
        // storectl command would take the user's table for its own.
        if let taken = after.first(where: { object in
            object.name.lowercased().hasPrefix(StoreFormat.triggerPrefix)
                && !before.contains(where: { $0.schema == object.schema && $0.name == object.name })
        }) {
            throw StoreError(.dataError, "\(path) names the \(taken.type) \(taken.name) with the prefix storectl keeps "
                             + "for its own objects (\(StoreFormat.triggerPrefix))",
                             hint: "choose another name; nothing was changed")
        }
        // A synced table renamed away while a table of its name is made again (its table now under another name):
        // its rows would leave the table and every one be exported as deleted. (Renamed away and not made again,
        // the table is gone: `refuseLostSyncedTables` says so.)
        for (table, root) in roots where try db.tableExists(table) {
            let moved = try db.scalar("""
                SELECT name FROM main.sqlite_master WHERE type = 'table' AND rootpage = ? AND name <> ? COLLATE NOCASE
                """, [root, table])?.string
            if let moved, !before.contains(where: { $0.schema == "main" && $0.type == "table" && $0.name == moved }) {
                throw StoreError(.dataError, "\(path) renames the synced table \(table) to \(moved): its rows would "
                                 + "leave it and be exported as deleted on every device",
                                 hint: "keep the name: build the new shape as \(table)_new, copy the rows, DROP TABLE "
                                    + "\(table), then ALTER TABLE \(table)_new RENAME TO \(table); nothing was changed")
            }
        }
        for object in after where object.type == "trigger" && !before.contains(object) {
            guard !object.name.lowercased().hasPrefix(StoreFormat.triggerPrefix),
                  writesOwnTables(object.sql) else { continue }
            let temp = object.schema == "temp" ? "TEMP " : ""
            throw StoreError(.dataError, "\(path): the \(temp)trigger \(object.name) on \(object.table) writes "
                             + "storectl's own tables (\(StoreFormat.triggerPrefix)...) when it fires",
                             hint: "remove the trigger from the file; nothing was changed")
        }
        try refuseLostSyncedTables(db, path: path, synced: synced)
        // TEMP objects the file made go now, triggers and views first: nothing TEMP outlives the file.
        for object in after.sorted(by: { $0.dropOrder < $1.dropOrder })
        where object.schema == "temp" && !before.contains(object) && object.type != "index" {
            try db.execute("DROP \(object.type.uppercased()) IF EXISTS temp.\(quoteIdentifier(object.name))")
        }
        db.clearStatementCache()
    }

    /// A table, index, trigger or view of the main or temp schema.
    struct SchemaObject: Equatable {
        var schema: String
        var type: String
        var name: String
        var table: String
        var sql: String
        var dropOrder: Int { ["trigger": 0, "view": 1, "table": 2][type] ?? 3 }
    }

    /// Every object of the main and temp schemas, with its SQL.
    static func schemaObjects(_ db: Connection) throws -> [SchemaObject] {
        try db.query("""
            SELECT 'main', type, name, tbl_name, coalesce(sql, '') FROM main.sqlite_master
            UNION ALL SELECT 'temp', type, name, tbl_name, coalesce(sql, '') FROM temp.sqlite_master
            """).map { row in
            SchemaObject(schema: row[0].string ?? "", type: row[1].string ?? "", name: row[2].string ?? "",
                         table: row[3].string ?? "", sql: row[4].string ?? "")
        }
    }

    /// The root page of each of `tables` (a table renamed keeps it).
    static func rootPages(_ db: Connection, _ tables: [String]) throws -> [(String, Int64)] {
        try tables.compactMap { table in
            try db.scalar("SELECT rootpage FROM main.sqlite_master WHERE type = 'table' AND name = ?", [table])?
                .int64.map { (table, $0) }
        }
    }

    /// Whether a trigger's SQL names one of storectl's tables anywhere in its body (quoted or not, any case). The
    /// check is on the text, so a comment naming one is refused too: a trigger of the user's never needs to.
    static func writesOwnTables(_ triggerSQL: String) -> Bool {
        guard let begin = triggerSQL.lowercased().firstRange(of: "begin") else { return true }
        return triggerSQL.lowercased()[begin.upperBound...].contains(StoreFormat.triggerPrefix)
    }

    /// The tables (lowercased) an `ALTER TABLE ... DROP [COLUMN]` of the file names: [] when there is none, nil
    /// when one names its table in a way this simple reading cannot tell (quoted with spaces, say): all of them.
    static func tablesDroppingColumns(_ sql: String) -> [String]? {
        var tables: [String] = []
        let lines: [String] = sql.lowercased().split(separator: "\n", omittingEmptySubsequences: false).map { line in
            guard let comment = line.firstRange(of: "--") else { return String(line) }
            return String(line[..<comment.lowerBound])
        }
        let code: String = lines.joined(separator: "\n")
        for statement in code.split(separator: ";") {
            let words = statement.split(whereSeparator: { !($0.isLetter || $0.isNumber || $0 == "_" || $0 == ".") })
            guard words.count >= 4, words[0] == "alter", words[1] == "table",
                  let drop = words.firstIndex(of: "drop")
            else { continue }
            let name = words[2..<drop].joined(separator: " ")
            let unqualified = name.hasPrefix("main.") ? String(name.dropFirst("main.".count)) : name
            guard drop == 3, !unqualified.contains(".") else { return nil }
            tables.append(unqualified)
        }
        return tables
    }

    /// Drops the history triggers of `tables` (lowercased; nil: every table). They are made again after the file
    /// ran, in the same transaction. A moved store's fence is not a history trigger and stays.
    static func dropHistoryTriggers(_ db: Connection, tables: [String]?) throws {
        let rows = try db.query("""
            SELECT name, lower(tbl_name) FROM main.sqlite_master
            WHERE type = 'trigger' AND name LIKE '\\_storectl\\_%' ESCAPE '\\'
              AND name NOT LIKE '\\_storectl\\_moved\\_%' ESCAPE '\\'
              AND tbl_name NOT LIKE '\\_storectl\\_%' ESCAPE '\\'
            """)
        let known = Set(rows.compactMap { $0[1].string })
        // A name the file spells in a way not read here: every table's triggers, rather than a refused DROP COLUMN.
        let chosen = tables.map { names in names.allSatisfy { known.contains($0) } ? Set(names) : known } ?? known
        for row in rows {
            guard let name = row[0].string, let table = row[1].string, chosen.contains(table) else { continue }
            try db.execute("DROP TRIGGER main.\(quoteIdentifier(name))")
        }
    }

    /// Refuses a migration of a store whose file was moved (`migrate --to`) after the command opened it: a retry
    /// opens the new path.
    static func refuseMovedStore(_ db: Connection, store: String, path: String) throws {
        guard let target = try StoreMeta.value(db, .movedTo) else { return }
        throw StoreError(.tempFail, "store '\(store)' moved to \(target) while this command started",
                         hint: "run 'storectl --store \(store) migrate --sql \(path)' again (config.yaml names the new "
                            + "path); nothing was changed")
    }

    /// Refuses a file that leaves a synced table gone (renamed, or dropped and not made again): the table's
    /// records would stay live in the cloud, and every other device would keep its rows.
    static func refuseLostSyncedTables(_ db: Connection, path: String, synced: [EntityMap]) throws {
        for e in synced where !(try db.tableExists(e.name)) {
            let live = try db.scalar("SELECT count(*) FROM _storectl_records WHERE entity = ? AND deleted = 0",
                                     [e.name])?.int64 ?? 0
            guard live > 0 else { continue }
            throw StoreError(.dataError, "\(path) renames or drops the synced table \(e.name): its \(live) "
                             + "record(s) would stay live in the cloud and on every other device",
                             hint: "keep the name: build the new shape as \(e.name)_new, copy the rows, "
                                + "DROP TABLE \(e.name), then ALTER TABLE \(e.name)_new RENAME TO \(e.name); to remove "
                                + "the rows everywhere, delete them and sync first; nothing was changed")
        }
    }

    /// Keeps, before the file runs, every synced row as the exporter encodes it (`temp._storectl_before`).
    static func snapshotSyncedRows(_ db: Connection, entities: [EntityMap]) throws {
        try db.execute("""
            DROP TABLE IF EXISTS temp._storectl_before;
            CREATE TEMP TABLE _storectl_before(entity TEXT, pk TEXT, record_name TEXT, fields TEXT);
            """)
        for e in entities {
            try db.run("""
                INSERT INTO temp._storectl_before SELECT ?, l.pk, l.record_name, l.fields FROM (\(e.localRecordsSQL)) l
                WHERE EXISTS (SELECT 1 FROM _storectl_records r WHERE r.entity = ? AND r.pk = l.pk AND r.deleted = 0)
                """, [e.name, e.name])
        }
    }

    /// Gives every synced row of a rebuilt table the record name of the row it was copied from, whatever key it
    /// has now: a copy may give rows new keys (rowids given again in another order), and a key that is still there
    /// may now hold another row. Rows are matched, one to one, by their fields; then by their values as text over
    /// the columns both shapes of the table have (a column whose type changed); what is left is matched by key (a
    /// row the file edited in place). A synced row that matched nothing is gone: its record name moves to a key
    /// no row has, so that its deletion is exported. Returns how many rows kept their names under another key.
    static func keepRecordNames(_ db: Connection, old: EntityMap, new e: EntityMap) throws -> Int {
        let common = old.fieldColumns.filter { e.fieldColumns.contains($0) }
        let keys = "(" + (common.isEmpty ? "NULL" : common.map { quoteLiteral($0) }.joined(separator: ", ")) + ")"
        let loose = { (fields: String) in
            "(SELECT group_concat(key || char(31) || coalesce(CAST(atom AS TEXT), json(value), char(0)), char(30)) "
                + "FROM (SELECT key, atom, value FROM json_each(\(fields)) WHERE key IN \(keys) ORDER BY key))"
        }
        try db.execute("""
            DROP TABLE IF EXISTS temp._storectl_was; DROP TABLE IF EXISTS temp._storectl_is;
            DROP TABLE IF EXISTS temp._storectl_pairs;
            CREATE TEMP TABLE _storectl_was(pk TEXT PRIMARY KEY, fields TEXT, loose TEXT);
            CREATE TEMP TABLE _storectl_is(pk TEXT PRIMARY KEY, fields TEXT, loose TEXT);
            CREATE TEMP TABLE _storectl_pairs(old_pk TEXT PRIMARY KEY, new_pk TEXT UNIQUE);
            """)
        defer {
            try? db.execute("""
                DROP TABLE IF EXISTS temp._storectl_was; DROP TABLE IF EXISTS temp._storectl_is;
                DROP TABLE IF EXISTS temp._storectl_pairs;
                """)
        }
        try db.run("""
            INSERT INTO temp._storectl_was SELECT pk, fields, \(loose("fields")) FROM temp._storectl_before
            WHERE entity = ?
            """, [e.name])
        guard try db.scalar("SELECT count(*) FROM temp._storectl_was")?.int64 ?? 0 > 0 else { return 0 }
        try db.execute("""
            INSERT INTO temp._storectl_is SELECT l.pk, l.fields, \(loose("l.fields")) FROM (\(e.localRecordsSQL)) l
            """)
        // The common case, a copy that kept every key: each synced row is where it was, with its values (as text).
        let moved = try db.scalar("""
            SELECT EXISTS (SELECT 1 FROM temp._storectl_was w LEFT JOIN temp._storectl_is i ON i.pk = w.pk
                           WHERE i.pk IS NULL OR (i.fields IS NOT w.fields AND i.loose IS NOT w.loose))
            """)?.int64 == 1
        guard moved else { return 0 }
        // One to one, by fields, then by values as text; among equals, in key order.
        for column in ["fields", "loose"] {
            // Numbered within each group of equal values, then joined through an index: linear in the rows.
            try db.execute("""
                DROP TABLE IF EXISTS temp._storectl_v; DROP TABLE IF EXISTS temp._storectl_n;
                CREATE TEMP TABLE _storectl_v AS
                    SELECT pk, \(column) AS c, row_number() OVER (PARTITION BY \(column) ORDER BY pk) AS k
                    FROM temp._storectl_was WHERE \(column) IS NOT NULL
                      AND pk NOT IN (SELECT old_pk FROM temp._storectl_pairs);
                CREATE TEMP TABLE _storectl_n AS
                    SELECT pk, \(column) AS c, row_number() OVER (PARTITION BY \(column) ORDER BY pk) AS k
                    FROM temp._storectl_is WHERE \(column) IS NOT NULL
                      AND pk NOT IN (SELECT new_pk FROM temp._storectl_pairs);
                CREATE INDEX temp._storectl_n_ck ON _storectl_n(c, k);
                INSERT INTO temp._storectl_pairs(old_pk, new_pk)
                    SELECT v.pk, n.pk FROM temp._storectl_v v JOIN temp._storectl_n n ON n.c = v.c AND n.k = v.k;
                DROP TABLE temp._storectl_v; DROP TABLE temp._storectl_n;
                """)
        }
        // Then by key: a row the file edited where it is.
        try db.execute("""
            INSERT INTO temp._storectl_pairs(old_pk, new_pk)
            SELECT w.pk, w.pk FROM temp._storectl_was w JOIN temp._storectl_is i ON i.pk = w.pk
            WHERE w.pk NOT IN (SELECT old_pk FROM temp._storectl_pairs)
              AND i.pk NOT IN (SELECT new_pk FROM temp._storectl_pairs)
            """)
        let kept = Int(try db.scalar("SELECT count(*) FROM temp._storectl_pairs WHERE old_pk <> new_pk")?.int64 ?? 0)
        guard kept > 0 else { return 0 }
        // Rewrite the record map in one go (the keys may be a permutation).
        try RecordMap(db).rekey(entity: e.name, pairs: "temp._storectl_pairs", was: "temp._storectl_was")
        return kept
    }

    /// Records in history, for the next export, what the file changed where no trigger saw it (a table copy):
    /// rows whose values differ from what their record last held, rows that are new, synced rows that are gone.
    /// Rows the triggers recorded since the last export are left to them.
    static func recordUnseenChanges(_ db: Connection, _ e: EntityMap, tx: Int64, report: inout SchemaMigrationReport)
        throws
    {
        let token = try MirrorState.exportToken(db)
        let author = schemaMigrationAuthor
        let seen = """
            EXISTS (SELECT 1 FROM _storectl_history h WHERE h.entity = ?1 AND h.pk = %PK% AND h.seq > \(token)
                    AND h.author <> \(quoteLiteral(MirrorState.importAuthor)))
            """
        let insert = """
            INSERT INTO _storectl_history(tx, author, ts, entity, pk, op, changed, tombstone)
            VALUES (?, ?, \(StoreFormat.nowMillisecondsSQL), ?, ?, ?, ?, ?)
            """
        // Changed values: the row differs from its record map base (`FieldHashes`), in a value both hold (a key only the record
        // has, a column another device added first, or only the row has, a column just added, is no change of
        // this row's values). One statement for the whole table.
        let changed = """
            (SELECT json_group_array(f.key) FROM json_each(l.fields) f
             WHERE storectl_base_has(r.base, json_quote(f.key),
                                     \(FieldHashes.canonicalSQL(type: "f.type", value: "f.value"))) = 0)
            """
        try db.run("""
            INSERT INTO _storectl_history(tx, author, ts, entity, pk, op, changed, tombstone)
            SELECT ?2, ?3, \(StoreFormat.nowMillisecondsSQL), ?1, pk, 'U', changed, NULL FROM (
                SELECT l.pk AS pk, \(changed) AS changed FROM (\(e.localRecordsSQL)) l
                JOIN _storectl_records r ON r.entity = ?1 AND r.pk = l.pk
                WHERE r.deleted = 0 AND typeof(r.base) = 'blob'
                  AND NOT \(seen.replacingText("%PK%", with: "l.pk")))
            WHERE changed <> '[]'
            """, [e.name, tx, author])
        report.changedRows += db.changes
        // New rows.
        for row in try db.query("""
            SELECT l.pk FROM (\(e.localRecordsSQL)) l
            WHERE NOT EXISTS (SELECT 1 FROM _storectl_records r WHERE r.entity = ?1 AND r.pk = l.pk)
              AND NOT \(seen.replacingText("%PK%", with: "l.pk"))
            """, [e.name])
        {
            guard let pk = row[0].string else { continue }
            try db.run(insert, [tx, author, e.name, pk, "I", Value.null, Value.null])
            report.newRows += 1
        }
        // Synced rows that are gone.
        for row in try db.query("""
            SELECT r.pk FROM _storectl_records r WHERE r.entity = ?1 AND r.deleted = 0 AND r.change_tag IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM main.\(quoteIdentifier(e.name)) t WHERE \(pkMatches(e, "t", "r.pk")))
              AND NOT \(seen.replacingText("%PK%", with: "r.pk"))
            """, [e.name])
        {
            guard let pk = row[0].string else { continue }
            try db.run(insert, [tx, author, e.name, pk, "D", Value.null, "{}"])
            report.removedRows += 1
        }
    }

    /// `t."a" = json_extract(pk, '$[0]') AND ...`.
    static func pkMatches(_ e: EntityMap, _ alias: String, _ json: String) -> String {
        e.primaryKey.enumerated().map { i, c in "\(alias).\(quoteIdentifier(c)) = json_extract(\(json), '$[\(i)]')" }
            .joined(separator: " AND ")
    }
}
