import StoreSQLite

/// A tracked table as the history layer sees it: its columns, primary key, foreign keys and tombstone columns.
public struct TableSchema: Sendable, Equatable {
    /// The table name, spelled as in the schema.
    public var name: String
    /// Every column, in table order (generated and hidden columns excluded).
    public var columns: [ColumnInfo]
    /// The primary-key columns, in key order.
    public var primaryKey: [String]
    /// The foreign keys the table declares.
    public var foreignKeys: [ForeignKeyInfo]
    /// The columns whose old values a delete records in `tombstone`.
    public var tombstone: [String]
    /// Whether the table was declared `WITHOUT ROWID`.
    public var withoutRowID: Bool
    /// Whether the primary key is an alias of the rowid (`id INTEGER PRIMARY KEY`): its value is always an integer.
    public var keyIsRowID: Bool

    public init(name: String, columns: [ColumnInfo], primaryKey: [String], foreignKeys: [ForeignKeyInfo],
                tombstone: [String], withoutRowID: Bool, keyIsRowID: Bool = false)
    {
        self.keyIsRowID = keyIsRowID
        self.name = name
        self.columns = columns
        self.primaryKey = primaryKey
        self.foreignKeys = foreignKeys
        self.tombstone = tombstone
        self.withoutRowID = withoutRowID
    }

    /// The columns that are not part of the primary key, in table order.
    public var nonKeyColumns: [String] {
        columns.filter { $0.primaryKeyIndex == 0 }.map(\.name)
    }

    /// The column names, in table order.
    public var columnNames: [String] { columns.map(\.name) }

    /// The canonical, order-stable description of the table that the schema hash covers.
    var description: TableDescription {
        TableDescription(
            columns: columns.map { TableDescription.Column(name: $0.name, type: $0.declaredType, pk: $0.primaryKeyIndex) },
            foreignKeys: foreignKeys.map {
                TableDescription.ForeignKey(parent: $0.parentTable, columns: $0.columns,
                                            parentColumns: $0.parentColumns.map { $0 ?? "" })
            },
            tombstone: tombstone)
    }
}

/// What the schema hash covers for one table; stored as JSON in meta `schema` so that drift can be explained.
struct TableDescription: Codable, Equatable {
    struct Column: Codable, Equatable {
        var name: String
        var type: String
        var pk: Int
    }

    struct ForeignKey: Codable, Equatable {
        var parent: String
        var columns: [String]
        var parentColumns: [String]
    }

    var columns: [Column]
    var foreignKeys: [ForeignKey]
    var tombstone: [String]

    /// The lines of the canonical text: every name quoted, so that no name can imitate another line.
    func canonicalLines(table: String) -> [String] {
        var lines = ["table " + quoteIdentifier(table)]
        for c in columns {
            lines.append("column \(quoteIdentifier(c.name)) \(quoteLiteral(c.type)) \(c.pk)")
        }
        for fk in foreignKeys {
            lines.append("foreign-key \(quoteIdentifier(fk.parent)) (\(fk.columns.map(quoteIdentifier).joined(separator: ",")))"
                         + " (\(fk.parentColumns.map(quoteIdentifier).joined(separator: ",")))")
        }
        lines.append("tombstone " + tombstone.map(quoteIdentifier).joined(separator: ","))
        return lines
    }
}

/// The whole canonical description: tracked tables plus the set of user tables.
struct SchemaDescription: Codable, Equatable {
    var tables: [String: TableDescription]
    var userTables: [String]

    enum CodingKeys: String, CodingKey {
        case tables
        case userTables = "user_tables"
    }

    /// The canonical text the hash is computed over.
    var canonicalText: String {
        var lines = ["storectl-schema 1"]
        for name in tables.keys.sorted(by: utf8Less) {
            if let table = tables[name] { lines += table.canonicalLines(table: name) }
        }
        lines.append("user-tables " + userTables.sorted(by: utf8Less).map(quoteIdentifier).joined(separator: ","))
        return lines.joined(separator: "\n")
    }

    /// FNV-1a 64 of the canonical text, as 16 lowercase hex digits.
    var hash: String { fnv1a64Hex(canonicalText) }
}

/// Byte-wise ordering of UTF-8 text, the same on every platform.
func utf8Less(_ a: String, _ b: String) -> Bool {
    a.utf8.lexicographicallyPrecedes(b.utf8)
}

/// FNV-1a 64-bit hash of the UTF-8 bytes of `text`, as 16 lowercase hex digits.
func fnv1a64Hex(_ text: String) -> String {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in text.utf8 {
        hash ^= UInt64(byte)
        hash = hash &* 0x0000_0100_0000_01b3
    }
    let hex = String(hash, radix: 16)
    return String(repeating: "0", count: 16 - hex.count) + hex
}
