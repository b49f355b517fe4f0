import Foundation
import TestSupport
import XCTest

/// `cloud schema`: the ckdb output follows CloudKit's schema language, json describes the same, sql is the DDL.
final class CloudSchemaTests: XCTestCase {
    /// A checker for the CloudKit Schema Language, as Apple's "Integrating a Text-Based Schema into Your Workflow"
    /// documents it:
    ///
    ///     DEFINE SCHEMA [ { create-role | record-type } ; ] ...
    ///     record-type  = RECORD TYPE name ( { field-definition | grant } , ... )
    ///     field        = name data-type [ QUERYABLE | SEARCHABLE | SORTABLE ] ...
    ///     data-type    = ASSET | BYTES | DOUBLE | INT64 | LOCATION | NUMBER | REFERENCE | STRING | TIMESTAMP
    ///                    | LIST < data-type >
    ///     grant        = GRANT { READ | CREATE | WRITE } , ... TO name
    ///     comments     = // ... or -- ... to the end of the line
    struct Checker {
        var tokens: [String] = []
        var i = 0
        /// record type -> its fields with their type and options.
        var types: [String: [String: String]] = [:]

        init(_ text: String) {
            var t: [String] = []
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                var s = Substring(line)
                if let c = s.range(of: "//") { s = s[..<c.lowerBound] }
                if let c = s.range(of: "--") { s = s[..<c.lowerBound] }
                var word = ""
                var quoted = false
                for ch in s {
                    if quoted {
                        word.append(ch)
                        if ch == "\"" { quoted = false; t.append(word); word = "" }
                    } else if ch == "\"" {
                        if !word.isEmpty { t.append(word); word = "" }
                        word = "\""; quoted = true
                    } else if "(),;<>".contains(ch) {
                        if !word.isEmpty { t.append(word); word = "" }
                        t.append(String(ch))
                    } else if ch.isWhitespace {
                        if !word.isEmpty { t.append(word); word = "" }
                    } else {
                        word.append(ch)
                    }
                }
                if !word.isEmpty { t.append(word) }
            }
            tokens = t
        }

        mutating func next() -> String? { i < tokens.count ? { i += 1; return tokens[i - 1] }() : nil }
        func peek() -> String? { i < tokens.count ? tokens[i] : nil }
        mutating func expect(_ word: String) throws {
            let got = next()
            guard got?.uppercased() == word else { throw Failure("expected \(word), got \(got ?? "end")") }
        }
        static func isName(_ s: String) -> Bool {
            if s.hasPrefix("\"") { return s.count > 2 && s.hasSuffix("\"") }
            return s.first.map { $0.isLetter || $0 == "_" } ?? false && s.allSatisfy { $0.isLetter || $0.isNumber || $0 == "_" }
        }
        static let primitive: Set<String> = ["ASSET", "BYTES", "DOUBLE", "INT64", "LOCATION", "NUMBER", "REFERENCE",
                                             "STRING", "TIMESTAMP"]

        mutating func dataType() throws -> String {
            guard let t = next()?.uppercased() else { throw Failure("a type is missing") }
            if t == "LIST" {
                try expect("<")
                let inner = try dataType()
                try expect(">")
                return "LIST<\(inner)>"
            }
            guard Self.primitive.contains(t) else { throw Failure("'\(t)' is not a CloudKit type") }
            return t
        }

        mutating func check() throws {
            try expect("DEFINE")
            try expect("SCHEMA")
            while let word = peek() {
                if word.uppercased() == "CREATE" {
                    try expect("CREATE"); try expect("ROLE")
                    guard let n = next(), Self.isName(n) else { throw Failure("a role name") }
                } else {
                    try expect("RECORD")
                    try expect("TYPE")
                    guard let name = next(), Self.isName(name) else { throw Failure("a record type name") }
                    try expect("(")
                    var fields: [String: String] = [:]
                    while true {
                        if peek()?.uppercased() == "GRANT" {
                            _ = next()
                            repeat {
                                guard let p = next()?.uppercased(), ["READ", "CREATE", "WRITE"].contains(p) else {
                                    throw Failure("a permission")
                                }
                            } while peek() == "," && { _ = next(); return true }()
                            try expect("TO")
                            guard let role = next(), Self.isName(role) else { throw Failure("a role") }
                        } else {
                            guard let field = next(), Self.isName(field) else { throw Failure("a field name") }
                            var spec = try dataType()
                            while let o = peek()?.uppercased(), ["QUERYABLE", "SEARCHABLE", "SORTABLE"].contains(o) {
                                spec += " " + o
                                _ = next()
                            }
                            fields[field.replacingOccurrences(of: "\"", with: "")] = spec
                        }
                        guard let sep = next() else { throw Failure("unterminated record type \(name)") }
                        if sep == ")" { break }
                        guard sep == "," else { throw Failure("expected , or ) in \(name), got \(sep)") }
                    }
                    types[name.replacingOccurrences(of: "\"", with: "")] = fields
                }
                try expect(";")
            }
        }
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ d: String) { description = d }
    }

    /// A schema written the way the documentation's examples (and `cktool export-schema`) write one.
    let documentedStyle = """
        DEFINE SCHEMA

            CREATE ROLE Moderator;

            RECORD TYPE Recipes (
                "___createTime" TIMESTAMP SORTABLE,
                "___createdBy"  REFERENCE,
                "___etag"       STRING,
                "___modTime"    TIMESTAMP,
                "___modifiedBy" REFERENCE,
                "___recordID"   REFERENCE QUERYABLE,
                title           STRING QUERYABLE SEARCHABLE SORTABLE,
                photos          LIST<ASSET>,
                servings        INT64 QUERYABLE,  // how many
                author          REFERENCE QUERYABLE,
                GRANT WRITE TO "_creator",
                GRANT CREATE TO "_icloud",
                GRANT READ, WRITE TO Moderator,
                GRANT READ TO "_world"
            );
        """

    func testTheCheckerAcceptsTheDocumentedFormAndRejectsOthers() throws {
        var checker = Checker(documentedStyle)
        try checker.check()
        XCTAssertEqual(checker.types["Recipes"]?["photos"], "LIST<ASSET>")
        for bad in ["DEFINE SCHEMA RECORD TYPE t (a TEXT);", "DEFINE SCHEMA RECORD TYPE t (a STRING,);",
                    "DEFINE SCHEMA RECORD TYPE t (a STRING)", "RECORD TYPE t (a STRING);"] {
            var c = Checker(bad)
            XCTAssertThrowsError(try c.check(), bad)
        }
    }

    func testCkdbJSONAndSQLOfAStore() throws {
        let p = try E2EProject()
        let entities = ["entities:", "  notes:", "    unique: [uuid]", "  tags: {}", "  \"odd name\": {}"]
        let cloud = E2EProject.Cloud(container: "iCloud.com.example.notes", url: "file:cloud.container",
                                     secret: "${S:-demo-secret}", createIfMissing: false)
        try p.writeConfig([E2EProject.Store("notes", before: entities, cloud: cloud)])
        try p.writeSchema("""
            CREATE TABLE notes(id INTEGER PRIMARY KEY, uuid TEXT NOT NULL, title VARCHAR(80), body BLOB,
                               score REAL, due DATE, anything);
            CREATE TABLE tags(name TEXT PRIMARY KEY, note_id INTEGER REFERENCES notes(id));
            CREATE TABLE "odd name"(k TEXT, n INTEGER, PRIMARY KEY (k, n));
            """)
        try p.run(["init"])
        let ckdb = try p.run(["cloud", "schema"])
        var checker = Checker(ckdb.stdout)
        XCTAssertNoThrow(try checker.check(), ckdb.stdout)
        XCTAssertEqual(checker.types["notes"], [
            "___createTime": "TIMESTAMP", "___createdBy": "REFERENCE", "___etag": "STRING",
            "___modTime": "TIMESTAMP", "___modifiedBy": "REFERENCE", "___recordID": "REFERENCE QUERYABLE",
            "uuid": "STRING QUERYABLE SORTABLE", "title": "STRING", "body": "BYTES", "score": "DOUBLE",
            "due": "DOUBLE", "anything": "STRING",
        ])
        XCTAssertEqual(checker.types["tags"]?["name"], "STRING QUERYABLE")
        XCTAssertEqual(checker.types["tags"]?["note_id"], "REFERENCE QUERYABLE")
        XCTAssertEqual(checker.types["odd name"]?["n"], "INT64 QUERYABLE")
        XCTAssertTrue(ckdb.stdout.contains("RECORD TYPE \"odd name\" ("), ckdb.stdout)
        // The surrogate key never travels, so it is no field.
        XCTAssertNil(checker.types["notes"]?["id"])

        let json = try p.run(["cloud", "schema", "--format", "json"])
        let doc = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        XCTAssertEqual(doc["version"] as? Int, 1)
        let types = try XCTUnwrap(doc["record_types"] as? [[String: Any]])
        XCTAssertEqual(Set(types.compactMap { $0["name"] as? String }), ["notes", "tags", "odd name"])
        let tagType = try XCTUnwrap(types.first { $0["name"] as? String == "tags" })
        let tags = try XCTUnwrap(tagType["fields"] as? [[String: Any]])
        XCTAssertEqual(tags.last?["references"] as? String, "notes")
        let notes = try XCTUnwrap(types.first { $0["name"] as? String == "notes" })
        XCTAssertEqual(notes["record_name"] as? String, "surrogate")
        XCTAssertEqual(notes["unique"] as? [[String]], [["uuid"]])

        let sql = try p.run(["cloud", "schema", "--format", "sql"])
        XCTAssertTrue(sql.stdout.contains("CREATE TABLE records("), sql.stdout)
        // The DDL is the container's: it makes a working container in sqlite3.
        let made = try Binary.run("/usr/bin/sqlite3", [p.dir.file("made.db")], in: p.dir.path, stdin: sql.stdout)
        XCTAssertEqual(made.status, 0, "\(made)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: p.dir.file("cloud.container")),
                       "schema created a container")
    }
}
