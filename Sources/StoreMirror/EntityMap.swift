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
    /// The table's foreign keys to tracked tables, with the referenced columns spelled out.
    public var foreignKeys: [ForeignKeyInfo] = []
    /// The column sets of the table's UNIQUE constraints and unique indexes other than the primary key (plain
    /// columns, not partial): the cloud has no unique constraints, so a record that would break one is merged with
    /// the local row that holds the value, like a `unique:` key.
    public var uniqueKeys: [[String]] = []
    /// The UNIQUE keys of `uniqueKeys` whose values can be equal with different bytes: a collation other than
    /// BINARY (`COLLATE NOCASE`), or a column without affinity (the integer 2 and the real 2.0).
    public var looseUniqueKeys: [[String]] = []
    /// For each key of `uniqueKeys`, the collation its index compares each column with (`pragma_index_xinfo`):
    /// the column's own, or the one the index names (`CREATE UNIQUE INDEX ... (email COLLATE NOCASE)` on a column
    /// without one).
    public var uniqueCollations: [[String]: [String]] = [:]
    /// The table's UNIQUE keys with its `unique:` rule, if it has one: the keys the merge policies decide whole.
    func uniqueKeys(with rule: UniqueRule?) -> [[String]] { uniqueKeys + (rule.map { [$0.columns] } ?? []) }
    /// What the merge policies decide whole (`MergePolicy.decide`, `uniqueKeys`): the UNIQUE keys with the `unique:`
    /// rule, and the columns of each foreign key. A reference names another row, by a value that moves as a UNIQUE
    /// value does (a rename of the parent's UNIQUE column, a parent inserted again at its rowid under a new record
    /// name, a merged duplicate): a reference only one side changed is that side's, since the other side's may name
    /// a row that is no longer there (a child that followed its parent's rename here, `ON UPDATE CASCADE`, is not
    /// put back on the old value by a row-level `server-wins`; a row-level `local-wins` follows another store's
    /// re-point of a child it edited, instead of keeping it on its parent's deleted record).
    /// A reference that shares a column with a UNIQUE key (`UNIQUE(list, pos)`, `list` a reference) is left to that
    /// key's rule, as before: the key is decided whole, and a reference decided on its own would drag it along.
    func mergeKeys(with rule: UniqueRule?) -> [Set<String>] {
        let unique = uniqueKeys(with: rule).map(Set.init)
        return unique + foreignKeys.compactMap { fk in
            let columns = Set(fk.columns)
            return columns.isEmpty || unique.contains(where: { !$0.isDisjoint(with: columns) }) ? nil : columns
        }
    }
    /// The columns declared NOT NULL.
    public var notNullColumns: Set<String> = []
    /// Whether the table was declared WITHOUT ROWID (its key columns are then never NULL).
    public var withoutRowID = false

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
        let surrogate = try isRowIDAlias(db, table: table)
        var refs: [Reference] = []
        var parents: [String] = []
        var keys: [ForeignKeyInfo] = []
        for var fk in try db.foreignKeys(of: table) where tracked.contains(fk.parentTable) {
            if !parents.contains(fk.parentTable) && fk.parentTable != table { parents.append(fk.parentTable) }
            let parentPK = try db.columns(of: fk.parentTable).filter { $0.primaryKeyIndex > 0 }
                .sorted { $0.primaryKeyIndex < $1.primaryKeyIndex }
            // "If the parent key columns are not specified, the primary key columns of the parent table are used."
            if fk.parentColumns.allSatisfy({ $0 == nil }), parentPK.count == fk.columns.count {
                fk.parentColumns = parentPK.map(\.name)
            }
            keys.append(fk)
            guard fk.columns.count == 1 else { continue }
            let target = fk.parentColumns.first ?? nil
            if try isRowIDAlias(db, table: fk.parentTable), target == nil || target == parentPK.first?.name {
                refs.append(Reference(column: fk.columns[0], parent: fk.parentTable))
            }
        }
        let (unique, loose, collations) = try uniqueKeys(db, table: table, primaryKey: pk.map(\.name), columns: info)
        let storeID = try StoreMeta.value(db, .storeID) ?? ""
        var map = EntityMap(name: table, columns: info.map(\.name), declaredTypes: info.map(\.declaredType),
                            primaryKey: pk.map(\.name), isSurrogate: surrogate, references: refs, parents: parents,
                            namePrefix: String(storeID.filter(\.isHexDigit).prefix(16)))
        map.foreignKeys = keys
        map.uniqueKeys = unique
        map.looseUniqueKeys = loose
        map.uniqueCollations = collations
        map.notNullColumns = Set(info.filter(\.notNull).map(\.name))
        map.withoutRowID = try db.scalar("SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?",
                                         [table])?.int64 == 1
        return map
    }

    /// The column sets of `table`'s UNIQUE constraints and plain unique indexes other than the primary key, and
    /// those of them whose values can be equal with other bytes (`looseUniqueKeys`).
    private static func uniqueKeys(_ db: Connection, table: String, primaryKey: [String], columns info: [ColumnInfo])
        throws -> ([[String]], [[String]], [[String]: [String]])
    {
        var unique: [[String]] = []
        var loose: [[String]] = []
        var collations: [[String]: [String]] = [:]
        for index in try db.query("""
            SELECT name FROM pragma_index_list(?) WHERE "unique" = 1 AND origin <> 'pk' AND partial = 0
            """, [table]) {
            guard let name = index[0].string else { continue }
            let parts = try db.query("SELECT cid, name, coll FROM pragma_index_xinfo(?) WHERE key = 1 ORDER BY seqno",
                                     [name])
            // An index on an expression has a part with cid -2: its values are not columns that travel.
            guard !parts.isEmpty, parts.allSatisfy({ ($0[0].int64 ?? -1) >= 0 }) else { continue }
            let columns = parts.compactMap { $0[1].string }
            if columns.sorted() != primaryKey.sorted() && !unique.contains(columns) {
                unique.append(columns)
                collations[columns] = parts.map { ($0[2].string ?? "BINARY").uppercased() }
                // Equal under the index's collation, or as numbers in a column without affinity (2 and 2.0).
                let affinityless = columns.contains { column in
                    let declared = info.first { $0.name == column }?.declaredType.uppercased() ?? ""
                    return !declared.contains("INT") && !declared.contains("CHAR") && !declared.contains("CLOB")
                        && !declared.contains("TEXT") && !declared.contains("REA") && !declared.contains("FLOA")
                        && !declared.contains("DOUB") && (declared.contains("BLOB") || declared.isEmpty)
                }
                if affinityless || parts.contains(where: { ($0[2].string ?? "BINARY").uppercased() != "BINARY" }) {
                    loose.append(columns)
                }
            }
        }
        return (unique, loose, collations)
    }

    /// SQL that is true when `lhs` (a column of the table, or an expression) equals `rhs` as the index of UNIQUE
    /// key `key` compares column `column`: under the index's collation, which a plain `=` on the column does not
    /// follow when the index names another one than the column's. (A collation SQLite does not build in is left to
    /// the column's.)
    func uniqueEquals(_ key: [String], column: String, _ lhs: String, _ rhs: String) -> String {
        guard let i = key.firstIndex(of: column), let collation = uniqueCollations[key]?[i],
              ["BINARY", "NOCASE", "RTRIM"].contains(collation) else { return "\(lhs) = \(rhs)" }
        return "\(lhs) = \(rhs) COLLATE \(collation)"
    }

    /// `value` as the index of UNIQUE key `key` compares column `column`, made byte for byte comparable: the
    /// text folded to lower case under NOCASE (SQLite folds ASCII only, as `lower` does), trailing spaces dropped
    /// under RTRIM.
    func uniqueComparable(_ key: [String], column: String, _ value: String) -> String {
        guard let i = key.firstIndex(of: column), let collation = uniqueCollations[key]?[i] else { return value }
        switch collation {
        case "NOCASE": return "CASE WHEN typeof(\(value)) = 'text' THEN lower(\(value)) ELSE \(value) END"
        case "RTRIM": return "CASE WHEN typeof(\(value)) = 'text' THEN rtrim(\(value), ' ') ELSE \(value) END"
        default: return value
        }
    }

    /// Whether `table`'s primary key is an alias of the rowid: a single column declared exactly `INTEGER`, in a
    /// table with rowids, that needs no index of its own (`INTEGER PRIMARY KEY DESC` is not an alias: SQLite gives
    /// it an index, and its values are the user's own).
    public static func isRowIDAlias(_ db: Connection, table: String) throws -> Bool {
        let pk = try db.columns(of: table).filter { $0.primaryKeyIndex > 0 }
        guard pk.count == 1, pk[0].declaredType.uppercased() == "INTEGER" else { return false }
        let rowless = try db.scalar("SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?", [table])?
            .int64 == 1
        if rowless { return false }
        return try db.scalar("SELECT count(*) FROM pragma_index_list(?) WHERE origin = 'pk'", [table])?.int64 == 0
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

    /// Whether a foreign key of the table references the table itself (a tree of folders), by its rowid or by a
    /// natural key.
    var referencesItself: Bool { foreignKeys.contains { $0.parentTable == name } }

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

    /// The field columns as a JSON array (what the last export sent, kept in meta `columns:<table>`).
    func fieldColumnsJSON(_ db: Connection) throws -> String {
        guard !fieldColumns.isEmpty else { return "[]" }
        return try db.scalar("SELECT json_array(\(fieldColumns.indices.map { "?\($0 + 1)" }.joined(separator: ", ")))",
                             fieldColumns)?.string ?? "[]"
    }

    /// Every column of the row aliased `alias`, as a JSON object (keys as the triggers write them).
    func rowJSON(_ alias: String) -> String {
        "json_object(" + columns.map { "\(quoteLiteral($0)), \(Self.jsonValue("\(alias).\(quoteIdentifier($0))"))" }
            .joined(separator: ", ") + ")"
    }

    /// The record fields JSON of the row aliased `alias`, with the fields of the last synced record that the table
    /// lacks (`extra` is the SQL of the record map's `extra` column) added after the table's own.
    func fieldsJSON(_ alias: String, extra: String) -> String {
        let own = fieldsJSON(alias)
        return "CASE WHEN \(extra) IS NULL THEN \(own) ELSE (SELECT json_group_object(key, "
            + FieldCodec.jsonOf("type", "value") + ") FROM (SELECT key, value, type FROM json_each(\(own)) "
            + "UNION ALL SELECT key, value, type FROM json_each(\(extra)) WHERE key NOT IN "
            + "(SELECT key FROM json_each(\(own))))) END"
    }

    /// The record fields JSON of the row aliased `alias`.
    func fieldsJSON(_ alias: String) -> String {
        "json_object(" + fieldColumns.map { "\(quoteLiteral($0)), \(fieldValue($0, alias))" }.joined(separator: ", ") + ")"
    }

    /// The record map's base (`FieldHashes`) of `fieldsJSON(alias)`, computed from the columns (no JSON to walk):
    /// the same blob as hashing that JSON.
    func fieldsBase(_ alias: String) -> String {
        "storectl_field_hashes_of(" + fieldColumns.map {
            "json_quote(\(quoteLiteral($0))), json_quote(\(fieldValue($0, alias)))"
        }.joined(separator: ", ") + ")"
    }

    /// The base entries (`FieldHashes`) of `columns` of the row aliased `alias`, as `fieldsBase` hashes them; NULL
    /// when one of them is NULL (a NULL never collides).
    func keyBase(_ columns: [String], _ alias: String) -> String {
        let nulls = columns.map { "\(alias).\(quoteIdentifier($0)) IS NULL" }.joined(separator: " OR ")
        return "CASE WHEN \(nulls) THEN NULL ELSE storectl_field_hashes_of(" + columns.map {
            "json_quote(\(quoteLiteral($0))), json_quote(\(fieldValue($0, alias)))"
        }.joined(separator: ", ") + ") END"
    }

    /// One field's value in `fieldsJSON`: SQL, with JSON subtype where it is an object or a real.
    private func fieldValue(_ column: String, _ alias: String) -> String {
        let col = "\(alias).\(quoteIdentifier(column))"
        if let ref = reference(for: column) {
            return "CASE WHEN \(col) IS NULL THEN NULL ELSE json_object('$ref', \(refName(ref, alias))) END"
        }
        return ValueJSON.field(col)
    }

    /// The record name of a natural-keyed row: `entity:` + its key, with references replaced by record names.
    func naturalName(_ alias: String) -> String {
        let parts = primaryKey.map { column -> String in
            if let ref = reference(for: column) { return refName(ref, alias) }
            return Self.jsonValue("\(alias).\(quoteIdentifier(column))")
        }
        return "\(quoteLiteral(name + ":")) || json_array(" + parts.joined(separator: ", ") + ")"
    }

    /// `t."a" IS json_extract(<json>, '$[0]') AND ...`: joins a row to a canonical key. `IS`, because SQLite lets a
    /// primary key that is not a rowid alias hold NULL (`[null]` is then the row's key); it uses the index as `=`
    /// does.
    func pkMatches(_ alias: String, json: String) -> String {
        primaryKey.enumerated().map { i, column in
            if isSurrogate { return "\(alias).\(quoteIdentifier(column)) = json_extract(\(json), '$[\(i)]')" }
            return "\(alias).\(quoteIdentifier(column)) IS \(ValueJSON.keyValue(json, i))"
        }.joined(separator: " AND ")
    }

    var quotedName: String { quoteIdentifier(name) }
}

/// A JSON path to a top-level key, quoted for any key text SQLite's path syntax accepts.
func jsonPath(_ key: String) -> String {
    "$.\"" + key.replacingText("\"", with: "\\\"") + "\""
}
