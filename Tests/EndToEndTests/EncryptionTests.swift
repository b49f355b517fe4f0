import Foundation
import StoreCloudPostgres
import TestSupport
import XCTest

/// The project, the container and the server read behind storectl's back, for the end-to-end tests of fields
/// encrypted on the device (`EncryptionTests`, `EncryptionEdgeTests`). It declares no test: a subclass runs only
/// the tests it declares.
class EncryptionTestCase: XCTestCase {
    /// The PostgreSQL server's URL, or nil for the container file.
    var serverURL: String? { nil }
    lazy var suffix = String(UInt64.random(in: 0...UInt64.max), radix: 16)
    lazy var container = serverURL == nil ? "iCloud.com.example.vault" : "iCloud.com.example.enc\(suffix)"
    /// A zone of its own name, so that messages naming it can be told from any default.
    let zone = "vault"
    /// Random per test, so that a marker found in the server was written by this test.
    lazy var tag = String(UInt64.random(in: 0...UInt64.max), radix: 36)

    static let schema = """
        CREATE TABLE IF NOT EXISTS notes(id TEXT PRIMARY KEY, title TEXT, body TEXT, folder TEXT);
        CREATE TABLE IF NOT EXISTS links(id TEXT PRIMARY KEY, note_id TEXT NOT NULL REFERENCES notes(id), url TEXT);
        """

    /// A value no other text contains: an encrypted column's value, which the server must never see.
    func secret(_ what: String) -> String { "PLAINTEXT-SECRET-\(what)-\(tag)" }
    /// A value of a column that is not encrypted, which the server does see.
    func visible(_ what: String) -> String { "VISIBLE-\(what)-\(tag)" }
    func uuid() -> String { UUID().uuidString.lowercased() }

    /// The variable holding a store's passphrase.
    func keyVariable(_ store: String) -> String { store.uppercased() + "_KEY" }

    /// For the PostgreSQL subclasses: fails the test when CI set PostgreSQL up (`STORECTL_REQUIRE_PG=1`) and no
    /// server URL is given, skips it otherwise.
    func requirePostgresServer() throws {
        if serverURL?.isEmpty ?? true {
            if ProcessInfo.processInfo.environment["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set: start PostgreSQL (see .ci/run)")
            }
            throw XCTSkip("no PostgreSQL server (set STORECTL_TEST_PG_URL)")
        }
    }

    /// The account every store signs in as: `demo` in a container file, the test server's role on PostgreSQL.
    var account: String { serverURL == nil ? "demo" : (ProcessInfo.processInfo.environment["PGUSER"] ?? "postgres") }
    var pgSchema: String { PostgresCloudDatabase.schemaName(container: container) }
    /// The records table of the container, as SQL names it.
    var recordsTable: String { serverURL == nil ? "records" : pgSchema + ".records" }
    var zonesTable: String { serverURL == nil ? "zones" : pgSchema + ".zones" }

    // MARK: Project

    /// One store of the config: `notes` encrypting `notesEncrypted`, `links` encrypting `linksEncrypted`, the
    /// passphrase from `<STORE>_KEY` when `keyed` (by default when anything is encrypted); `mode: cloud` when
    /// `cloudMode` (a config written again after `mode cloud` wrote it).
    func store(_ name: String, notesEncrypted: [String], linksEncrypted: [String] = [], keyed: Bool? = nil,
               cloudMode: Bool = false) -> E2EProject.Store
    {
        let url = serverURL.map { "'\($0)'" } ?? "file:cloud/shared.container"
        var extra = ["zone: \(zone)"]
        let encrypts = !notesEncrypted.isEmpty || !linksEncrypted.isEmpty
        if keyed ?? encrypts { extra.append("encryption_key: ${\(keyVariable(name))}") }
        let cloud = E2EProject.Cloud(container: container, url: url, account: account,
                                     createIfMissing: serverURL == nil, extra: extra)
        var before = cloudMode ? ["mode: cloud"] : []
        if encrypts {
            before.append("entities:")
            for (table, columns) in [("notes", notesEncrypted), ("links", linksEncrypted)] {
                before += columns.isEmpty ? ["  \(table): {}"]
                    : ["  \(table):", "    encrypted: [\(columns.joined(separator: ", "))]"]
            }
        }
        return E2EProject.Store(name, before: before, cloud: cloud)
    }

    /// A project whose stores share one container, every passphrase `passphrase` (cheap to derive).
    func project(_ stores: [E2EProject.Store], passphrase: String = "correct horse battery staple") throws
        -> E2EProject
    {
        let p = try E2EProject(label: "storectl-enc")
        try p.writeSchema(Self.schema)
        try p.writeConfig(stores)
        p.environment["STORECTL_SCRYPT_LOG_N"] = "10"
        for s in stores { p.environment[keyVariable(s.name)] = passphrase }
        try makeContainer(p, stores[0].name)
        for s in stores { try p.run(["-s", s.name, "init"]) }
        return p
    }

    /// On PostgreSQL, the test's container, made with `cloud init` by `store` and dropped when the test ends (a
    /// container file is made by the first store that uses it).
    func makeContainer(_ p: E2EProject, _ store: String) throws {
        guard let url = serverURL else { return }
        let schema = pgSchema
        addTeardownBlock {
            _ = try? Binary.run(Self.pgProgram("psql"), [url, "-X", "-Atq", "-c",
                                                         "DROP SCHEMA IF EXISTS \"\(schema)\" CASCADE"],
                                in: FileManager.default.temporaryDirectory.path)
        }
        try p.run(["-s", store, "cloud", "init"])
    }

    /// The two devices of most tests, encrypting notes' title and body and links' url.
    func pair(_ names: [String] = ["laptop", "phone"]) throws -> E2EProject {
        try project(names.map { store($0, notesEncrypted: ["title", "body"], linksEncrypted: ["url"]) })
    }

    func notes(_ p: E2EProject, _ store: String) throws -> String {
        try p.sql(store, "SELECT id, coalesce(title, 'NULL'), coalesce(body, 'NULL'), coalesce(folder, 'NULL') "
                  + "FROM notes ORDER BY id")
    }

    func links(_ p: E2EProject, _ store: String) throws -> String {
        try p.sql(store, "SELECT id, note_id, coalesce(url, 'NULL') FROM links ORDER BY id")
    }

    func json(_ r: ProcessResult) -> [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(r.stdout.utf8))) as? [String: Any] ?? [:]
    }

    static func literal(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "''") + "'" }

    /// Whether `text` (a JSON document or plain output) names `name`, whatever JSON escaped in it.
    static func mentions(_ text: String, _ name: String) -> Bool {
        let escaped = name.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
        return [name, escaped, escaped.replacingOccurrences(of: "/", with: "\\/")].contains { text.contains($0) }
    }

    // MARK: The server, read and written behind storectl's back

    /// A PostgreSQL program: from `$STORECTL_TEST_PG_BIN`, else the newest `/usr/lib/postgresql/*/bin`, else
    /// `/usr/bin`.
    static func pgProgram(_ name: String) -> String {
        var dirs: [String] = []
        if let bin = ProcessInfo.processInfo.environment["STORECTL_TEST_PG_BIN"], !bin.isEmpty { dirs.append(bin) }
        let versions = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []
        dirs += versions.compactMap { Int($0) }.sorted(by: >).map { "/usr/lib/postgresql/\($0)/bin" }
        dirs.append("/usr/bin")
        return dirs.map { $0 + "/" + name }.first { FileManager.default.isExecutableFile(atPath: $0) }
            ?? "/usr/bin/" + name
    }

    /// Runs SQL on the container: the file with the real `sqlite3`, PostgreSQL with `psql` as the test server's
    /// superuser. Rows come back as fields separated by U+001F, rows by U+001E.
    @discardableResult
    func serverSQL(_ p: E2EProject, _ sql: String, file: StaticString = #filePath, line: UInt = #line) throws
        -> [[String]]
    {
        let r: ProcessResult
        if let url = serverURL {
            r = try Binary.run(Self.pgProgram("psql"), [url, "-X", "-Atq", "-v", "ON_ERROR_STOP=1", "-F", "\u{1F}",
                                                        "-R", "\u{1E}", "-c", sql], in: p.dir.path)
        } else {
            r = try Binary.run("/usr/bin/sqlite3", ["-cmd", ".timeout 10000", "-separator", "\u{1F}",
                                                    "-newline", "\u{1E}", p.dir.file("cloud/shared.container"), sql],
                               in: p.dir.path)
        }
        XCTAssertEqual(r.status, 0, "\(sql)\n\(r)", file: file, line: line)
        return r.stdout.split(separator: "\u{1E}").map { String($0) }
            .filter { !$0.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty }
            .map { $0.trimmingCharacters(in: .newlines).components(separatedBy: "\u{1F}") }
    }

    struct ServerRecord: Equatable {
        var name: String
        var type: String
        var deleted: Bool
        var fields: String
        var object: [String: Any] {
            (try? JSONSerialization.jsonObject(with: Data(fields.utf8))) as? [String: Any] ?? [:]
        }
    }

    /// Every record of the zone, as the server holds it.
    func serverRecords(_ p: E2EProject, file: StaticString = #filePath, line: UInt = #line) throws -> [ServerRecord] {
        try serverSQL(p, """
            SELECT record_name, record_type, CASE WHEN deleted THEN 1 ELSE 0 END, fields FROM \(recordsTable)
            WHERE zone = '\(zone)' ORDER BY record_name
            """, file: file, line: line).map { ServerRecord(name: $0[0], type: $0[1], deleted: $0[2] == "1",
                                                            fields: $0.dropFirst(3).joined(separator: "\u{1F}")) }
    }

    /// The live record of type `type` whose fields hold `value` (a column that is not encrypted).
    func record(_ p: E2EProject, _ type: String = "notes", holding value: String, file: StaticString = #filePath,
                line: UInt = #line) throws -> ServerRecord
    {
        let found = try serverRecords(p, file: file, line: line).filter {
            $0.type == type && !$0.deleted && $0.fields.contains(value)
        }
        XCTAssertEqual(found.count, 1, "the records holding \(value): \(found)", file: file, line: line)
        return try XCTUnwrap(found.first, file: file, line: line)
    }

    /// Everything the server stores, as bytes: the container file and its journal files; on PostgreSQL, a
    /// `pg_dump` of the container's schema (not of the whole database: other tests change theirs meanwhile).
    func serverBytes(_ p: E2EProject, file: StaticString = #filePath, line: UInt = #line) throws -> Data {
        guard let url = serverURL else {
            var data = Data()
            let dir = p.dir.file("cloud")
            for name in try FileManager.default.contentsOfDirectory(atPath: dir).sorted() {
                data += try Data(contentsOf: URL(fileURLWithPath: dir + "/" + name))
            }
            XCTAssertGreaterThan(data.count, 0, "no container file in \(dir)", file: file, line: line)
            return data
        }
        let pgDump = Self.pgProgram("pg_dump")
        XCTAssertTrue(FileManager.default.isExecutableFile(atPath: pgDump),
                      "no pg_dump (set STORECTL_TEST_PG_BIN)", file: file, line: line)
        var last: ProcessResult?
        for _ in 0..<5 {
            let r = try Binary.run(pgDump, ["--no-owner", "--no-privileges", "-n", pgSchema, "-d", url], in: p.dir.path)
            if r.status == 0 {
                XCTAssertTrue(r.stdout.contains("records"), "pg_dump printed no records table\n\(r.stdout.prefix(2000))",
                              file: file, line: line)
                return Data(r.stdout.utf8)
            }
            last = r
            Thread.sleep(forTimeInterval: 0.5)
        }
        XCTFail("pg_dump failed: \(last.map { "\($0)" } ?? "")", file: file, line: line)
        return Data()
    }

    /// Fails for each of `secrets` the server's bytes hold.
    func assertServerNeverHolds(_ p: E2EProject, _ secrets: [String], _ what: String, file: StaticString = #filePath,
                                line: UInt = #line) throws
    {
        let bytes = try serverBytes(p, file: file, line: line)
        for s in secrets {
            XCTAssertNil(bytes.range(of: Data(s.utf8)), "\(what): the server holds '\(s)' in clear", file: file,
                         line: line)
        }
    }

    /// Writes `fields` into records of the zone, each with the next seq and a new change tag, as a server that
    /// moves data around would: every other store fetches them at its next sync. The records keep their device.
    func forge(_ p: E2EProject, _ changes: [(name: String, fields: String)], file: StaticString = #filePath,
               line: UInt = #line) throws
    {
        var sql = "BEGIN;\n"
        for (i, change) in changes.enumerated() {
            sql += """
                UPDATE \(zonesTable) SET last_seq = last_seq + 1 WHERE name = '\(zone)';
                UPDATE \(recordsTable) SET fields = \(Self.literal(change.fields)), change_tag = 'forged-\(i)-\(tag)',
                    seq = (SELECT last_seq FROM \(zonesTable) WHERE name = '\(zone)')
                WHERE zone = '\(zone)' AND record_name = \(Self.literal(change.name));

                """
        }
        try serverSQL(p, sql + "COMMIT;", file: file, line: line)
    }

    /// `object` as JSON text, keys sorted.
    static func text(_ object: [String: Any]) throws -> String {
        String(decoding: try JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]),
               as: UTF8.self)
    }

    /// The encrypted value `{"$enc": ...}` of a field in a record's fields, or nil when it is not one.
    static func ciphertext(_ record: ServerRecord, _ field: String) -> String? {
        (record.object[field] as? [String: Any])?["$enc"] as? String
    }

    /// The bytes a store keeps on disk: its file and, when there is one, its write-ahead log.
    func storeBytes(_ p: E2EProject, _ store: String) throws -> [String: Data] {
        var out: [String: Data] = [:]
        for path in [p.storePath(store), p.storePath(store) + "-wal"] where FileManager.default.fileExists(atPath: path) {
            out[path] = try Data(contentsOf: URL(fileURLWithPath: path))
        }
        return out
    }
}

/// Fields encrypted on the device, end to end: the real binary, a store file per device, one container. Here on a
/// container file; on PostgreSQL in `PostgresEncryptionTests`. The server must never hold an encrypted column's
/// value in clear, a wrong passphrase writes nothing, ciphertext moved by the server is set aside, and the
/// passphrase can be changed (`cloud rekey`) while a device is offline.
class EncryptionTests: EncryptionTestCase {
    // MARK: 1. Convergence, and nothing in clear on the server

    func testTwoStoresWithOnePassphraseConvergeAndTheServerNeverSeesTheEncryptedColumns() throws {
        let p = try pair()
        let (n1, n2, n3, n4, n5) = (uuid(), uuid(), uuid(), uuid(), uuid())
        let (l1, l2) = (uuid(), uuid())
        try p.sql("laptop", """
            INSERT INTO notes VALUES ('\(n1)', '\(secret("T1"))', '\(secret("B1"))', '\(visible("F1"))'),
                                     ('\(n2)', '\(secret("T2"))', '\(secret("B2"))', '\(visible("F2"))'),
                                     ('\(n3)', '\(secret("T3"))', '\(secret("B3"))', '\(visible("F3"))');
            INSERT INTO links VALUES ('\(l1)', '\(n1)', '\(secret("URL1"))');
            """)
        try p.run(["-s", "laptop", "mode", "cloud"])
        try p.run(["-s", "phone", "mode", "cloud"])
        XCTAssertEqual(try notes(p, "phone"), try notes(p, "laptop"))
        XCTAssertTrue(try notes(p, "phone").contains(secret("B3")))
        // The server's fields hold the encrypted columns as {"$enc": ...}, the others in clear.
        let n1Record = try record(p, holding: visible("F1"))
        for field in ["title", "body"] {
            XCTAssertNotNil(Self.ciphertext(n1Record, field), "\(field) of \(n1Record.fields)")
        }
        XCTAssertEqual(n1Record.object["folder"] as? String, visible("F1"))

        // Edits on both sides: an update, a delete, an insert; a body set to a new value and the row then deleted.
        try p.sql("laptop", "UPDATE notes SET title = '\(secret("T1-new"))' WHERE id = '\(n1)';"
                  + "UPDATE notes SET body = '\(secret("B3-new"))' WHERE id = '\(n3)'")
        try p.sql("phone", """
            DELETE FROM notes WHERE id = '\(n2)';
            INSERT INTO notes VALUES ('\(n4)', '\(secret("T4"))', '\(secret("B4"))', '\(visible("F4"))');
            INSERT INTO links VALUES ('\(l2)', '\(n4)', '\(secret("URL2"))');
            """)
        for s in ["laptop", "phone", "laptop"] { try p.run(["-s", s, "sync"]) }
        try p.sql("laptop", "DELETE FROM notes WHERE id = '\(n3)'")
        try p.sql("phone", "INSERT INTO notes VALUES ('\(n5)', '\(secret("T5"))', NULL, '\(visible("F5"))');"
                  + "UPDATE links SET url = '\(secret("URL1-new"))' WHERE id = '\(l1)'")
        for s in ["laptop", "phone", "laptop"] { try p.run(["-s", s, "sync"]) }

        let laptop = try notes(p, "laptop")
        XCTAssertEqual(try notes(p, "phone"), laptop)
        XCTAssertEqual(try links(p, "phone"), try links(p, "laptop"))
        XCTAssertTrue(laptop.contains(secret("T1-new")) && laptop.contains(secret("T4")) && laptop.contains(secret("T5")),
                      laptop)
        XCTAssertFalse(laptop.contains(n2) || laptop.contains(n3), laptop)
        XCTAssertTrue(try links(p, "laptop").contains(secret("URL1-new")))
        for s in ["laptop", "phone"] {
            try p.run(["-s", s, "doctor"])
            let status = try p.run(["-s", s, "status", "--json"])
            XCTAssertFalse(status.stdout.contains("_storectl_zone_key"), "the zone's key record is shown as data\n"
                           + status.stdout)
            let verify = try p.run(["--json", "-s", s, "verify"])
            XCTAssertEqual(json(verify)["in_sync"] as? Bool, true, verify.stdout)
            XCTAssertFalse(verify.stdout.contains("_storectl_zone_key"), verify.stdout)
        }

        // No encrypted value, current, replaced or deleted, is anywhere in the server.
        let secrets = ["T1", "T1-new", "B1", "T2", "B2", "T3", "B3", "B3-new", "T4", "B4", "T5", "URL1", "URL1-new",
                       "URL2"].map(secret)
        try assertServerNeverHolds(p, secrets + ["PLAINTEXT-SECRET"], "after two stores synced")
        // The search sees what the server does hold in clear: the folder column, not encrypted.
        let bytes = try serverBytes(p)
        for f in ["F1", "F4", "F5"] {
            XCTAssertNotNil(bytes.range(of: Data(visible(f).utf8)), "the search of the server's bytes misses "
                            + visible(f) + ", a value it holds in clear")
        }
        // Tombstones carry no value, encrypted or not.
        let records = try serverRecords(p)
        let tombstones = records.filter { $0.deleted && $0.type == "notes" }
        XCTAssertEqual(tombstones.count, 2, "\(records)")
        for t in tombstones {
            XCTAssertFalse(t.fields.contains("$enc") || t.fields.contains("title") || t.fields.contains("body"),
                           "a tombstone carries values: \(t.fields)")
        }
        // The zone's key: one reserved record, and every live notes record encrypted.
        XCTAssertEqual(records.filter { $0.type == "_storectl_zone_key" }.map(\.name), ["_storectl_zone_key"])
        for r in records where r.type == "notes" && !r.deleted {
            XCTAssertNotNil(Self.ciphertext(r, "title"), r.fields)
        }
    }

    // MARK: 2. A wrong or missing passphrase writes nothing

    func testAWrongOrMissingPassphraseIsRefusedBeforeAnythingIsWritten() throws {
        let names = ["laptop", "tablet"]
        let p = try project(names.map { store($0, notesEncrypted: ["title", "body"]) }
                            + [store("plain", notesEncrypted: [], keyed: false)])
        let n1 = uuid()
        try p.sql("laptop", "INSERT INTO notes VALUES ('\(n1)', '\(secret("T1"))', '\(secret("B1"))', 'f')")
        try p.run(["-s", "laptop", "mode", "cloud"])

        // tablet joins with a wrong passphrase: refused, naming the store and the zone; nothing written.
        try p.sql("tablet", "INSERT INTO notes VALUES ('\(uuid())', 'tablet title', 'tablet body', 'f')")
        p.environment[keyVariable("tablet")] = "not the passphrase"
        let config = try p.dir.read("config.yaml")
        var before = try storeBytes(p, "tablet")
        let refused = try p.run(["-s", "tablet", "mode", "cloud"], expect: 77)
        XCTAssertTrue(refused.stderr.contains("tablet") && refused.stderr.contains(zone), refused.stderr)
        XCTAssertFalse(refused.stderr.contains("not the passphrase"), refused.stderr)
        XCTAssertEqual(try storeBytes(p, "tablet"), before, "a refused 'mode cloud' wrote the store")
        XCTAssertEqual(try p.dir.read("config.yaml"), config, "a refused 'mode cloud' changed the config")
        XCTAssertFalse(try p.sql("tablet", "SELECT title FROM notes").contains(secret("T1")))

        // With the right one it joins; then its passphrase is wrong again: sync is refused the same way.
        p.environment[keyVariable("tablet")] = "correct horse battery staple"
        try p.run(["-s", "tablet", "mode", "cloud"])
        XCTAssertEqual(try notes(p, "tablet").contains(secret("T1")), true)
        try p.sql("laptop", "UPDATE notes SET title = '\(secret("T1-new"))'")
        try p.run(["-s", "laptop", "sync"])
        try p.sql("tablet", "UPDATE notes SET body = 'tablet edit' WHERE id = '\(n1)'")
        p.environment[keyVariable("tablet")] = "not the passphrase"
        before = try storeBytes(p, "tablet")
        let sync = try p.run(["-s", "tablet", "sync"], expect: 77)
        XCTAssertTrue(sync.stderr.contains("tablet") && sync.stderr.contains(zone), sync.stderr)
        XCTAssertEqual(try storeBytes(p, "tablet"), before, "a refused sync wrote the store")
        // Missing: the variable unset, or empty (the config may refuse an empty key itself: 78).
        p.environment[keyVariable("tablet")] = nil
        var r = try p.run(["-s", "tablet", "sync"], expect: nil)
        XCTAssertTrue([77, 78].contains(r.status), "sync with the passphrase's variable unset\n\(r)")
        p.environment[keyVariable("tablet")] = ""
        r = try p.run(["-s", "tablet", "sync"], expect: nil)
        XCTAssertTrue([77, 78].contains(r.status), "sync with an empty passphrase\n\(r)")
        XCTAssertEqual(try storeBytes(p, "tablet"), before, "a refused sync wrote the store")
        XCTAssertFalse(try notes(p, "tablet").contains(secret("T1-new")))
        // Nothing of what tablet holds reached the cloud.
        try p.run(["-s", "laptop", "sync"])
        XCTAssertFalse(try notes(p, "laptop").contains("tablet edit"))

        // A store with no key at all, on the encrypted zone: refused the same way.
        let plainBefore = try storeBytes(p, "plain")
        let plain = try p.run(["-s", "plain", "mode", "cloud"], expect: 77)
        XCTAssertTrue(plain.stderr.contains("plain") && plain.stderr.contains(zone), plain.stderr)
        XCTAssertEqual(try storeBytes(p, "plain"), plainBefore, "a refused 'mode cloud' wrote the store")

        // A watcher's round is refused the same way. It may record the round's error in the store (what `status`
        // shows as the last error); nothing else changes.
        p.environment[keyVariable("tablet")] = "not the passphrase"
        let dump = { try self.contentWithoutLastError(p, "tablet") }
        let dumpBefore = try dump()
        let watch = try p.run(["-s", "tablet", "watch", "--once"], expect: 77)
        XCTAssertTrue(watch.stderr.contains("tablet") && watch.stderr.contains(zone), watch.stderr)
        XCTAssertEqual(try dump(), dumpBefore, "a refused watcher round wrote the store")

        // Back on the right passphrase, tablet syncs its edit.
        p.environment[keyVariable("tablet")] = "correct horse battery staple"
        try p.run(["-s", "tablet", "sync"])
        try p.run(["-s", "laptop", "sync"])
        XCTAssertEqual(try notes(p, "laptop"), try notes(p, "tablet"))
        XCTAssertTrue(try notes(p, "laptop").contains("tablet edit"))
    }

    /// A store's whole content as SQL, but for the record of the last sync error.
    func contentWithoutLastError(_ p: E2EProject, _ store: String) throws -> String {
        try p.sql(store, ".dump").split(separator: "\n").filter { !$0.contains("'last_sync_error'") }
            .joined(separator: "\n")
    }

    // MARK: 3. Ciphertext moved by the server is set aside

    func testCiphertextSwappedByTheServerIsSetAsideAndNeverApplied() throws {
        let p = try pair()
        let ids = (1...6).map { _ in uuid() }
        try p.sql("laptop", "INSERT INTO notes VALUES "
                  + ids.enumerated().map { i, id in
                      "('\(id)', '\(secret("T\(i)"))', '\(secret("B\(i)"))', '\(visible("F\(i)"))')"
                  }.joined(separator: ", "))
        try p.run(["-s", "laptop", "mode", "cloud"])
        try p.run(["-s", "phone", "mode", "cloud"])
        let before = try notes(p, "phone")
        XCTAssertEqual(before, try notes(p, "laptop"))

        let r = try (0..<6).map { try record(p, holding: visible("F\($0)")) }
        var swapped: [(name: String, fields: String)] = []
        // The title of note 0 and the title of note 1 swapped: each is a valid ciphertext of another record.
        var o0 = r[0].object, o1 = r[1].object
        (o0["title"], o1["title"]) = (o1["title"], o0["title"])
        swapped += [(r[0].name, try Self.text(o0)), (r[1].name, try Self.text(o1))]
        // The title and the body of note 2 swapped: each is a valid ciphertext of another field of the record.
        var o2 = r[2].object
        let title2 = o2["title"]
        o2["title"] = o2["body"]
        o2["body"] = title2
        swapped.append((r[2].name, try Self.text(o2)))
        // Note 3's title in clear, in a field the zone encrypts.
        var o3 = r[3].object
        o3["title"] = "FORGED-IN-CLEAR-\(tag)"
        swapped.append((r[3].name, try Self.text(o3)))
        // Note 4 sent again as it is: it authenticates, and must not be set aside.
        try forge(p, swapped + [(r[4].name, r[4].fields)])
        // A genuine change after them still arrives.
        try p.sql("laptop", "UPDATE notes SET title = '\(secret("T5-new"))' WHERE id = '\(ids[5])'")
        try p.run(["-s", "laptop", "sync"])

        let sync = try p.run(["-s", "phone", "sync", "--json"])
        XCTAssertEqual((json(sync)["imported"] as? [String: Any])?["set_aside"] as? Int, 4, sync.stdout)
        let after = try notes(p, "phone")
        XCTAssertEqual(after, before.replacingOccurrences(of: secret("T5"), with: secret("T5-new")),
                       "the swapped values were applied")
        XCTAssertFalse(after.contains("FORGED-IN-CLEAR"), after)
        let status = try p.run(["-s", "phone", "status", "--json"], expect: 65)
        let doctor = try p.run(["-s", "phone", "doctor"], expect: 65)
        for (name, _) in swapped {
            XCTAssertTrue(Self.mentions(status.stdout, name), "status does not list \(name) set aside\n\(status.stdout)")
            XCTAssertTrue(Self.mentions(doctor.stdout, name), "doctor does not list \(name) set aside\n\(doctor.stdout)")
        }
        XCTAssertFalse(Self.mentions(status.stdout, r[4].name), "a record that authenticates was set aside\n"
                       + status.stdout)
        // Set aside for good: the next sync does not apply them either.
        try p.run(["-s", "phone", "sync"])
        XCTAssertEqual(try notes(p, "phone"), after)
    }

    // MARK: 4. A new passphrase while a device is offline

    /// The encrypted fields of the zone's live records, by record name and field.
    func ciphertexts(_ p: E2EProject) throws -> [String: String] {
        var out: [String: String] = [:]
        for r in try serverRecords(p) where !r.deleted && (r.type == "notes" || r.type == "links") {
            for field in ["title", "body", "url"] { out[r.name + "." + field] = Self.ciphertext(r, field) }
        }
        return out
    }

    func testRekeyWhileADeviceIsOfflineAndRekeyWithANewDataKey() throws {
        let p = try pair()
        let (n1, n2, n3, n4) = (uuid(), uuid(), uuid(), uuid())
        try p.sql("laptop", "INSERT INTO notes VALUES ('\(n1)', '\(secret("T1"))', '\(secret("B1"))', 'f1'),"
                  + "('\(n2)', '\(secret("T2"))', '\(secret("B2"))', 'f2');"
                  + "INSERT INTO links VALUES ('\(uuid())', '\(n1)', '\(secret("URL1"))')")
        try p.run(["-s", "laptop", "mode", "cloud"])
        try p.run(["-s", "phone", "mode", "cloud"])
        // Both started on the project's passphrase; then the second, then the third.
        let (k2, k3) = ("second passphrase \(tag)", "third passphrase \(tag)")

        // phone is offline (it runs nothing) while laptop changes the passphrase, without a new data key.
        let zoneRecords = { try self.serverRecords(p).filter { $0.type != "_storectl_zone_key" } }
        let recordsBefore = try zoneRecords()
        try p.run(["-s", "laptop", "cloud", "rekey", "--new-key-env", "NEWKEY"], expect: 77,
                  env: ["NEWKEY": k2, keyVariable("laptop"): "not the passphrase"])
        let rekey = try p.run(["-s", "laptop", "cloud", "rekey", "--new-key-env", "NEWKEY", "--json"],
                              env: ["NEWKEY": k2])
        var doc = json(rekey)
        XCTAssertEqual(doc["store"] as? String, "laptop", rekey.stdout)
        XCTAssertEqual(doc["container"] as? String, container, rekey.stdout)
        XCTAssertEqual(doc["zone"] as? String, zone, rekey.stdout)
        XCTAssertEqual(doc["rotated"] as? Bool, false, rekey.stdout)
        let firstGeneration = try XCTUnwrap(doc["generation"] as? Int, rekey.stdout)
        XCTAssertFalse(rekey.stdout.contains(k2) || rekey.stderr.contains(k2), "\(rekey)")
        XCTAssertEqual(try zoneRecords(), recordsBefore, "a rekey without --rotate changed the zone's records")

        p.environment[keyVariable("laptop")] = k2
        try p.sql("laptop", "INSERT INTO notes VALUES ('\(n3)', '\(secret("T3"))', '\(secret("B3"))', 'f3')")
        try p.run(["-s", "laptop", "sync"])
        try p.sql("phone", "UPDATE notes SET body = '\(secret("B2-phone"))' WHERE id = '\(n2)'")
        var phoneBefore = try storeBytes(p, "phone")
        let stale = try p.run(["-s", "phone", "sync"], expect: 77)
        XCTAssertTrue(stale.stderr.contains("phone") && stale.stderr.contains(zone), stale.stderr)
        XCTAssertEqual(try storeBytes(p, "phone"), phoneBefore, "a refused sync wrote the store")
        p.environment[keyVariable("phone")] = k2
        try p.run(["-s", "phone", "sync"])
        try p.run(["-s", "laptop", "sync"])
        XCTAssertEqual(try notes(p, "phone"), try notes(p, "laptop"))
        XCTAssertTrue(try notes(p, "laptop").contains(secret("B2-phone")) && notes(p, "phone").contains(secret("T3")))

        // The same with a new data key: every record with encrypted fields is sent again.
        let ciphertextsBefore = try ciphertexts(p)
        let rotate = try p.run(["-s", "laptop", "cloud", "rekey", "--rotate", "--new-key-env", "NEWKEY", "--json"],
                               env: ["NEWKEY": k3])
        doc = json(rotate)
        XCTAssertEqual(doc["rotated"] as? Bool, true, rotate.stdout)
        XCTAssertGreaterThan(doc["resent"] as? Int ?? 0, 0, rotate.stdout)
        XCTAssertGreaterThan(doc["generation"] as? Int ?? 0, firstGeneration, rotate.stdout)
        let ciphertextsAfter = try ciphertexts(p)
        XCTAssertEqual(Set(ciphertextsAfter.keys), Set(ciphertextsBefore.keys))
        XCTAssertEqual(ciphertextsAfter.count, 7, "\(ciphertextsAfter)")
        for (field, value) in ciphertextsAfter {
            XCTAssertNotEqual(value, ciphertextsBefore[field], "\(field) was not encrypted again with the new data key")
        }
        try assertServerNeverHolds(p, ["T1", "B1", "T2", "B2", "B2-phone", "T3", "B3", "URL1"].map(secret)
                                   + ["PLAINTEXT-SECRET"], "after a rotation")

        p.environment[keyVariable("laptop")] = k3
        try p.sql("laptop", "INSERT INTO notes VALUES ('\(n4)', '\(secret("T4"))', '\(secret("B4"))', 'f4')")
        try p.run(["-s", "laptop", "sync"])
        phoneBefore = try storeBytes(p, "phone")
        try p.run(["-s", "phone", "sync"], expect: 77)
        XCTAssertEqual(try storeBytes(p, "phone"), phoneBefore, "a refused sync wrote the store")
        p.environment[keyVariable("phone")] = k3
        try p.run(["-s", "phone", "sync"])
        XCTAssertEqual(try notes(p, "phone"), try notes(p, "laptop"))
        XCTAssertEqual(try links(p, "phone"), try links(p, "laptop"))
        XCTAssertTrue(try notes(p, "phone").contains(secret("T4")))
        for s in ["laptop", "phone"] { try p.run(["-s", s, "doctor"]) }
        try assertServerNeverHolds(p, ["T4", "B4"].map(secret) + ["PLAINTEXT-SECRET"], "after the rotation")

        // The new passphrase from standard input (one line), then from a file (its first line).
        let (k4, k5) = ("fourth passphrase \(tag)", "fifth passphrase \(tag)")
        try p.run(["-s", "laptop", "cloud", "rekey"], stdin: k4 + "\n")
        p.environment[keyVariable("laptop")] = k4
        try p.run(["-s", "laptop", "sync"])
        _ = try p.dir.write("new-key.txt", k5 + "\nnot this line\n")
        try p.run(["-s", "laptop", "cloud", "rekey", "--new-key-file", p.dir.file("new-key.txt")])
        try p.run(["-s", "laptop", "sync"], expect: 77)
        p.environment[keyVariable("laptop")] = k5
        try p.sql("laptop", "UPDATE notes SET title = '\(secret("T4-new"))' WHERE id = '\(n4)'")
        try p.run(["-s", "laptop", "sync"])
        try p.run(["-s", "phone", "sync"], expect: 77)
        p.environment[keyVariable("phone")] = k5
        try p.run(["-s", "phone", "sync"])
        XCTAssertEqual(try notes(p, "phone"), try notes(p, "laptop"))
        XCTAssertTrue(try notes(p, "phone").contains(secret("T4-new")))
    }

    // MARK: 5. Encrypting a column already synced in clear

    /// How many of the zone's current records hold `value` in their fields.
    func recordsHolding(_ p: E2EProject, _ value: String) throws -> Int {
        try serverRecords(p).filter { $0.fields.contains(value) }.count
    }

    /// How many of the earlier versions the container keeps of the zone's records (`superseded_saves`: a device's
    /// save that another device's save replaced) hold `value` in their fields.
    func supersededHolding(_ p: E2EProject, _ value: String) throws -> Int {
        let table = serverURL == nil ? "superseded_saves" : pgSchema + ".superseded_saves"
        return try serverSQL(p, "SELECT fields FROM \(table) WHERE zone = '\(zone)'")
            .filter { $0.joined().contains(value) }.count
    }

    func testEncryptingAPopulatedSyncedColumnReplacesItsValuesInTheZone() throws {
        let names = ["laptop", "phone"]
        let p = try project(names.map { store($0, notesEncrypted: []) })
        let row = { (i: Int) in "('\(self.uuid())', '\(self.visible("T\(i)"))', '\(self.secret("B\(i)"))', '\(self.visible("F\(i)"))')" }
        try p.sql("laptop", "INSERT INTO notes VALUES \(row(1)), \(row(2))")
        try p.run(["-s", "laptop", "mode", "cloud"])
        try p.sql("phone", "INSERT INTO notes VALUES \(row(3))")
        try p.run(["-s", "phone", "mode", "cloud"])
        try p.run(["-s", "laptop", "sync"])
        var before = try notes(p, "laptop")
        XCTAssertEqual(try notes(p, "phone"), before)
        // In clear, as configured so far: the search finds them.
        XCTAssertNotNil(try serverBytes(p).range(of: Data(secret("B1").utf8)))
        for b in ["B1", "B2", "B3"] { XCTAssertEqual(try recordsHolding(p, secret(b)), 1, b) }

        // Both devices now encrypt the body, with a passphrase (the zone had no key yet); then the title too (the
        // zone has a key). Each time the next sync of one device seals the values already in the zone.
        for (columns, inClear) in [(["body"], ["B1", "B2", "B3"].map(secret)),
                                   (["title", "body"], ["T1", "T2", "T3"].map(visible))]
        {
            let what = "after encrypting \(columns)"
            try p.writeConfig(names.map { store($0, notesEncrypted: columns, cloudMode: true) })
            try p.run(["-s", "laptop", "sync"])
            // The zone's current records, read by SQL: a container file's freed pages may still hold the old
            // bytes until SQLite reuses them, so its raw bytes are no test of what the zone holds.
            for value in inClear {
                XCTAssertEqual(try recordsHolding(p, value), 0, "\(what): \(value) is still in clear in the zone")
            }
            for f in ["F1", "F2", "F3"] {
                let r = try record(p, holding: visible(f))
                for c in columns { XCTAssertNotNil(Self.ciphertext(r, c), "\(what): \(c) of \(r.fields)") }
            }
            try p.run(["-s", "phone", "sync"])
            try p.run(["-s", "laptop", "sync"])
            XCTAssertEqual(try notes(p, "phone"), before, what)
            XCTAssertEqual(try notes(p, "laptop"), before, what)
            for value in inClear {
                XCTAssertEqual(try recordsHolding(p, value), 0, "\(what): \(value) is in clear in the zone again")
            }
            for s in names { try p.run(["-s", s, "doctor"]) }
            // The container keeps a device's save that another device's save replaced (superseded_saves) until
            // that device's next export: phone's, of note 3, replaced by laptop's sealed one. Once phone has
            // sent something, no earlier version in clear is left either; PostgreSQL keeps no dead row version in
            // a dump, so its whole dump is searched then.
            try p.sql("phone", "INSERT INTO notes VALUES ('\(uuid())', 'more', 'more', 'more')")
            try p.run(["-s", "phone", "sync"])
            try p.run(["-s", "laptop", "sync"])
            before = try notes(p, "laptop")
            XCTAssertEqual(try notes(p, "phone"), before, what)
            for value in inClear {
                XCTAssertEqual(try supersededHolding(p, value), 0, "\(what): \(value) is still in clear in an "
                               + "earlier version of a record the container keeps (superseded_saves), after the "
                               + "device that saved it exported again")
            }
            if serverURL != nil { try assertServerNeverHolds(p, inClear, what) }
        }
    }

    // MARK: 6. What is refused up front, and the passphrase never printed

    func testColumnsThatCannotBeEncryptedAreRefusedAndThePassphraseIsNeverPrinted() throws {
        let p = try E2EProject(label: "storectl-enc-check")
        try p.writeSchema("""
            CREATE TABLE IF NOT EXISTS notes(id TEXT PRIMARY KEY, title TEXT, body TEXT, slug TEXT UNIQUE);
            CREATE TABLE IF NOT EXISTS tags(id TEXT PRIMARY KEY, note_id TEXT REFERENCES notes(id), code TEXT,
                                            label TEXT);
            CREATE UNIQUE INDEX IF NOT EXISTS tags_code ON tags(code);
            CREATE TABLE IF NOT EXISTS pairs(a TEXT NOT NULL, b TEXT NOT NULL, v TEXT, PRIMARY KEY (a, b));
            """)
        let passphrase = "hunter2-enc-\(tag)"
        p.environment["STORECTL_SCRYPT_LOG_N"] = "10"
        p.environment["NOTES_KEY"] = passphrase
        func config(_ entities: [String], key: String? = "${NOTES_KEY}") throws {
            let url = serverURL.map { "'\($0)'" } ?? "file:cloud/shared.container"
            try p.writeConfig([E2EProject.Store("s", before: ["entities:"] + entities,
                                                cloud: E2EProject.Cloud(container: container, url: url, account: account,
                                                                        createIfMissing: serverURL == nil,
                                                                        extra: key.map { ["encryption_key: \($0)"] } ?? []))])
        }
        try config(["  notes: {}", "  tags: {}", "  pairs: {}"])
        try makeContainer(p, "s")
        try p.run(["-s", "s", "init"])
        try p.run(["-s", "s", "cloud", "check"])

        let refused: [(entities: [String], column: String, reason: [String])] = [
            (["  notes: {encrypted: [id]}", "  tags: {}", "  pairs: {}"], "id", ["primary key", "primary-key"]),
            (["  notes: {}", "  tags: {}", "  pairs: {encrypted: [b]}"], "b", ["primary key", "primary-key"]),
            (["  notes: {encrypted: [slug]}", "  tags: {}", "  pairs: {}"], "slug", ["unique"]),
            (["  notes: {}", "  tags: {encrypted: [code]}", "  pairs: {}"], "code", ["unique"]),
            (["  notes: {}", "  tags: {encrypted: [note_id]}", "  pairs: {}"], "note_id", ["foreign key", "reference"]),
            (["  notes: {encrypted: [nope]}", "  tags: {}", "  pairs: {}"], "nope", ["exist", "not a column", "no column", "unknown"]),
        ]
        for c in refused {
            try config(c.entities)
            let check = try p.run(["-s", "s", "cloud", "check"], expect: 65)
            let said = (check.stdout + check.stderr).lowercased()
            XCTAssertTrue(said.contains(c.column) && c.reason.contains { said.contains($0) },
                          "cloud check does not say why '\(c.column)' cannot be encrypted\n\(check)")
            let configText = try p.dir.read("config.yaml")
            try p.run(["-s", "s", "mode", "cloud"], expect: 65)
            XCTAssertEqual(try p.dir.read("config.yaml"), configText)
        }
        // A column of a `unique:` rule: refused by the config itself.
        try config(["  notes: {unique: [title], encrypted: [title]}", "  tags: {}", "  pairs: {}"])
        try p.run(["-s", "s", "cloud", "check"], expect: 78)
        // An encrypted list without a passphrase (none in the config, or an empty variable): the switch is refused
        // with 77, naming the store and the zone, and nothing changes.
        for (key, env) in [(nil, [String: String]()), ("${NOTES_KEY}", ["NOTES_KEY": ""])] as [(String?, [String: String])] {
            try config(["  notes: {encrypted: [title]}", "  tags: {}", "  pairs: {}"], key: key)
            let configText = try p.dir.read("config.yaml")
            let refusedSwitch = try p.run(["-s", "s", "mode", "cloud"], expect: 77, env: env)
            XCTAssertTrue(refusedSwitch.stderr.contains("'s'") && refusedSwitch.stderr.contains("'default'")
                          && refusedSwitch.stderr.contains("encryption_key"), "\(refusedSwitch)")
            XCTAssertEqual(try p.dir.read("config.yaml"), configText)
        }

        // The passphrase, from a variable or written in the config, is never printed.
        for key in ["${NOTES_KEY}", passphrase] {
            try config(["  notes: {encrypted: [title, body]}", "  tags: {}", "  pairs: {}"], key: key)
            try p.run(["-s", "s", "cloud", "check"])
            let get = try p.run(["config", "get", "stores.s.cloud.encryption_key"])
            XCTAssertTrue(get.stdout.contains("${NOTES_KEY}") || get.stdout.contains("<redacted>"), "\(get)")
            for args in [["config", "show"], ["config", "show", "--resolved"], ["--json", "config", "show"],
                         ["--json", "config", "show", "--resolved"], ["config", "get", "stores.s.cloud.encryption_key"],
                         ["--json", "config", "get", "stores.s.cloud.encryption_key"],
                         ["config", "get", "stores.s.cloud"], ["--json", "config", "get", "stores.s"],
                         ["config", "validate"], ["-s", "s", "status"], ["-s", "s", "doctor"]]
            {
                let r = try p.run(args, expect: nil)
                XCTAssertFalse(r.stdout.contains(passphrase) || r.stderr.contains(passphrase),
                               "storectl \(args.joined(separator: " ")) printed the passphrase\n\(r)")
                XCTAssertFalse(r.stdout.contains("hunter2") || r.stderr.contains("hunter2"), "\(args)\n\(r)")
                if args.first != "-s" { XCTAssertEqual(r.status, 0, "storectl \(args.joined(separator: " "))\n\(r)") }
            }
        }
    }
}

/// The same, on PostgreSQL: a container of the test's own on the test server (`STORECTL_TEST_PG_URL`), read with
/// `pg_dump` and forged with `psql` as the server's superuser. With STORECTL_REQUIRE_PG=1 and no server, these fail
/// rather than skip.
final class PostgresEncryptionTests: EncryptionTests {
    override var serverURL: String? { ProcessInfo.processInfo.environment["STORECTL_TEST_PG_URL"] }

    override func setUpWithError() throws {
        try super.setUpWithError()
        try requirePostgresServer()
    }

    // Test discovery on Linux finds a class by the test methods it declares: each scenario is listed here.
    override func testTwoStoresWithOnePassphraseConvergeAndTheServerNeverSeesTheEncryptedColumns() throws {
        try super.testTwoStoresWithOnePassphraseConvergeAndTheServerNeverSeesTheEncryptedColumns()
    }
    override func testAWrongOrMissingPassphraseIsRefusedBeforeAnythingIsWritten() throws {
        try super.testAWrongOrMissingPassphraseIsRefusedBeforeAnythingIsWritten()
    }
    override func testCiphertextSwappedByTheServerIsSetAsideAndNeverApplied() throws {
        try super.testCiphertextSwappedByTheServerIsSetAsideAndNeverApplied()
    }
    override func testRekeyWhileADeviceIsOfflineAndRekeyWithANewDataKey() throws {
        try super.testRekeyWhileADeviceIsOfflineAndRekeyWithANewDataKey()
    }
    override func testEncryptingAPopulatedSyncedColumnReplacesItsValuesInTheZone() throws {
        try super.testEncryptingAPopulatedSyncedColumnReplacesItsValuesInTheZone()
    }
    override func testColumnsThatCannotBeEncryptedAreRefusedAndThePassphraseIsNeverPrinted() throws {
        try super.testColumnsThatCannotBeEncryptedAreRefusedAndThePassphraseIsNeverPrinted()
    }
}
