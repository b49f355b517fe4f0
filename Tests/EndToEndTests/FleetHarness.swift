import Foundation
import StoreBase
import StoreCloud
import StoreCloudPostgres
import StoreSQLite
import TestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Where a fleet's container lives: a container file, or a schema in PostgreSQL.
enum FleetBackend: CustomStringConvertible {
    case file
    case postgres(url: String)

    var description: String {
        switch self {
        case .file: return "file"
        case .postgres: return "postgres"
        }
    }

    static var environment: [String: String] { ProcessInfo.processInfo.environment }

    /// The PostgreSQL backend, or nil (after failing the test when `STORECTL_REQUIRE_PG=1`) without a server.
    static func postgres(file: StaticString = #filePath, line: UInt = #line) -> FleetBackend? {
        guard let url = environment["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            if environment["STORECTL_REQUIRE_PG"] == "1" {
                XCTFail("STORECTL_REQUIRE_PG=1 but STORECTL_TEST_PG_URL is not set: start PostgreSQL (.ci/run does) "
                    + "and export its URL", file: file, line: line)
            } else {
                print("note: STORECTL_TEST_PG_URL is not set; this PostgreSQL test did nothing")
            }
            return nil
        }
        return .postgres(url: url)
    }
}

/// Lost, duplicated and unexpected rows of one comparison, as multisets of row lines.
struct RowDiff: CustomStringConvertible {
    var lost: [String] = []
    /// Extra copies of an expected row.
    var duplicated: [String] = []
    /// Rows that should not exist at all (resurrected, or made up).
    var unexpected: [String] = []

    var isEmpty: Bool { lost.isEmpty && duplicated.isEmpty && unexpected.isEmpty }

    init(expected: [String], actual: [String]) {
        var counts: [String: Int] = [:]
        for r in expected { counts[r, default: 0] += 1 }
        let known = Set(expected)
        for r in actual {
            if let n = counts[r], n > 0 {
                counts[r] = n - 1
            } else if known.contains(r) {
                duplicated.append(r)
            } else {
                unexpected.append(r)
            }
        }
        lost = counts.flatMap { key, n in Array(repeating: key, count: max(n, 0)) }.sorted()
        duplicated.sort()
        unexpected.sort()
    }

    var description: String {
        var parts: [String] = []
        if !lost.isEmpty { parts.append("lost \(lost.count): " + lost.prefix(12).joined(separator: "; ")) }
        if !duplicated.isEmpty {
            parts.append("duplicated \(duplicated.count): " + duplicated.prefix(12).joined(separator: "; "))
        }
        if !unexpected.isEmpty {
            parts.append("unexpected (resurrected or made up) \(unexpected.count): "
                + unexpected.prefix(12).joined(separator: "; "))
        }
        return parts.isEmpty ? "same rows" : parts.joined(separator: "\n")
    }
}

/// Row lines as `StoreDump` writes them, for the expected side of a comparison.
enum Expect {
    static func t(_ s: String) -> String { "t:'\(s)'" }

    static func note(_ uuid: String, _ title: String, _ body: String = "") -> String {
        "notes|body=\(t(body))|title=\(t(title))|uuid=\(t(uuid))"
    }

    /// A note of the cascade schema (uuid and title only).
    static func noteTitle(_ uuid: String, _ title: String) -> String { "notes|title=\(t(title))|uuid=\(t(uuid))" }

    static func setting(_ key: String, _ value: String?) -> String {
        "settings|key=\(t(key))|value=\(value.map(t) ?? "null")"
    }
}

/// What every resilience test compared, added up for the closing report: rows lost, duplicated, resurrected.
enum Tally {
    nonisolated(unsafe) static var comparisons = 0
    nonisolated(unsafe) static var lost = 0
    nonisolated(unsafe) static var duplicated = 0
    nonisolated(unsafe) static var unexpected = 0

    static func add(_ diff: RowDiff) {
        comparisons += 1
        lost += diff.lost.count
        duplicated += diff.duplicated.count
        unexpected += diff.unexpected.count
    }

    static var line: String {
        "\(comparisons) store comparisons; lost \(lost), duplicated \(duplicated), resurrected or unexpected \(unexpected)"
    }
}

/// A store's user rows by value, in a form that compares across stores.
///
/// Each row is one line: `table|col=value|...`, columns sorted by name. Values carry their storage class
/// (`i:1`, `r:0.30000000000000004`, `t:'a'` or `t:x'610062'` for text that is not printable UTF-8, `b:x'..'`,
/// `null`), exactly: reals by their shortest round-trip form, text and blobs by their bytes. A rowid key never
/// travels between stores, so it is left out; a foreign key to a rowid-keyed table is written as the parent's
/// values (`->notes{...}`), so the same link compares equal whatever the rowids are on each store.
enum StoreDump {
    /// The user's tables: not storectl's own, not SQLite's, not virtual tables or their shadow tables.
    static func userTables(_ db: Connection) throws -> [String] {
        try db.query("""
            SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table'
              AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE '\\_storectl\\_%' ESCAPE '\\'
            ORDER BY name
            """).compactMap { $0[0].string }
    }

    /// Whether `table`'s primary key is SQLite's rowid (a lone `INTEGER PRIMARY KEY`, not `DESC`, in a rowid table).
    static func rowidKey(_ db: Connection, _ table: String) throws -> String? {
        let pk = try db.columns(of: table).filter { $0.primaryKeyIndex > 0 }
        guard pk.count == 1, pk[0].declaredType.uppercased() == "INTEGER" else { return nil }
        let withoutRowid = try db.scalar("SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?",
                                         [table])?.int64 == 1
        if withoutRowid { return nil }
        // `INTEGER PRIMARY KEY DESC` is an ordinary column with a unique index of origin 'pk'.
        let pkIndex = try db.scalar("SELECT 1 FROM pragma_index_list(?) WHERE origin = 'pk'", [table]) != nil
        return pkIndex ? nil : pk[0].name
    }

    static func format(_ type: String, _ value: Value) -> String {
        switch type {
        case "null": return "null"
        case "integer": return "i:\(value.int64 ?? 0)"
        case "real":
            if case .real(let d) = value { return "r:\(d)" }
            return "r:?\(value)"
        case "text", "blob":
            let bytes = Hex.bytes(value.string ?? "") ?? []
            let tag = type == "text" ? "t" : "b"
            if type == "text", let s = String(validating: bytes, as: UTF8.self),
               !s.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7f }), !s.contains("|")
            {
                return "t:'\(s.count > 120 ? String(s.prefix(60)) + "...(\(bytes.count) bytes)" : s)'"
            }
            if bytes.count > 64 { return "\(tag):x'\(value.string?.prefix(64) ?? "")...(\(bytes.count) bytes)'" }
            return "\(tag):x'\(value.string ?? "")'"
        default:
            return "?\(type):\(value)"
        }
    }

    /// One table's rows: (rowid or nil, values by column name).
    private static func read(_ db: Connection, _ table: String, columns: [String], rowid: String?) throws
        -> [(rowid: Int64?, values: [String: String])]
    {
        var select = columns.map { c -> String in
            let q = quoteIdentifier(c)
            return "typeof(\(q)), CASE WHEN typeof(\(q)) IN ('text', 'blob') THEN hex(\(q)) ELSE \(q) END"
        }
        if let rowid { select.append(quoteIdentifier(rowid)) }
        let rows = try db.query("SELECT \(select.joined(separator: ", ")) FROM main.\(quoteIdentifier(table))")
        return rows.map { row in
            var values: [String: String] = [:]
            for (i, c) in columns.enumerated() {
                values[c] = format(row[2 * i].string ?? "null", row[2 * i + 1])
            }
            return (rowid.map { _ in row[2 * columns.count].int64 ?? -1 }, values)
        }
    }

    /// The rows of `tables` (default: every user table) of the store file at `path`, sorted.
    static func rows(path: String, tables: [String]? = nil) throws -> [String] {
        let db = try Connection(path: path, mode: .readOnly, wal: false, foreignKeys: false)
        let names = try tables ?? userTables(db)
        struct Shape {
            var columns: [String]
            var rowid: String?
            /// Column -> the rowid-keyed parent table it points at.
            var refs: [String: String]
        }
        var shapes: [String: Shape] = [:]
        var all = Set(names)
        // Parents of the listed tables are read too, so that references can be written as the parent's values.
        var queue = names
        while let table = queue.popLast() {
            let columns = try db.columns(of: table).map(\.name).sorted()
            var refs: [String: String] = [:]
            for fk in try db.foreignKeys(of: table) where fk.columns.count == 1 {
                guard try db.tableExists(fk.parentTable), let parentKey = try rowidKey(db, fk.parentTable) else {
                    continue
                }
                let target = fk.parentColumns.first ?? nil
                if target == nil || target == parentKey {
                    refs[fk.columns[0]] = fk.parentTable
                    if !all.contains(fk.parentTable) {
                        all.insert(fk.parentTable)
                        queue.append(fk.parentTable)
                    }
                }
            }
            shapes[table] = Shape(columns: columns, rowid: try rowidKey(db, table), refs: refs)
        }
        var data: [String: [(rowid: Int64?, values: [String: String])]] = [:]
        for (table, shape) in shapes {
            data[table] = try read(db, table, columns: shape.columns, rowid: shape.rowid)
        }
        // A parent's identity: its values without its rowid and without its own references.
        var identity: [String: [Int64: String]] = [:]
        for (table, shape) in shapes where shape.rowid != nil {
            var byRowid: [Int64: String] = [:]
            for row in data[table] ?? [] {
                let parts = shape.columns.filter { $0 != shape.rowid && shape.refs[$0] == nil }
                    .map { "\($0)=\(row.values[$0] ?? "?")" }
                if let id = row.rowid { byRowid[id] = parts.joined(separator: ",") }
            }
            identity[table] = byRowid
        }
        var out: [String] = []
        for table in names {
            guard let shape = shapes[table] else { continue }
            for row in data[table] ?? [] {
                var parts = [table]
                for c in shape.columns where c != shape.rowid {
                    var v = row.values[c] ?? "?"
                    if let parent = shape.refs[c], v.hasPrefix("i:"), let id = Int64(v.dropFirst(2)) {
                        v = identity[parent]?[id].map { "->\(parent){\($0)}" } ?? "->\(parent){dangling \(v)}"
                    }
                    parts.append("\(c)=\(v)")
                }
                out.append(parts.joined(separator: "|"))
            }
        }
        return out.sorted()
    }
}

/// Reading storectl's JSON documents by key, whether a key is spelled `pending_export` or `pendingExport`.
enum JSONDoc {
    static func parse(_ text: String) -> Any? {
        guard let data = text.data(using: .utf8) else { return nil }
        return try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])
    }

    private static func normalized(_ key: String) -> String { key.lowercased().replacingOccurrences(of: "_", with: "") }

    /// The value at `path` (object keys, or array indexes as numbers).
    static func get(_ object: Any?, _ path: String...) -> Any? {
        var current = object
        for key in path {
            if let dict = current as? [String: Any] {
                current = dict.first { normalized($0.key) == normalized(key) }?.value
            } else if let array = current as? [Any], let i = Int(key), i < array.count {
                current = array[i]
            } else {
                return nil
            }
        }
        return current
    }

    static func int(_ object: Any?, _ path: String...) -> Int? {
        var current = object
        for key in path { current = get(current, key) }
        return (current as? NSNumber)?.intValue
    }
}

/// Stores that share one container, driven through the real `storectl` binary and the `sqlite3` shell, with the
/// checks every multi-store test makes: integrity, rows by value on every store, in the cloud and on a store that
/// joins last, and what `status` and `doctor` say. It is the one harness of the multi-store end-to-end tests:
/// `Fleet.notes` is the notes schema the reliability tests share, and any other schema is a parameter.
///
/// A fleet has one more store than asked for, `late` (unless `late: false`): it stays uninitialised until
/// `joinLate()` brings it to cloud mode from nothing, so that it receives exactly what the cloud holds live.
final class Fleet {
    static let secret = "fleet-secret"
    static let lateStore = "late"

    let dir: TempDirectory
    let backend: FleetBackend
    let containerID: String
    /// The container file's secret (file backend).
    let secret: String
    /// The stores asked for, without `late`.
    let stores: [String]
    /// Whether the config has the `late` store.
    let hasLate: Bool
    /// Each store's `mode:` as the harness last wrote it (`configText` writes these).
    var modes: [String: String]
    /// Whether `sql` turns foreign keys on unless told (the app's connection); the notes fleet's tests write as a
    /// plain `sqlite3` shell does, without them.
    var foreignKeysByDefault = true
    private var pgContainer: PostgresCloudDatabase?
    private(set) var cloudYAML = ""
    private let storeYAML: String
    private let cloudExtra: String
    private let cloudExtraByStore: [String: String]
    /// The `url:` line of every store's `cloud:` section.
    private var cloudURLYAML = ""
    /// Stores that sign in as another account than the fleet's: store -> (account, secret).
    private let accountByStore: [String: (account: String, secret: String)]

    /// - Parameters:
    ///   - schema: the SQL every store's `init` runs.
    ///   - storeYAML: extra YAML under each store (`entities:`, `seed:`), indented by four spaces.
    ///   - cloudExtra: extra YAML under each store's `cloud:`, indented by six spaces.
    ///   - cloudExtraByStore: extra YAML under the `cloud:` of the stores named, after `cloudExtra`.
    ///   - container: the container's identifier (a random one unless given).
    ///   - late: whether the config has the `late` store.
    ///   - accountByStore: the stores that sign in as an account of their own (a participant of a share), with
    ///     its secret; the account must exist in the container before the store uses it.
    init(stores: [String] = ["a", "b"], backend: FleetBackend, schema: String, storeYAML: String = "",
         cloudExtra: String = "", cloudExtraByStore: [String: String] = [:], label: String = "storectl-fleet",
         container: String? = nil, secret: String = Fleet.secret, late: Bool = true,
         accountByStore: [String: (account: String, secret: String)] = [:]) throws
    {
        self.cloudExtraByStore = cloudExtraByStore
        self.accountByStore = accountByStore
        dir = try TempDirectory(label)
        self.backend = backend
        self.stores = stores
        self.secret = secret
        self.storeYAML = storeYAML
        self.cloudExtra = cloudExtra
        hasLate = late
        containerID = container ?? "test.fleet.\(UInt32.random(in: 0...UInt32.max))"
        modes = Dictionary(uniqueKeysWithValues: (stores + (late ? [Self.lateStore] : [])).map { ($0, "local") })
        try dir.write("schema.sql", schema)
        switch backend {
        case .file:
            try FileManager.default.createDirectory(atPath: dir.file("cloud"), withIntermediateDirectories: true)
            _ = try FileCloudDatabase.create(path: dir.file("cloud/shared.container"), container: containerID,
                                             account: "demo", secret: secret, iterations: 1)
            cloudURLYAML = "url: file:cloud/shared.container"
            cloudYAML = "\(cloudURLYAML)\n      account: demo\n      secret: \(secret)"
        case .postgres(let url):
            let pg = try PostgresCloudDatabase(url: url, container: containerID)
            _ = try pg.initializeContainer()
            pgContainer = pg
            cloudURLYAML = "url: '\(url)'"
            cloudYAML = "\(cloudURLYAML)\n      account: \(pg.role ?? "postgres")\n      secret: unused-with-trust"
        }
        let config = try dir.write("config.yaml", configText(modes))
        chmod(config, 0o600)
        try FileManager.default.createDirectory(atPath: dir.file("data"), withIntermediateDirectories: true)
    }

    /// The exact bytes of the fleet's config.yaml with these modes (a store not named is `local`).
    func configText(_ modes: [String: String]) -> String {
        var yaml = "# reliability test config\nversion: 1\nstores:\n"
        for name in stores + (hasLate ? [Self.lateStore] : []) {
            let cloudYAML = accountByStore[name].map {
                "\(cloudURLYAML)\n      account: \($0.account)\n      secret: \($0.secret)"
            } ?? self.cloudYAML
            yaml += """
                  \(name):
                    path: data/\(name).sqlite   # the store file
                    schema: schema.sql
                    mode: \(modes[name] ?? "local")
                    history:
                      author: app-\(name)
                    cloud:
                      container: \(containerID)
                      \(cloudYAML)

                """
            if !cloudExtra.isEmpty { yaml += cloudExtra.hasSuffix("\n") ? cloudExtra : cloudExtra + "\n" }
            if let extra = cloudExtraByStore[name], !extra.isEmpty {
                yaml += extra.hasSuffix("\n") ? extra : extra + "\n"
            }
            if !storeYAML.isEmpty { yaml += storeYAML.hasSuffix("\n") ? storeYAML : storeYAML + "\n" }
        }
        return yaml
    }

    /// The config file as it is now.
    var config: String { (try? dir.read("config.yaml")) ?? "" }

    deinit { try? pgContainer?.deleteContainer() }

    func path(_ store: String) -> String { dir.file("data/\(store).sqlite") }

    var configPath: String { dir.file("config.yaml") }

    /// Runs `storectl --store STORE args...`; checks the exit code unless `expect` is nil.
    @discardableResult
    func run(_ store: String?, _ args: [String], env: [String: String] = [:], expect: Int32? = 0,
             file: StaticString = #filePath, line: UInt = #line) throws -> ProcessResult
    {
        let r = try Binary.storectl((store.map { ["--store", $0] } ?? []) + args, in: dir.path, environment: env)
        if let expect, r.status != expect {
            XCTFail("[\(backend)] storectl \(args.joined(separator: " ")) on \(store ?? "-"): expected exit \(expect)\n\(r)",
                    file: file, line: line)
        }
        return r
    }

    /// Runs `storectl --json ...` and parses its document.
    func json(_ store: String?, _ args: [String], env: [String: String] = [:], expect: Int32? = 0,
              file: StaticString = #filePath, line: UInt = #line) throws -> (result: ProcessResult, doc: Any?)
    {
        let r = try run(store, ["--json"] + args, env: env, expect: expect, file: file, line: line)
        return (r, JSONDoc.parse(r.stdout))
    }

    /// Runs SQL on a store with the `sqlite3` shell, as the app would (foreign keys on, unless asked otherwise).
    @discardableResult
    func sql(_ store: String, _ statement: String, foreignKeys: Bool? = nil, file: StaticString = #filePath,
             line: UInt = #line) throws -> String
    {
        let text = (foreignKeys ?? foreignKeysByDefault ? "PRAGMA foreign_keys = ON;\n" : "") + statement
        let r = try Binary.run("/usr/bin/sqlite3", ["-cmd", ".timeout 5000", path(store), text], in: dir.path)
        if r.status != 0 { XCTFail("[\(backend)] sqlite3 on \(store): \(statement)\n\(r)", file: file, line: line) }
        return r.stdout
    }

    /// Runs SQL on a store with the `sqlite3` shell and returns the result, failing or not.
    func trySQL(_ store: String, _ statement: String) throws -> ProcessResult {
        try Binary.run("/usr/bin/sqlite3", ["-cmd", ".timeout 5000", path(store), statement], in: dir.path)
    }

    /// Runs SQL on the container file with the `sqlite3` shell (file backend only).
    @discardableResult
    func containerSQL(_ statement: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        let r = try Binary.run("/usr/bin/sqlite3", ["-cmd", ".timeout 5000", dir.file("cloud/shared.container"),
                                                    statement], in: dir.path)
        if r.status != 0 { XCTFail("[\(backend)] sqlite3 on the container: \(statement)\n\(r)", file: file, line: line) }
        return r.stdout
    }

    /// The PostgreSQL schema that holds the container (postgres backend only).
    var pgSchema: String { PostgresCloudDatabase.schemaName(container: containerID) }

    /// Runs SQL on the PostgreSQL server with `psql`, as another machine writing into the container would.
    @discardableResult
    func psql(_ statement: String, file: StaticString = #filePath, line: UInt = #line) throws -> String {
        guard case .postgres(let url) = backend else {
            XCTFail("psql on a file fleet", file: file, line: line)
            return ""
        }
        let env = ProcessInfo.processInfo.environment
        let bin = env["STORECTL_TEST_PG_BIN"].map { $0 + "/psql" } ?? "/usr/bin/psql"
        let r = try Binary.run(bin, ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", statement],
                               in: dir.path)
        if r.status != 0 { XCTFail("[\(backend)] psql: \(statement)\n\(r)", file: file, line: line) }
        return r.stdout
    }

    /// The container, opened as the fleet's account.
    func cloud() throws -> any CloudDatabase {
        switch backend {
        case .file:
            return try FileCloudDatabase.open(path: dir.file("cloud/shared.container"), container: containerID,
                                              account: "demo", secret: secret)
        case .postgres(let url):
            return try PostgresCloudDatabase(url: url, container: containerID)
        }
    }

    /// Every record of the zone, tombstones included, in seq order.
    func cloudRecords(zone: String = "default") throws -> [CloudRecord] {
        let cloud = try cloud()
        guard try cloud.zoneInfo(zone, countLive: false) != nil else { return [] }
        var token: ServerChangeToken?
        var out: [CloudRecord] = []
        while true {
            let batch = try cloud.fetchChanges(zone: zone, since: token, limit: 5000, excludingDevice: nil)
            out += batch.records
            token = batch.token
            if !batch.moreComing { break }
        }
        return out
    }

    /// How many live records of each type the zone holds.
    func liveCloudCounts() throws -> [String: Int] {
        var counts: [String: Int] = [:]
        for r in try cloudRecords() where !r.deleted { counts[r.recordType, default: 0] += 1 }
        return counts
    }

    /// A store's rows by value (see `StoreDump`).
    func rows(_ store: String, tables: [String]? = nil) throws -> [String] {
        try StoreDump.rows(path: path(store), tables: tables)
    }

    /// How many rows each of `tables` holds on `store`.
    func counts(_ store: String, tables: [String]) throws -> [String: Int] {
        let db = try Connection(path: path(store), mode: .readOnly, wal: false, foreignKeys: false)
        var out: [String: Int] = [:]
        for t in tables { out[t] = Int(try db.scalar("SELECT count(*) FROM \(quoteIdentifier(t))")?.int64 ?? 0) }
        return out
    }

    func integrity(_ store: String) throws -> [String] {
        let db = try Connection(path: path(store), mode: .readOnly, wal: false, foreignKeys: false)
        var problems = try db.integrityCheck().filter { $0 != "ok" }
        problems += try db.query("PRAGMA foreign_key_check").map { "foreign key: \($0.values.map(\.description))" }
        return problems
    }

    /// Brings `store` to cloud mode (creating it from the schema when it does not exist yet).
    func cloudMode(_ store: String, file: StaticString = #filePath, line: UInt = #line) throws {
        try run(store, ["mode", "cloud"], file: file, line: line)
    }

    /// Stores a and b in the cloud under `merge_policy: policy`, both holding the rows `rows` inserts on a.
    static func pair(_ backend: FleetBackend, schema: String, policy: String, storeYAML: String = "", rows: String,
                     label: String) throws -> Fleet
    {
        let f = try Fleet(backend: backend, schema: schema, storeYAML: storeYAML,
                          cloudExtra: "      merge_policy: \(policy)", label: label)
        try f.cloudMode("a")
        try f.cloudMode("b")
        try f.sql("a", rows)
        try f.syncRounds(2, ["a", "b"])
        return f
    }

    /// a's rows of `table`, after checking that they are `count` rows, that b holds the same, that every store is
    /// healthy and that the cloud holds one live record per row.
    func settledRows(_ table: String, count: Int, _ what: String, file: StaticString = #filePath,
                     line: UInt = #line) throws -> [String]
    {
        let rows = try self.rows("a", tables: [table])
        XCTAssertEqual(rows.count, count, "\(what): no row lost or merged: \(rows)", file: file, line: line)
        XCTAssertEqual(try self.rows("b", tables: [table]), rows, "\(what): the stores agree", file: file, line: line)
        for s in stores { try assertHealthy(s, what, file: file, line: line) }
        XCTAssertEqual(try liveCloudCounts()[table] ?? 0, count, "\(what): one live record per row", file: file,
                       line: line)
        return rows
    }

    /// Initialises `store` in local mode.
    func initialise(_ store: String, file: StaticString = #filePath, line: UInt = #line) throws {
        try run(store, ["init"], file: file, line: line)
    }

    /// One sync of each store, in order, `rounds` times; each must exit 0.
    func syncRounds(_ rounds: Int = 2, _ order: [String]? = nil, file: StaticString = #filePath,
                    line: UInt = #line) throws
    {
        for _ in 0..<rounds {
            for s in order ?? stores { try run(s, ["sync"], file: file, line: line) }
        }
    }

    /// Brings `late` into cloud mode from nothing (once), or syncs it.
    func joinLate(file: StaticString = #filePath, line: UInt = #line) throws {
        if FileManager.default.fileExists(atPath: path(Self.lateStore)) {
            try run(Self.lateStore, ["sync"], file: file, line: line)
        } else {
            try run(Self.lateStore, ["mode", "cloud"], file: file, line: line)
        }
    }

    /// Copies a store file aside (the store must be closed: no `-wal` file may exist).
    func backup(_ store: String, as name: String, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertFalse(FileManager.default.fileExists(atPath: path(store) + "-wal"),
                       "\(store) has a -wal file: a copy of the store file alone would not be the store",
                       file: file, line: line)
        let target = dir.file("backups/\(name).sqlite")
        try FileManager.default.createDirectory(atPath: dir.file("backups"), withIntermediateDirectories: true)
        try? FileManager.default.removeItem(atPath: target)
        try FileManager.default.copyItem(atPath: path(store), toPath: target)
    }

    /// Copies a backup back over the live store file, as a user restoring a backup would.
    func restore(_ store: String, from name: String) throws {
        for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path(store) + suffix) }
        try FileManager.default.copyItem(atPath: dir.file("backups/\(name).sqlite"), toPath: path(store))
    }

    /// `storectl status --json` of one store (the store's own object when the document lists several).
    func status(_ store: String, env: [String: String] = [:], file: StaticString = #filePath, line: UInt = #line)
        throws -> (result: ProcessResult, doc: Any?)
    {
        let (r, doc) = try json(store, ["status"], env: env, expect: nil, file: file, line: line)
        if let list = JSONDoc.get(doc, "stores") as? [Any], let first = list.first { return (r, first) }
        return (r, doc)
    }

    /// `storectl doctor --json` of one store.
    func doctor(_ store: String, env: [String: String] = [:], file: StaticString = #filePath, line: UInt = #line)
        throws -> (result: ProcessResult, healthy: Bool)
    {
        let (r, doc) = try json(store, ["doctor"], env: env, expect: nil, file: file, line: line)
        let healthy = (JSONDoc.get(doc, "healthy") as? Bool) ?? false
        return (r, healthy && r.status == 0)
    }

    /// Checks that `status` and `doctor` call `store` converged: nothing pending, nothing set aside, healthy.
    /// `env` is added to storectl's environment (the variables the config's `${...}` references name).
    func assertHealthy(_ store: String, _ what: String, env: [String: String] = [:], file: StaticString = #filePath,
                       line: UInt = #line) throws
    {
        let (status, doc) = try self.status(store, env: env, file: file, line: line)
        XCTAssertEqual(status.status, 0, "[\(backend)] \(what): status of \(store)\n\(status)", file: file, line: line)
        XCTAssertEqual(JSONDoc.int(doc, "pending_export"), 0,
                       "[\(backend)] \(what): status of \(store) shows changes pending export\n\(status.stdout)",
                       file: file, line: line)
        let disagreements = (JSONDoc.get(doc, "disagreements") as? [Any]) ?? []
        XCTAssertTrue(disagreements.isEmpty, "[\(backend)] \(what): status of \(store) lists disagreements\n"
                      + status.stdout, file: file, line: line)
        let (doctor, healthy) = try self.doctor(store, env: env, file: file, line: line)
        XCTAssertTrue(healthy, "[\(backend)] \(what): doctor does not call \(store) healthy\n\(doctor)",
                      file: file, line: line)
        let pending = try parkedRecords(store)
        XCTAssertEqual(pending, [], "[\(backend)] \(what): \(store) still holds records waiting in "
                       + "the inbox", file: file, line: line)
    }

    /// Checks that `status` and `doctor` do NOT call `store` healthy, and that both name each of `mentions`
    /// (a record name, a table).
    func assertReported(_ store: String, mentions: [String], _ what: String, file: StaticString = #filePath,
                        line: UInt = #line) throws
    {
        let (doctor, healthy) = try self.doctor(store, file: file, line: line)
        XCTAssertFalse(healthy, "[\(backend)] \(what): doctor calls \(store) healthy while records are set aside\n"
                       + "\(doctor)", file: file, line: line)
        let (status, _) = try self.status(store, file: file, line: line)
        for m in mentions {
            // In JSON, a name's quotes and backslashes are escaped.
            let escaped = m.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
                .replacingOccurrences(of: "/", with: "\\/")
            let forms = [m, escaped, m.replacingOccurrences(of: "\"", with: "\\\"")]
            XCTAssertTrue(forms.contains { doctor.stdout.contains($0) }, "[\(backend)] \(what): doctor --json of "
                          + "\(store) does not name '\(m)'\n\(doctor.stdout.prefix(3000))", file: file, line: line)
            XCTAssertTrue(forms.contains { status.stdout.contains($0) }, "[\(backend)] \(what): status --json of "
                          + "\(store) does not name '\(m)'\n\(status.stdout.prefix(3000))", file: file, line: line)
        }
    }

    /// Record names waiting for a parent in the inbox of `store` (empty when the table does not exist).
    func parkedRecords(_ store: String) throws -> [String] {
        let db = try Connection(path: path(store), mode: .readOnly, wal: false, foreignKeys: false)
        guard try db.tableExists("_storectl_inbox") else { return [] }
        return try db.query("SELECT record_name FROM _storectl_inbox WHERE state = 'waiting' ORDER BY 1")
            .compactMap { $0[0].string }
    }

    /// Compares every one of `stores` (and `late`, which joins now, when `late` is true) with `expected`:
    /// integrity, then rows by value. Every difference fails the test, counted as lost, duplicated or
    /// unexpected; the diffs are returned by store.
    @discardableResult
    func assertRows(_ expected: [String], stores: [String]? = nil, tables: [String]? = nil, late: Bool = true,
                    _ what: String, file: StaticString = #filePath, line: UInt = #line) throws -> [String: RowDiff]
    {
        var names = stores ?? self.stores
        if late {
            try joinLate(file: file, line: line)
            names.append(Self.lateStore)
        }
        var diffs: [String: RowDiff] = [:]
        for s in names {
            XCTAssertEqual(try integrity(s), [], "[\(backend)] \(what): integrity of \(s)", file: file, line: line)
            let diff = RowDiff(expected: expected.sorted(), actual: try rows(s, tables: tables))
            Tally.add(diff)
            diffs[s] = diff
            if !diff.isEmpty {
                XCTFail("[\(backend)] \(what): store \(s) differs from what it must hold:\n\(diff)", file: file,
                        line: line)
            }
        }
        return diffs
    }

    /// Checks that `stores` (and `late`) all hold the same rows as the first of them, and returns those rows.
    @discardableResult
    func assertSameRows(stores: [String]? = nil, tables: [String]? = nil, late: Bool = true, _ what: String,
                        file: StaticString = #filePath, line: UInt = #line) throws -> [String]
    {
        var names = stores ?? self.stores
        if late {
            try joinLate(file: file, line: line)
            names.append(Self.lateStore)
        }
        let reference = try rows(names[0], tables: tables)
        for s in names {
            XCTAssertEqual(try integrity(s), [], "[\(backend)] \(what): integrity of \(s)", file: file, line: line)
        }
        for s in names.dropFirst() {
            let diff = RowDiff(expected: reference, actual: try rows(s, tables: tables))
            Tally.add(diff)
            if !diff.isEmpty {
                XCTFail("[\(backend)] \(what): store \(s) differs from \(names[0]) (\(names[0]) has "
                        + "\(reference.count) rows):\n\(diff)", file: file, line: line)
            }
        }
        return reference
    }
}

/// A `storectl` process that the test kills with SIGKILL after a delay, as `kill -9` would.
enum Killer {
    /// Runs `storectl args` in `directory` and kills it after `microseconds` (if it is still running).
    /// Returns the exit status: 137 when it was killed, else its own.
    static func run(_ args: [String], in directory: String, afterMicroseconds microseconds: UInt32,
                    environment: [String: String] = [:]) throws -> Int32
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Binary.storectl)
        process.arguments = args
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        var env: [String: String] = ["NO_COLOR": "1"]
        for key in ["PATH", "HOME", "TMPDIR", "LANG", "STORECTL_TEST_PG_URL"] {
            if let v = ProcessInfo.processInfo.environment[key] { env[key] = v }
        }
        for (k, v) in environment { env[k] = v }
        process.environment = env
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        usleep(microseconds)
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
    }
}

/// A record another machine writes straight into the container.
struct PlantedRecord {
    var name: String
    var type: String
    /// The fields as SQL text: a literal, or an expression (a 50 MB field is built by the SQL).
    var fieldsSQL: String
    var bad: Bool
    var why: String
    var seq: Int64 = 0
}

extension Fleet {
    /// SQL for one text literal (the same in SQLite and PostgreSQL).
    static func sqlLiteral(_ s: String) -> String { "'" + s.replacingOccurrences(of: "'", with: "''") + "'" }

    /// The last seq of the zone `default`.
    func lastSeq() throws -> Int64 {
        switch backend {
        case .file:
            return Int64(try containerSQL("SELECT last_seq FROM zones WHERE name = 'default'")
                .trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        case .postgres:
            return Int64(try psql("SELECT last_seq FROM \(pgSchema).zones WHERE name = 'default'")
                .trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0
        }
    }

    /// Writes `records` into the zone the way a careless or hostile machine could: no check of the fields (the
    /// container's own check is bypassed, as an older writer or a hand-edited container would). Each record gets
    /// the next seq.
    func plant(_ records: inout [PlantedRecord]) throws {
        var seq = try lastSeq()
        var statements: [String] = []
        let q = Self.sqlLiteral
        for i in records.indices {
            seq += 1
            records[i].seq = seq
            let r = records[i]
            let table = backend.isFile ? "records" : "\(pgSchema).records"
            statements.append("""
                INSERT INTO \(table)(zone, record_name, record_type, fields, change_tag, seq, deleted, modified_by,
                                     modified_at)
                VALUES ('default', \(q(r.name)), \(q(r.type)), \(r.fieldsSQL), 'evil-\(seq)', \(seq),
                        \(backend.isFile ? "0" : "false"), 'evil-device', 0)
                ON CONFLICT (zone, record_name) DO UPDATE SET record_type = excluded.record_type,
                    fields = excluded.fields, change_tag = excluded.change_tag, seq = excluded.seq,
                    deleted = excluded.deleted, modified_by = excluded.modified_by;
                """)
        }
        switch backend {
        case .file:
            try containerSQL("PRAGMA ignore_check_constraints = 1; BEGIN;" + statements.joined(separator: "\n")
                             + "UPDATE zones SET last_seq = \(seq) WHERE name = 'default'; COMMIT;")
        case .postgres:
            try psql("ALTER TABLE \(pgSchema).records DROP CONSTRAINT IF EXISTS records_fields_object;"
                     + "ALTER TABLE \(pgSchema).records DROP CONSTRAINT IF EXISTS records_fields_check;"
                     + "BEGIN;" + statements.joined(separator: "\n")
                     + "UPDATE \(pgSchema).zones SET last_seq = \(seq) WHERE name = 'default'; COMMIT;")
        }
    }
}

extension FleetBackend {
    var isFile: Bool {
        if case .file = self { return true }
        return false
    }
}
