import StoreBase
import StoreSQLite

/// The store's own triggers (the user's, not storectl's) while cloud records are applied.
///
/// A user's trigger on a tracked table that writes a tracked table (an `updated_at` stamp, an audit row, a counter
/// in a parent) has already run on the device where the change was made, and its effects come through the cloud
/// like any other change. Running it again on every device that imports the change would stamp the row anew, add
/// one audit row per device, count twice, and make the stores differ for good (or sync back and forth forever).
/// So while storectl applies cloud records, those triggers are set aside: dropped inside the import's
/// transaction and created again, exactly as they were, before it commits. A crash in between rolls both back.
///
/// Triggers whose bodies touch no tracked table (those that keep an FTS index or a cache up to date) still run:
/// imported rows must reach them.
enum UserTriggers {
    /// Runs `body` with the user triggers on `tracked` tables that touch a tracked table set aside. Must run inside
    /// a transaction: the drops and the creates commit or roll back with it.
    /// - Throws: the body's error, `SQLiteError`.
    static func suspended<T>(_ db: Connection, tracked: [String], _ body: () throws -> T) throws -> T {
        let triggers = try touching(db, tracked: tracked)
        if triggers.isEmpty { return try body() }
        for trigger in triggers {
            try db.execute("DROP TRIGGER main.\(quoteIdentifier(trigger.name))")
        }
        let result = try body()
        for trigger in triggers {
            try db.execute(trigger.sql)
        }
        return result
    }

    /// The user triggers on `tracked` tables whose body names a tracked table.
    static func touching(_ db: Connection, tracked: [String]) throws -> [(name: String, sql: String)] {
        let names = Set(tracked.map { $0.lowercased() })
        var result: [(name: String, sql: String)] = []
        for row in try db.query("""
            SELECT name, tbl_name, sql FROM sqlite_master
            WHERE type = 'trigger' AND name NOT LIKE '\\_storectl\\_%' ESCAPE '\\' AND sql IS NOT NULL
            """) {
            guard let name = row[0].string, let table = row[1].string, let sql = row[2].string,
                  names.contains(table.lowercased()) else { continue }
            let words = identifiers(inBodyOf: sql)
            if words.contains(where: { names.contains($0.lowercased()) }) { result.append((name, sql)) }
        }
        return result
    }

    /// The identifiers and bare words of a `CREATE TRIGGER` statement after its `BEGIN`: quoted names unquoted,
    /// string literals and comments left out.
    static func identifiers(inBodyOf sql: String) -> [String] {
        let chars = Array(sql.unicodeScalars)
        var words: [String] = []
        var inBody = false
        var i = 0
        func closing(_ quote: Unicode.Scalar) -> Unicode.Scalar { quote == "[" ? "]" : quote }
        while i < chars.count {
            let c = chars[i]
            if c == "-" && i + 1 < chars.count && chars[i + 1] == "-" {
                while i < chars.count && chars[i] != "\n" { i += 1 }
                continue
            }
            if c == "/" && i + 1 < chars.count && chars[i + 1] == "*" {
                i += 2
                while i + 1 < chars.count && !(chars[i] == "*" && chars[i + 1] == "/") { i += 1 }
                i += 2
                continue
            }
            if c == "'" {
                i += 1
                while i < chars.count {
                    if chars[i] == "'" {
                        if i + 1 < chars.count && chars[i + 1] == "'" { i += 2; continue }
                        break
                    }
                    i += 1
                }
                i += 1
                continue
            }
            if c == "\"" || c == "`" || c == "[" {
                let end = closing(c)
                var word = String.UnicodeScalarView()
                i += 1
                while i < chars.count {
                    if chars[i] == end {
                        if end != "]" && i + 1 < chars.count && chars[i + 1] == end {
                            word.append(end)
                            i += 2
                            continue
                        }
                        break
                    }
                    word.append(chars[i])
                    i += 1
                }
                i += 1
                if inBody { words.append(String(word)) }
                continue
            }
            if c.properties.isAlphabetic || c == "_" || c.properties.numericType != nil || c.value >= 0x80 {
                var word = String.UnicodeScalarView()
                while i < chars.count, chars[i].properties.isAlphabetic || chars[i] == "_" || chars[i] == "$"
                    || chars[i].properties.numericType != nil || chars[i].value >= 0x80
                {
                    word.append(chars[i])
                    i += 1
                }
                let text = String(word)
                if inBody { words.append(text) } else if text.uppercased() == "BEGIN" { inBody = true }
                continue
            }
            i += 1
        }
        return words
    }
}
