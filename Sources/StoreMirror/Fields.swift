import StoreBase
import StoreHistory
import StoreSQLite

/// One field of a record, decoded.
enum FieldValue: Equatable {
    case value(Value)
    /// A reference to another record by name (nil: the reference was set but its target is unknown).
    case ref(String?)
}

/// A record's fields, decoded for one table.
struct DecodedFields {
    /// The fields that are columns of the local table.
    var values: [String: FieldValue]
    /// The fields the local table does not have (yet), as a JSON object text; nil when there are none. They are
    /// kept in the record map and sent along with the row, so that a device with an older schema never drops a
    /// newer device's values, and `storectl migrate` can fill a column added later.
    var extra: String?
    /// The fields whose value is a JSON object or array (not a reference, blob or text): stored as their JSON
    /// text, but never a key.
    var objects: Set<String> = []

    /// The record's values for the key `columns`, in their order; nil when the record leaves one out or holds
    /// NULL for it (a NULL never collides with another row's value).
    func keyValues(_ columns: [String]) -> [Value]? {
        var values: [Value] = []
        for column in columns {
            guard case .value(let v)? = self.values[column], !v.isNull else { return nil }
            values.append(v)
        }
        return values
    }
}

/// Decoding and combining record fields. All JSON work runs in SQLite's JSON functions.
struct FieldCodec {
    let db: Connection

    /// Decodes a fields object into column -> value, split into the table's columns and the rest.
    /// - Throws: `RecordProblem` when the fields are not a JSON object.
    func decodeRecord(_ fields: String, columns: [String]) throws -> DecodedFields {
        let known = Set(columns)
        var values: [String: FieldValue] = [:]
        var unknown = false
        var objects: Set<String> = []
        for (key, value) in try decode(fields, objects: &objects) {
            if known.contains(key) { values[key] = value } else { unknown = true }
        }
        var extra: String?
        if unknown {
            let names = try db.scalar("SELECT json_array(\(columns.indices.map { "?\($0 + 1)" }.joined(separator: ", ")))",
                                      columns)?.string ?? "[]"
            extra = try db.scalar("""
                SELECT json_group_object(key, \(Self.jsonOf("type", "value")))
                FROM json_each(?1) WHERE key NOT IN (SELECT value FROM json_each(?2))
                """, [fields, names])?.string
        }
        return DecodedFields(values: values, extra: extra, objects: objects.intersection(known))
    }

    /// A `json_each` row's value as JSON again: objects and arrays as they are, booleans as booleans, reals with
    /// every digit (`ValueJSON`; SQLite would write 15). It must be evaluated in the same SELECT as the
    /// `json_group_object` it feeds: a JSON value passed up through a subquery arrives as plain text.
    static func jsonOf(_ type: String, _ value: String) -> String {
        "CASE \(type) WHEN 'object' THEN json(\(value)) WHEN 'array' THEN json(\(value)) "
            + "WHEN 'true' THEN json('true') WHEN 'false' THEN json('false') WHEN 'real' THEN \(ValueJSON.real(value)) "
            + "ELSE \(value) END"
    }

    /// Decodes a fields object into column -> value.
    /// - Throws: `RecordProblem` when the fields are not a JSON object.
    func decode(_ fields: String, objects: inout Set<String>) throws -> [String: FieldValue] {
        let check = try db.cached("SELECT json_valid(?1) AND json_type(?1) = 'object'")
        try check.bind([fields])
        let isObject = try check.step() && check.int64(0) == 1
        try check.reset()
        guard isObject else {
            let start = String(fields.prefix(40))
            throw RecordProblem(reason: "its fields are not a JSON object (they start with '\(start)')",
                                hint: "the device that saved it wrote a malformed record; save the row again "
                                    + "from a storectl store, or delete the record in the cloud")
        }
        let statement = try db.cached("""
            SELECT key, value, type,
                   CASE WHEN type = 'object' THEN json_extract(value, '$."$ref"') END,
                   CASE WHEN type = 'object' THEN json_type(value, '$."$ref"') END,
                   CASE WHEN type = 'object' THEN json_extract(value, '$."$blob"') END,
                   CASE WHEN type = 'object' THEN json_extract(value, '$."$text"') END,
                   CASE WHEN type = 'object' THEN json_type(value, '$."$blob"') END,
                   CASE WHEN type = 'object' THEN json_type(value, '$."$text"') END
            FROM json_each(?1)
            """)
        var result: [String: FieldValue] = [:]
        try statement.forEach([fields]) { row in
            guard let key = row.string(0) else { return }
            let type = row.string(2) ?? "null"
            if type == "object" {
                if let refType = row.string(4) {
                    guard refType == "text" || refType == "null" else {
                        throw RecordProblem(reason: "field '\(key)' holds a reference that is not a record name",
                                            hint: "a reference is {\"$ref\": \"RECORD NAME\"}")
                    }
                    result[key] = .ref(row.string(3))
                } else if row.string(7) != nil {
                    guard row.string(7) == "text", let bytes = Hex.bytes(row.string(5) ?? "") else {
                        throw RecordProblem(reason: "field '\(key)' holds a malformed blob (not hex digits)",
                                            hint: "a blob is {\"$blob\": \"HEX DIGITS\"}")
                    }
                    result[key] = .value(.blob(bytes))
                } else if row.string(8) != nil {
                    guard row.string(8) == "text", let bytes = Hex.bytes(row.string(6) ?? "") else {
                        throw RecordProblem(reason: "field '\(key)' holds a malformed text (not hex digits)",
                                            hint: "a text that is not UTF-8 is {\"$text\": \"HEX DIGITS\"}")
                    }
                    result[key] = .value(Value.text(bytes: bytes))
                } else {
                    objects.insert(key)
                    result[key] = .value(.text(row.string(1) ?? ""))
                }
            } else if type == "array" {
                objects.insert(key)
                result[key] = .value(.text(row.string(1) ?? ""))
            } else if type == "true" {
                result[key] = .value(.integer(1))
            } else if type == "false" {
                result[key] = .value(.integer(0))
            } else {
                result[key] = .value(row.column(1))
            }
        }
        return result
    }

    /// Encodes decoded fields back into a fields object (the inverse of `decode`, for the values storectl writes).
    func encode(_ values: [String: FieldValue]) throws -> String {
        var parts: [String] = []
        var args: [Value] = []
        for key in values.keys.sorted() {
            guard let value = values[key] else { continue }
            args.append(.text(key))
            let k = "?\(args.count)"
            switch value {
            case .ref(let name):
                args.append(name.map { .text($0) } ?? .null)
                parts.append("\(k), json_object('$ref', ?\(args.count))")
            case .value(let v):
                args.append(v)
                parts.append("\(k), \(ValueJSON.field("?\(args.count)"))")
            }
        }
        return try db.scalar("SELECT json_object(\(parts.joined(separator: ", ")))", args)?.string ?? "{}"
    }

    /// `base` with the values of `columns` taken from `overlay`. Keys are matched with `json_each`, so any
    /// column name works (JSON paths cannot name a key that contains a double quote).
    func overlay(_ base: String, with overlay: String, columns: [String]) throws -> String {
        guard !columns.isEmpty else { return base }
        let placeholders = columns.indices.map { "?\($0 + 1)" }.joined(separator: ", ")
        let columnsJSON = try db.scalar("SELECT json_array(\(placeholders))", columns)?.string ?? "[]"
        return try db.scalar("""
            SELECT json_group_object(k, \(Self.jsonOf("t", "v"))) FROM (
                SELECT b.key AS k, CASE WHEN o.key IS NOT NULL THEN o.type ELSE b.type END AS t,
                       CASE WHEN o.key IS NOT NULL THEN o.value ELSE b.value END AS v
                FROM json_each(?1) b
                LEFT JOIN json_each(?2) o ON o.key = b.key AND o.key IN (SELECT value FROM json_each(?3))
                UNION ALL
                SELECT o.key, o.type, o.value FROM json_each(?2) o
                WHERE o.key IN (SELECT value FROM json_each(?3))
                  AND NOT EXISTS (SELECT 1 FROM json_each(?1) b WHERE b.key = o.key))
            """, [base, overlay, columnsJSON])?.string ?? base
    }

    /// The columns whose values in `fields` differ from the record map's `base` (`FieldHashes`; a record's fields
    /// as JSON text compare as `differing(_:_:columns:)`): every column when there is no base. A field either side
    /// lacks counts as null.
    func differing(base: Value?, _ fields: String, columns: [String]) throws -> [String] {
        switch base {
        case .text(let json)?: return try differing(json, fields, columns: columns)
        case .blob(let hashes)?:
            var values: [[UInt8]: [UInt8]] = [:]
            let each = try db.cached("SELECT json_quote(key), \(FieldHashes.canonicalSQL(type: "type", value: "value")) "
                                     + "FROM json_each(?1)")
            try each.forEach([fields]) { row in
                let name = row.bytes(0), value = row.bytes(1)
                if values[name] == nil { values[name] = value }
            }
            let null = Array("null".utf8)
            let hasher = FieldHashes.Hasher()
            var result: [String] = []
            for column in columns {
                let name = try quotedName(column)
                let value = values[name] ?? null
                if let holds = try hasher.holds(hashes, name: name, value: value) {
                    if !holds { result.append(column) }
                } else if value != null {
                    result.append(column)
                }
            }
            return result
        default: return columns
        }
    }

    /// A column name as a JSON string, the name `FieldHashes` hashes.
    private func quotedName(_ column: String) throws -> [UInt8] {
        Array((try db.scalar("SELECT json_quote(?1)", [column])?.string ?? "").utf8)
    }

    /// The columns whose values differ between two fields objects (all of `columns` when `a` is nil). A field
    /// missing on one side counts as NULL. Values compare by their exact JSON (`FieldHashes.canonicalSQL`): a real
    /// with every digit, so 0.1 differs from 0.10000000000000002 and the real 1.0 from the integer 1.
    func differing(_ a: String?, _ b: String, columns: [String]) throws -> [String] {
        guard let a else { return columns }
        let exact = FieldHashes.canonicalSQL(type: "type", value: "value")
        let statement = try db.cached("""
            SELECT coalesce((SELECT \(exact) FROM json_each(?1) WHERE key = ?3), 'null')
                IS NOT coalesce((SELECT \(exact) FROM json_each(?2) WHERE key = ?3), 'null')
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

extension FieldHashes {
    /// SQL for the exact JSON of a value `FieldHashes` hashes: `json_quote`, but a real with every digit
    /// (`json_quote` rounds to 15). It keeps the type: the integer 1 is `1`, the real 1.0 is `1.0` (a real always
    /// has a decimal point or an exponent, `ValueJSON.real`), the text '1' is `"1"`; a blob's field is
    /// `{"$blob":"HEX"}` and a text that is not plain UTF-8 `{"$text":"HEX"}`, objects that no text field can
    /// equal, so no two values of different types share an encoding. `type` is a `json_each` type or a `typeof` (a blob column value is encoded as its
    /// field, `{"$blob":"HEX"}`).
    ///
    /// Fingerprints made before this was written down used the same encoding, so an existing record map keeps
    /// answering correctly: nothing is sent again, and no merge sees a conflict, because of how a base was hashed.
    public static func canonicalSQL(type: String, value: String) -> String {
        "CASE \(type) WHEN 'real' THEN \(ValueJSON.real(value)) "
            + "WHEN 'blob' THEN json_object('$blob', hex(\(value))) ELSE json_quote(\(value)) END"
    }

    /// SQL for the base of `record` (JSON text of a record whose keys are exactly `columns`, every one present):
    /// the same blob as `sql(_:)`, one `json_extract` a field instead of a walk of the JSON.
    public static func sql(record: String, columns: [String]) -> String {
        "storectl_field_hashes_of(" + columns.map { column -> String in
            let path = quoteLiteral(jsonPath(column))
            return "json_quote(\(quoteLiteral(column))), CASE json_type(\(record), \(path)) WHEN 'real' THEN "
                + "\(ValueJSON.real("json_extract(\(record), \(path))")) ELSE json_quote(json_extract(\(record), \(path))) END"
        }.joined(separator: ", ") + ")"
    }

    /// SQL for the record map's base (`FieldHashes`) of the record fields `expression` (JSON text); a blob passes
    /// through unchanged (a base already hashed) and NULL stays NULL. `expression` is evaluated up to three
    /// times: give a column or a parameter.
    public static func sql(_ expression: String) -> String {
        "CASE WHEN typeof(\(expression)) = 'text' THEN (SELECT storectl_field_hashes(json_quote(key), "
            + "\(canonicalSQL(type: "type", value: "value"))) FROM json_each(\(expression))) ELSE \(expression) END"
    }
}
