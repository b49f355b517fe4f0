import StoreBase
import StoreSQLite

/// The result of checking that every tracked table can be mirrored: the analogue of CloudKit's
/// `initializeCloudKitSchema(options: .dryRun)`.
public struct CloudCheckReport: Sendable, Codable, Equatable {
    public struct Entity: Sendable, Codable, Equatable {
        public var name: String
        public var primaryKey: [String]
        /// `surrogate` (an INTEGER PRIMARY KEY: random record names, the key never travels) or `natural`.
        public var keyKind: String
        public var fields: [String]
        /// Foreign-key columns that travel as record references.
        public var references: [String]
        /// Unique constraints of the table, reported as dedup rules (the cloud has no unique constraints).
        public var dedupRules: [[String]]
        public var problems: [String]
        public var warnings: [String]
    }

    public var entities: [Entity]
    public var ok: Bool { entities.allSatisfy { $0.problems.isEmpty } }
    public var problemCount: Int { entities.reduce(0) { $0 + $1.problems.count } }
}

/// Checks the schema fit of a store's tracked tables.
public enum CloudCheck {
    /// Declared types storectl can carry. Anything with an affinity SQLite understands is fine; exotic types are
    /// reported so that users notice them.
    static func typeProblem(_ declared: String) -> String? {
        let t = declared.uppercased()
        if t.isEmpty { return nil }
        let known = ["INT", "CHAR", "CLOB", "TEXT", "BLOB", "REAL", "FLOA", "DOUB", "NUMERIC", "DECIMAL", "BOOLEAN",
                     "DATE", "TIME", "JSON", "UUID", "VARCHAR"]
        return known.contains(where: { t.contains($0) }) ? nil : "unsupported column type '\(declared)'"
    }

    /// The tables storectl keeps in a store; any other table whose name starts with `_storectl_` is a user's.
    static let ownTables: Set<String> = [
        "_storectl_meta", "_storectl_context", "_storectl_history", "_storectl_consumers", "_storectl_tokens",
        "_storectl_records", "_storectl_pending", "_storectl_quarantine", "_storectl_outbox", "_storectl_aliases",
        "_storectl_unsent", "_storectl_renamed", "_storectl_inbox", "_storectl_outgoing",
    ]

    /// Checks `tables` in `db`. With `everyTable` (no `entities:` in the config, so every table is meant to sync),
    /// the tables storectl cannot mirror are problems too: virtual tables (FTS5 and the like keep their rows in
    /// shadow tables), and user tables named with the `_storectl_` prefix storectl reserves.
    /// - Throws: `SQLiteError`.
    public static func run(_ db: Connection, tables: [String], uniqueRules: [String: [String]] = [:],
                           everyTable: Bool = false, encrypted: [String: [String]] = [:]) throws -> CloudCheckReport
    {
        let tracked = Set(tables)
        var result: [CloudCheckReport.Entity] = []
        if everyTable {
            for row in try db.query("SELECT name, type FROM pragma_table_list WHERE schema = 'main' ORDER BY name") {
                guard let name = row[0].string, let type = row[1].string else { continue }
                var problem: String?
                if type == "virtual" {
                    problem = "'\(name)' is a virtual table: its rows live in tables of its module, which storectl "
                        + "cannot track, so it is not synced; list the tables to sync in entities: (leaving "
                        + "'\(name)' out), and rebuild it from them on each device"
                } else if type == "table", name.lowercased().hasPrefix("_storectl_"), !ownTables.contains(name.lowercased()) {
                    problem = "'\(name)' starts with _storectl_, which storectl reserves for its own tables, so it is "
                        + "not synced; rename the table (ALTER TABLE ... RENAME TO ...), then run 'storectl migrate'"
                }
                if let problem {
                    result.append(.init(name: name, primaryKey: [], keyKind: "none", fields: [], references: [],
                                        dedupRules: [], problems: [problem], warnings: []))
                }
            }
        }
        for table in tables {
            var problems: [String] = []
            var warnings: [String] = []
            guard try db.tableExists(table) else {
                result.append(.init(name: table, primaryKey: [], keyKind: "none", fields: [], references: [],
                                    dedupRules: [], problems: ["table '\(table)' does not exist"], warnings: []))
                continue
            }
            let columns = try db.columns(of: table)
            for c in columns {
                if let p = typeProblem(c.declaredType) { problems.append("column '\(c.name)': \(p)") }
            }
            let entity: EntityMap
            do {
                entity = try EntityMap.load(db, table: table, tracked: tracked)
            } catch let error as StoreError {
                problems.append(error.summary)
                result.append(.init(name: table, primaryKey: [], keyKind: "none", fields: columns.map(\.name),
                                    references: [], dedupRules: [], problems: problems, warnings: warnings))
                continue
            }
            for column in entity.primaryKey {
                if let c = columns.first(where: { $0.name == column }), c.declaredType.uppercased().contains("BLOB") {
                    problems.append("primary-key column '\(column)' is a BLOB; record names need text or numbers")
                }
            }
            for fk in try db.foreignKeys(of: table) where !tracked.contains(fk.parentTable) {
                warnings.append("foreign key (\(fk.columns.joined(separator: ", "))) references '\(fk.parentTable)',"
                                + " which is not tracked: the values travel as they are")
            }
            var rules: [[String]] = []
            for index in try db.query("""
                SELECT name, origin, partial FROM pragma_index_list(?) WHERE "unique" = 1
                """, [table]) {
                guard index[1].string != "pk", let name = index[0].string else { continue }
                let info = try db.query("SELECT name, cid FROM pragma_index_info(?) ORDER BY seqno", [name])
                let cols = info.compactMap { $0[0].string }
                let generated = try Set(db.query("SELECT name FROM pragma_table_xinfo(?) WHERE hidden IN (2, 3)",
                                                 [table]).compactMap { $0[0].string })
                if let column = cols.first(where: generated.contains) {
                    problems.append("index '\(name)' is a UNIQUE index on the generated column '\(column)': its values "
                                    + "never travel, so the cloud cannot merge or move them, and records that break it "
                                    + "would be set aside for good; make it a UNIQUE constraint on the columns it is "
                                    + "computed from, or drop it, then run 'storectl migrate'")
                    continue
                }
                // A UNIQUE index storectl cannot treat as a key of the row: two devices' rows that break it cannot be
                // merged, and a value that moves between rows cannot be freed, so a record would be set aside on one
                // store for good while the others call themselves healthy.
                if index[2].int64 == 1 || cols.count != info.count {
                    let what = index[2].int64 == 1 ? "a partial UNIQUE index (with WHERE)" : "a UNIQUE index on an expression"
                    problems.append("index '\(name)' is \(what): the cloud cannot merge or move the values it keeps "
                                    + "apart, so records that break it would be set aside for good; make it a UNIQUE "
                                    + "constraint on columns (CREATE UNIQUE INDEX ... ON \(table)(column, ...)), or drop "
                                    + "it and enforce the rule in the app, then run 'storectl migrate'")
                    continue
                }
                if !cols.isEmpty { rules.append(cols) }
            }
            if let configured = uniqueRules[table], !rules.contains(configured) { rules.append(configured) }
            problems += try encryptionProblems(db, table: table, columns: encrypted[table] ?? [], entity: entity,
                                               rules: rules)
            for rule in rules where uniqueRules[table] != rule {
                warnings.append("unique (\(rule.joined(separator: ", "))) is not enforced by the cloud: declare "
                                + "`entities.\(table).unique: [\(rule.joined(separator: ", "))]` so that duplicates "
                                + "from other devices are merged on import")
            }
            result.append(.init(name: table, primaryKey: entity.primaryKey,
                                keyKind: entity.isSurrogate ? "surrogate" : "natural", fields: entity.fieldColumns,
                                references: entity.references.map { "\($0.column) -> \($0.parent)" },
                                dedupRules: rules, problems: problems, warnings: warnings))
        }
        return CloudCheckReport(entities: result)
    }

    /// The problems `run` reports about `encrypted` alone, each prefixed with its table: what `sync` checks before it
    /// adds a column to the zone's list of encrypted fields (which only grows), so that a misspelt column, or one the
    /// server must read, is refused there as `cloud check` and `mode cloud` refuse it.
    /// - Throws: `SQLiteError`.
    public static func encryptionProblems(_ db: Connection, encrypted: [String: [String]], tracked: Set<String>,
                                          uniqueRules: [String: [String]]) throws -> [String]
    {
        var problems: [String] = []
        for (table, columns) in encrypted.sorted(by: { $0.key < $1.key }) where !columns.isEmpty {
            guard try db.tableExists(table),
                  let entity = try? EntityMap.load(db, table: table, tracked: tracked.union([table]))
            else { continue }  // the tracking check names a table that is missing or cannot be mirrored
            var rules: [[String]] = []
            for index in try db.query("SELECT name FROM pragma_index_list(?) WHERE \"unique\" = 1 AND origin <> 'pk'",
                                      [table]) {
                guard let name = index[0].string else { continue }
                let cols = try db.query("SELECT name FROM pragma_index_info(?) ORDER BY seqno", [name]).compactMap { $0[0].string }
                if !cols.isEmpty { rules.append(cols) }
            }
            if let configured = uniqueRules[table] { rules.append(configured) }
            problems += try encryptionProblems(db, table: table, columns: columns, entity: entity, rules: rules)
                .map { "\(table): \($0)" }
        }
        return problems
    }

    /// What rules out encrypting `columns` of `table`: the server would have to read them (a record's name holds
    /// its key; a reference names another record; a UNIQUE value is compared across devices to merge duplicates).
    static func encryptionProblems(_ db: Connection, table: String, columns: [String], entity: EntityMap,
                                   rules: [[String]]) throws -> [String]
    {
        guard !columns.isEmpty else { return [] }
        let names = Set(try db.columns(of: table).map(\.name))
        let references = Set(try db.foreignKeys(of: table).flatMap(\.columns))
        var problems: [String] = []
        let fix = "remove it from entities.\(table).encrypted"
        for column in columns {
            if !names.contains(column) {
                problems.append("encrypted column '\(column)' is not a column of '\(table)'; \(fix)")
            } else if entity.primaryKey.contains(column) {
                problems.append("encrypted column '\(column)' is part of the primary key of '\(table)', which names "
                                + "its records in the cloud, so the server would read it; \(fix)")
            } else if references.contains(column) {
                problems.append("encrypted column '\(column)' is a foreign key of '\(table)': it travels as a reference "
                                + "to another record, which the server must read; \(fix)")
            } else if let rule = rules.first(where: { $0.contains(column) }) {
                problems.append("encrypted column '\(column)' is UNIQUE in '\(table)' (\(rule.joined(separator: ", "))): "
                                + "unique values are compared across devices to merge duplicates, which ciphertext "
                                + "cannot be; \(fix)")
            }
        }
        return problems
    }
}
