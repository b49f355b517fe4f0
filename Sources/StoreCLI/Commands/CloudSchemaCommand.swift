import FoundationEssentials
import StoreBase
import StoreMirror
import StoreSQLite
import StoreControl

/// `storectl cloud schema --format ckdb|json|sql`: the record types the store's tables become in the cloud.
struct CloudSchemaCommand: Command {
    static let name = "schema"
    static let abstract = "Print the cloud schema: CloudKit schema language (ckdb), a JSON description, or the SQL."
    static let discussion = """
        --format ckdb (the default) prints the record types in CloudKit's schema language (DEFINE SCHEMA,
        RECORD TYPE), so that an iOS team can import them with 'xcrun cktool import-schema --file schema.ckdb'.
        Each tracked table is a record type of the same name; each column that travels is a field, typed from its
        SQLite affinity (INTEGER -> INT64, REAL and NUMERIC -> DOUBLE, TEXT -> STRING, BLOB -> BYTES; a column with
        no declared type -> STRING); a foreign key to a table with INTEGER PRIMARY KEY travels as the parent's
        record name, a REFERENCE. The columns of unique: keys and UNIQUE constraints are QUERYABLE SORTABLE (the
        cloud has no unique constraints: storectl deduplicates on import), the columns of a natural primary key
        QUERYABLE. --format json describes the same in JSON (docs/json.md); --format sql prints the DDL of the
        container (the container file's tables, or the PostgreSQL schema). Changes nothing.
        """
    static let examples = [
        "storectl cloud schema > schema.ckdb && xcrun cktool import-schema --file schema.ckdb ...",
        "storectl cloud schema --format json | jq '.record_types[].name'",
        "storectl cloud schema --format sql",
    ]
    static let options = [
        OptionSpec("format", short: "f", value: "format", help: "ckdb (default), json or sql."),
    ]
    static let formats = ["ckdb", "json", "sql"]

    static func run(_ args: ParsedArguments, _ context: CommandContext) throws -> ExitCode {
        let format = args.value("format") ?? (context.global.json ? "json" : "ckdb")
        guard formats.contains(format) else {
            throw UsageError("--format must be ckdb, json or sql, got '\(format)'",
                             hint: Suggest.closest(format, in: formats).map {
                                 "did you mean '\(context.command("cloud schema --format \($0)"))'?"
                             })
        }
        let store = try context.openStore()
        if format == "sql" {
            let sql: String
            if let cloud = store.settings.cloud {
                sql = try CloudConnector.containerSQL(settings: cloud)
            } else {
                sql = CloudConnector.containerSQLForFile
            }
            if context.global.json {
                context.console.json(["format": "sql", "sql": sql])
            } else {
                context.console.out(sql)
            }
            return .ok
        }
        let schema = try CloudSchema.describe(store)
        if format == "json" || context.global.json {
            context.console.json(schema)
        } else {
            context.console.out(schema.ckdb())
        }
        return .ok
    }
}

/// The record types of a store's tracked tables, as the cloud sees them.
struct CloudSchema: Encodable {
    struct Field: Encodable {
        var name: String
        /// The column's declared SQLite type, as written ("" when none).
        var sqliteType: String
        /// The SQLite affinity: INTEGER, REAL, NUMERIC, TEXT or BLOB.
        var affinity: String
        /// The CloudKit type: INT64, DOUBLE, STRING, BYTES or REFERENCE.
        var cloudType: String
        var queryable: Bool
        var sortable: Bool
        /// For a REFERENCE: the record type it points at.
        var references: String?
    }

    struct RecordType: Encodable {
        var name: String
        /// `surrogate` (the record name is made from the store id and rowid) or `natural` (from the key).
        var recordName: String
        var primaryKey: [String]
        var fields: [Field]
        /// The unique keys (deduplicated on import), each a list of columns.
        var unique: [[String]]
    }

    var store: String
    var container: String?
    var zone: String?
    var recordTypes: [RecordType]

    /// Reads the tracked tables' shapes from the store. Changes nothing.
    /// - Throws: `StoreError`, `SQLiteError`.
    static func describe(_ store: StoreHandle) throws -> CloudSchema {
        let check = try store.cloudCheck()
        let db = try store.database()
        var types: [RecordType] = []
        for entity in check.entities {
            let columns = try db.columns(of: entity.name)
            // "column -> parent", as cloud check reports the foreign keys that travel as record names.
            var parents: [String: String] = [:]
            for reference in entity.references {
                let parts = reference.components(separatedBy: " -> ")
                if parts.count == 2 { parents[parts[0]] = parts[1] }
            }
            let unique = entity.dedupRules
            let keyed = Set(unique.flatMap { $0 })
            var fields: [Field] = []
            for column in columns where entity.fields.contains(column.name) {
                let affinity = Self.affinity(column.declaredType)
                let parent = parents[column.name]
                let natural = entity.keyKind != "surrogate" && entity.primaryKey.contains(column.name)
                fields.append(Field(name: column.name, sqliteType: column.declaredType, affinity: affinity,
                                    cloudType: parent != nil ? "REFERENCE" : Self.cloudType(column.declaredType),
                                    queryable: keyed.contains(column.name) || natural || parent != nil,
                                    sortable: keyed.contains(column.name), references: parent))
            }
            types.append(RecordType(name: entity.name, recordName: entity.keyKind, primaryKey: entity.primaryKey,
                                    fields: fields, unique: unique))
        }
        return CloudSchema(store: store.settings.name, container: store.settings.cloud?.container,
                           zone: store.settings.cloud?.zone, recordTypes: types)
    }

    /// SQLite's column affinity for a declared type (https://sqlite.org/datatype3.html, 3.1): "INT" -> INTEGER;
    /// "CHAR", "CLOB" or "TEXT" -> TEXT; "BLOB" or no type -> BLOB; "REAL", "FLOA" or "DOUB" -> REAL; else NUMERIC.
    static func affinity(_ declared: String) -> String {
        let t = declared.uppercased()
        if t.contains("INT") { return "INTEGER" }
        if t.contains("CHAR") || t.contains("CLOB") || t.contains("TEXT") { return "TEXT" }
        if t.contains("BLOB") || t.isEmpty { return "BLOB" }
        if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") { return "REAL" }
        return "NUMERIC"
    }

    /// The CloudKit field type for a declared SQLite type.
    static func cloudType(_ declared: String) -> String {
        if declared.isEmpty { return "STRING" }
        switch affinity(declared) {
        case "INTEGER": return "INT64"
        case "TEXT": return "STRING"
        case "BLOB": return "BYTES"
        default: return "DOUBLE"
        }
    }

    /// The system fields every record type has, as `cktool export-schema` writes them.
    static let systemFields: [(String, String)] = [
        ("___createTime", "TIMESTAMP"), ("___createdBy", "REFERENCE"), ("___etag", "STRING"),
        ("___modTime", "TIMESTAMP"), ("___modifiedBy", "REFERENCE"), ("___recordID", "REFERENCE QUERYABLE"),
    ]

    /// A name as a CloudKit schema identifier: bare when it is letters, digits and `_` starting with a letter,
    /// else in double quotes.
    static func identifier(_ name: String) -> String {
        let plain = name.first.map { $0.isASCII && $0.isLetter } ?? false
            && name.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }
        return plain ? name : "\"" + name.replacingText("\"", with: "") + "\""
    }

    /// The schema in CloudKit's schema language.
    func ckdb() -> String {
        var out = ["// CloudKit schema of store '\(store)'" + (container.map { ", container \($0)" } ?? "")
                   + ", made by 'storectl cloud schema'", "DEFINE SCHEMA"]
        for type in recordTypes {
            var lines: [(String, String)] = CloudSchema.systemFields.map { ("\"\($0.0)\"", $0.1) }
            for field in type.fields {
                var options = field.cloudType
                if field.queryable { options += " QUERYABLE" }
                if field.sortable { options += " SORTABLE" }
                lines.append((CloudSchema.identifier(field.name), options))
            }
            let width = (lines.map(\.0.count).max() ?? 0) + 1
            out.append("")
            if !type.unique.isEmpty {
                out.append("    // unique (deduplicated by storectl on import): "
                           + type.unique.map { "(" + $0.joined(separator: ", ") + ")" }.joined(separator: ", "))
            }
            out.append("    RECORD TYPE \(CloudSchema.identifier(type.name)) (")
            for (name, options) in lines { out.append("        " + name.padded(to: width) + options + ",") }
            out.append("        GRANT WRITE TO \"_creator\",")
            out.append("        GRANT CREATE TO \"_icloud\",")
            out.append("        GRANT READ TO \"_world\"")
            out.append("    );")
        }
        return out.joined(separator: "\n")
    }
}
