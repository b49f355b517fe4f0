import StoreBase
import StoreSQLite

/// One field of a record, decoded.
enum FieldValue: Equatable {
    case value(Value)
    /// A reference to another record by name (nil: the reference was set but its target is unknown).
    case ref(String?)
}

/// Decoding and combining record fields. All JSON work runs in SQLite's JSON functions.
struct FieldCodec {
    let db: Connection

    /// Decodes a fields object into column -> value.
    /// - Throws: `StoreError` (exit 65) when the fields are not a JSON object.
    func decode(_ fields: String) throws -> [String: FieldValue] {
        let statement = try db.cached("""
            SELECT key, value, type,
                   CASE WHEN type = 'object' THEN json_extract(value, '$."$ref"') END,
                   CASE WHEN type = 'object' THEN json_type(value, '$."$ref"') END,
                   CASE WHEN type = 'object' THEN json_extract(value, '$."$blob"') END
            FROM json_each(?1)
            """)
        var result: [String: FieldValue] = [:]
        do {
            try statement.forEach([fields]) { row in
                guard let key = row.string(0) else { return }
                let type = row.string(2) ?? "null"
                if type == "object" {
                    if row.string(4) != nil {
                        result[key] = .ref(row.string(3))
                    } else if let hex = row.string(5), let bytes = Hex.bytes(hex) {
                        result[key] = .value(.blob(bytes))
                    } else {
                        result[key] = .value(.text(row.string(1) ?? ""))
                    }
                } else if type == "true" {
                    result[key] = .value(.integer(1))
                } else if type == "false" {
                    result[key] = .value(.integer(0))
                } else {
                    result[key] = .value(row.column(1))
                }
            }
        } catch let error as SQLiteError {
            throw StoreError(.dataError, "a cloud record has malformed fields: \(error.message)",
                             hint: "the record was not applied; check the container with 'storectl cloud schema'")
        }
        return result
    }

    /// `base` with the values of `columns` taken from `overlay`. Keys are matched with `json_each`, so any
    /// column name works (JSON paths cannot name a key that contains a double quote).
    func overlay(_ base: String, with overlay: String, columns: [String]) throws -> String {
        guard !columns.isEmpty else { return base }
        let placeholders = columns.indices.map { "?\($0 + 1)" }.joined(separator: ", ")
        let columnsJSON = try db.scalar("SELECT json_array(\(placeholders))", columns)?.string ?? "[]"
        return try db.scalar("""
            SELECT json_group_object(b.key,
                CASE WHEN o.key IS NOT NULL THEN (CASE WHEN o.type IN ('object', 'array') THEN json(o.value) ELSE o.value END)
                     ELSE (CASE WHEN b.type IN ('object', 'array') THEN json(b.value) ELSE b.value END) END)
            FROM json_each(?1) b
            LEFT JOIN json_each(?2) o ON o.key = b.key AND o.key IN (SELECT value FROM json_each(?3))
            """, [base, overlay, columnsJSON])?.string ?? base
    }

    /// The columns whose values differ between two fields objects (all of `columns` when `a` is nil).
    func differing(_ a: String?, _ b: String, columns: [String]) throws -> [String] {
        guard let a else { return columns }
        let statement = try db.cached("""
            SELECT (SELECT json_quote(value) FROM json_each(?1) WHERE key = ?3)
                IS NOT (SELECT json_quote(value) FROM json_each(?2) WHERE key = ?3)
            """)
        var result: [String] = []
        for column in columns {
            try statement.bind([a, b, column])
            if try statement.step(), statement.int64(0) == 1 { result.append(column) }
            try statement.reset()
        }
        return result
    }
}
