import StoreBase
import StoreHistory
import StoreSQLite

/// How one tracked table maps onto cloud records, and the SQL that moves its rows both ways.
///
/// - A table whose primary key is a single `INTEGER PRIMARY KEY` (a rowid alias) has *surrogate* keys: the same
///   row has different rowids on different stores, so its records get random names and the key never travels.
/// - Any other primary key is *natural*: the record name is derived from the key, so two stores that create the
///   same key create the same record.
/// - A foreign key that points at a surrogate-keyed table travels as `{"$ref": "<record name>"}` and is resolved
///   to the local key on import.
public struct EntityMap: Sendable, Equatable {
    /// A foreign-key column whose value travels as the parent's record name.
    public struct Reference: Sendable, Equatable {
        public var column: String
        public var parent: String
    }

    public var name: String
    public var columns: [String]
    public var declaredTypes: [String]
    /// Primary-key columns, in key order.
    public var primaryKey: [String]
    public var isSurrogate: Bool
    public var references: [Reference]
    /// Tables this one references (for parent-first ordering).
    public var parents: [String]
    /// The start of the record names this device gives its surrogate-keyed rows: 16 hex digits of the store id.
    public var namePrefix: String = ""

    /// The columns that travel in a record's fields.
    public var fieldColumns: [String] { isSurrogate ? columns.filter { $0 != primaryKey[0] } : columns }

    /// Reads the table's shape from the store.
    /// - Throws: `StoreError` (exit 65) when the table has no explicit primary key.
    public static func load(_ db: Connection, table: String, tracked: Set<String>) throws -> EntityMap {
        let info = try db.columns(of: table)
        let pk = info.filter { $0.primaryKeyIndex > 0 }.sorted { $0.primaryKeyIndex < $1.primaryKeyIndex }
        guard !pk.isEmpty else {
            throw StoreError(.dataError, "table '\(table)' has no explicit primary key, so it cannot be mirrored",
                             hint: "add a PRIMARY KEY to '\(table)', or leave it out of `entities:`")
        }
        let sql = try db.scalar("SELECT sql FROM sqlite_master WHERE type='table' AND name=?", [table])?.string ?? ""
        let withoutRowid = sql.uppercased().replacingText(" ", with: "").contains("WITHOUTROWID")
        let surrogate = pk.count == 1 && pk[0].declaredType.uppercased() == "INTEGER" && !withoutRowid
        var refs: [Reference] = []
        var parents: [String] = []
        for fk in try db.foreignKeys(of: table) where tracked.contains(fk.parentTable) {
            if !parents.contains(fk.parentTable) && fk.parentTable != table { parents.append(fk.parentTable) }
            guard fk.columns.count == 1 else { continue }
            let parentInfo = try db.columns(of: fk.parentTable)
            let parentPK = parentInfo.filter { $0.primaryKeyIndex > 0 }
            let parentSQL = try db.scalar("SELECT sql FROM sqlite_master WHERE type='table' AND name=?",
                                          [fk.parentTable])?.string ?? ""
            let parentSurrogate = parentPK.count == 1 && parentPK[0].declaredType.uppercased() == "INTEGER"
                && !parentSQL.uppercased().replacingText(" ", with: "").contains("WITHOUTROWID")
            let target = fk.parentColumns.first ?? nil
            if parentSurrogate && (target == nil || target == parentPK[0].name) {
                refs.append(Reference(column: fk.columns[0], parent: fk.parentTable))
            }
        }
        let storeID = try db.scalar("SELECT value FROM _storectl_meta WHERE key = 'store_id'")?.string ?? ""
        return EntityMap(name: table, columns: info.map(\.name), declaredTypes: info.map(\.declaredType),
                         primaryKey: pk.map(\.name), isSurrogate: surrogate, references: refs, parents: parents,
                         namePrefix: String(storeID.filter(\.isHexDigit).prefix(16)))
    }

    /// Orders entities so that parents come before the tables that reference them.
    public static func parentFirst(_ entities: [EntityMap]) -> [EntityMap] {
        var remaining = entities
        var done: Set<String> = []
        var ordered: [EntityMap] = []
        while !remaining.isEmpty {
            let names = Set(remaining.map(\.name))
            if let i = remaining.firstIndex(where: { e in e.parents.allSatisfy { done.contains($0) || !names.contains($0) } }) {
                let e = remaining.remove(at: i)
                done.insert(e.name)
                ordered.append(e)
            } else {
                // A cycle: take the rest in their order; pending references resolve later.
                ordered += remaining
                remaining = []
            }
        }
        return ordered
    }

    func reference(for column: String) -> Reference? { references.first { $0.column == column } }

    /// Whether every column can be named in a JSON path (SQLite's paths cannot name a key with a double quote).
    var pathSafe: Bool { columns.allSatisfy { !$0.utf8.contains(UInt8(ascii: "\"")) } }

    // MARK: SQL fragments

    /// A key value as JSON, exactly as the history triggers write it (`ValueJSON.key`).
    static func jsonValue(_ expr: String) -> String { ValueJSON.key(expr) }

    /// The canonical primary-key JSON of the row aliased `alias`, exactly as the history triggers write it.
    func pkJSON(_ alias: String) -> String {
        "json_array(" + primaryKey.map { Self.jsonValue("\(alias).\(quoteIdentifier($0))") }.joined(separator: ", ") + ")"
    }

    /// The record name this device gives a surrogate-keyed row that has none yet: the table, the device prefix
    /// and the rowid. It is the same every time it is computed (so a replay after a crash names rows as before), unique
    /// across devices, and increasing, so record maps and containers grow at the end of their indexes.
    func surrogateName(_ keyExpr: String, entity: String? = nil) -> String {
        "printf('%s/%s%012x', \(quoteLiteral(entity ?? name)), \(quoteLiteral(namePrefix)), \(keyExpr))"
    }

    /// The record name of the row aliased `alias`, when the record map has none for it.
    func derivedName(_ alias: String) -> String {
        isSurrogate ? surrogateName("\(alias).\(quoteIdentifier(primaryKey[0]))") : naturalName(alias)
    }

    /// The parent's record name for a reference column: from the record map, else the name this device gives it.
    func refName(_ ref: Reference, _ alias: String) -> String {
        let col = "\(alias).\(quoteIdentifier(ref.column))"
        return "coalesce((SELECT rr.record_name FROM _storectl_records rr WHERE rr.entity = \(quoteLiteral(ref.parent))"
            + " AND rr.pk = json_array(\(col))), \(surrogateName(col, entity: ref.parent)))"
    }

    /// The record fields JSON of the row aliased `alias`.
    func fieldsJSON(_ alias: String) -> String {
        let parts = fieldColumns.map { column -> String in
            let col = "\(alias).\(quoteIdentifier(column))"
            let value: String
            if let ref = reference(for: column) {
                value = "CASE WHEN \(col) IS NULL THEN NULL ELSE json_object('$ref', \(refName(ref, alias))) END"
            } else {
                value = ValueJSON.field(col)
            }
            return "\(quoteLiteral(column)), \(value)"
        }
        return "json_object(" + parts.joined(separator: ", ") + ")"
    }

    /// The record name of a natural-keyed row: `entity:` + its key, with references replaced by record names.
    func naturalName(_ alias: String) -> String {
        let parts = primaryKey.map { column -> String in
            if let ref = reference(for: column) { return refName(ref, alias) }
            return Self.jsonValue("\(alias).\(quoteIdentifier(column))")
        }
        return "\(quoteLiteral(name + ":")) || json_array(" + parts.joined(separator: ", ") + ")"
    }

    /// `t."a" = json_extract(<json>, '$[0]') AND ...`: joins a row to a canonical key.
    func pkMatches(_ alias: String, json: String) -> String {
        primaryKey.enumerated().map { i, column in
            "\(alias).\(quoteIdentifier(column)) = json_extract(\(json), '$[\(i)]')"
        }.joined(separator: " AND ")
    }

    var quotedName: String { quoteIdentifier(name) }
}

/// A JSON path to a top-level key, quoted for any key text SQLite's path syntax accepts.
func jsonPath(_ key: String) -> String {
    "$.\"" + key.replacingText("\"", with: "\\\"") + "\""
}
