import Foundation
import StoreBase
import StoreCloud
import StoreCloudPostgres
import StoreConfig
import StoreControl
import StoreMirror
import StoreSQLite

#if canImport(Glibc)
import Glibc
#endif

/// `storectl-bench encryption`: the baseline export and the import of the same N rows, once with no column
/// encrypted and once with one column (`body`) encrypted (`entities.notes.encrypted: [body]`,
/// `cloud.encryption_key`), in one run, alternating, the median of R runs of each. No target: the figure is what
/// one encrypted column costs.
enum EncryptionBenchmark {
    static let help = """
        usage: storectl-bench encryption [--rows N] [--repeat R] [--no-process] [--postgres] [--json]

        One table, N rows (default 20000), written through the history triggers by author 'app':
          notes(uuid TEXT PRIMARY KEY, title TEXT, body TEXT, author TEXT, updated_at INTEGER)
        (random version-4 UUIDs, 200-byte bodies). Two configs that differ only in encryption:
          plain:     entities: { notes: {} }
          encrypted: entities: { notes: { encrypted: [body] } }, cloud.encryption_key: ${VAR}
        Each run, for each config (the order alternates from run to run; one untimed run of each comes first):
          export: a copy of the N-row store, its container file made first (as 'storectl cloud init' makes it),
                  Mirror.exportChanges into the empty zone (the baseline export);
          import: a new, empty store, Mirror.importChanges of every record.
          Opening the mirror is timed apart: with encryption it makes the zone's key (export side) or opens it
          (import side), one scrypt derivation (N = 2^15, r = 8, p = 1 unless STORECTL_SCRYPT_LOG_N says
          otherwise; the figure names the cost the zone's key record holds), once per process.
          process (unless --no-process): the same two steps as whole release 'storectl --config ... mode cloud'
                  processes (the copy of the populated store; then a new store), key derivation included.
        Every run is checked: N records saved and N applied, every body sealed ({"$enc": ...}) and no body text
        in the container with encryption, none sealed without, and the new store's rows equal to the source's.
        Figures: encrypted rows/s as a share of plain rows/s (the ratio of the medians of R runs); rows/s of
        each beside. With --postgres, the engine export and import also run against the PostgreSQL server of
        STORECTL_TEST_PG_URL (needs psql; the figures say skipped without it).
        R is at least 3 (default 7).
        """

    /// The passphrase of the encrypted config, passed to storectl through this environment variable.
    static let keyVariable = "STORECTL_BENCH_ENCRYPTION_KEY"
    static let passphrase = "bench-passphrase-not-for-production"
    static let defaultRows = 20_000
    static let bodyBytes = 200
    static let schemaSummary = "notes(uuid TEXT PRIMARY KEY, title, body, author TEXT, updated_at INTEGER), "
        + "\(bodyBytes)-byte bodies"

    static let schemaSQL = """
        CREATE TABLE notes(uuid TEXT PRIMARY KEY, title TEXT NOT NULL, body TEXT NOT NULL, author TEXT NOT NULL,
                           updated_at INTEGER NOT NULL);
        """

    /// Longer than a body, so that each row's body is a different 193-byte window of it.
    static let lorem = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut "
        + "labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi "
        + "ut aliquip ex ea commodo consequat. Duis aute irure dolor in reprehenderit in voluptate velit esse "
        + "cillum dolore eu fugiat nulla pariatur."

    enum Variant: String, CaseIterable {
        case plain
        case encrypted
    }

    /// Where the containers go: the file container (always) or a PostgreSQL server.
    struct Backend {
        var id: String
        var url: (_ container: String) -> String
        var account: String
        /// Makes `container` absent (a file removed, a schema dropped).
        var reset: (_ container: String) throws -> Void
        /// Counts of the zone's live `notes` records: all, with a sealed body, with body text in clear anywhere in
        /// the fields; and the key record's log2(N) (nil without one).
        var inspect: (_ container: String) throws -> (records: Int, sealed: Int, clearBodies: Int, logN: Int?)
    }

    /// One run of one config.
    struct EngineRun {
        var openExport: Double
        var export: Double
        var openImport: Double
        var importSeconds: Double
        var logN: Int?
    }

    static func main(_ argv: [String]) throws {
        var args: [String] = []
        var process = true
        var postgres = false
        for arg in argv {
            switch arg {
            case "--no-process": process = false
            case "--postgres": postgres = true
            case "--schema", "--engine-runs", "--sizes", "--history-rows":
                throw StoreError(.usage, "storectl-bench encryption does not take \(arg)",
                                 hint: "see 'storectl-bench encryption --help'")
            default: args.append(arg)
            }
        }
        if !args.contains("--rows") && !args.contains("--help") && !args.contains("-h") {
            args = ["--rows", String(defaultRows)] + args
        }
        try Runner.main("encryption", args, help: help) { lab, options, report in
            guard options.repeats >= 3 else {
                throw StoreError(.usage, "--repeat must be at least 3 for a median, got \(options.repeats)")
            }
            report.schema = schemaSummary
            report.figures = try figures(lab, options, process: process, postgres: postgres)
        }
    }

    // MARK: Stores

    static func environment() -> [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment[Lab.secretVariable] = Lab.secret
        environment[keyVariable] = passphrase
        return environment
    }

    /// Writes folder `name`'s config.yaml (the `notes` store, mode local) for `variant`.
    static func writeConfig(_ lab: Lab, _ name: String, variant: Variant, backend: Backend, container: String) throws {
        let folder = lab.path(name)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let url = backend.url(container)
        var cloud = ["container: \(container)", "url: \"\(url)\""]
        if url.hasPrefix("file:") { cloud.append("create_if_missing: true") }
        cloud += ["zone: default", "account: \(backend.account)", "secret: ${\(Lab.secretVariable)}"]
        let entity: String
        switch variant {
        case .plain:
            entity = "      notes: {}"
        case .encrypted:
            cloud.append("encryption_key: ${\(keyVariable)}")
            entity = "      notes:\n        encrypted: [body]"
        }
        let yaml = """
            version: 1
            stores:
              notes:
                path: store.sqlite
                schema: \(lab.path("schema-encryption.sql"))
                mode: local
                history:
                  author: app
                cloud:
            \(cloud.map { "      " + $0 }.joined(separator: "\n"))
                entities:
            \(entity)

            """
        try yaml.write(toFile: lab.configPath(name), atomically: true, encoding: .utf8)
    }

    static func open(_ lab: Lab, _ name: String) throws -> StoreHandle {
        let environment = environment()
        let config = try ConfigLoader.load(path: lab.configPath(name), environment: environment)
        return try StoreHandle(config: config, storeName: "notes", environment: environment)
    }

    /// The N-row store every run copies: initialised, tracked, the rows written by author `app` in one transaction.
    static func template(_ lab: Lab, rows: Int, backend: Backend) throws -> String {
        let name = "encryption-template-\(rows)"
        try lab.remove(name)
        try writeConfig(lab, name, variant: .plain, backend: backend, container: "unused.container")
        let store = try open(lab, name)
        try store.ensureInitialized()
        let db = try store.database()
        Output.note("building a \(rows)-row store (\(schemaSummary))")
        let seconds = try Clock.seconds {
            _ = try store.historyTracker().write(author: "app") {
                try db.run("""
                    WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                    INSERT INTO notes(uuid, title, body, author, updated_at)
                    SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-4' || substr(h, 14, 3) || '-'
                               || substr('89ab', 1 + (i % 4), 1) || substr(h, 18, 3) || '-' || substr(h, 21, 12),
                           'Note number ' || i, substr(?2, 1 + (i % 97), ?3 - 7) || ' ' || printf('%06d', i),
                           'author ' || (i % 53), 1700000000000 + i
                    FROM (SELECT i, lower(hex(randomblob(16))) AS h FROM n)
                    """, [rows, lorem, bodyBytes])
            }
        }
        let length = try db.scalar("SELECT min(length(body)) = max(length(body)) AND max(length(body)) = ? FROM notes",
                                   [bodyBytes])?.int64
        guard length == 1 else { throw StoreError(.software, "the bodies are not all \(bodyBytes) bytes") }
        Output.note("  \(secs(seconds)) (\(rate(rows, seconds)) through the triggers)")
        try Lab.checkpoint(db)
        store.close()
        return name
    }

    /// A copy of the template's store file in a new folder `name` whose config is `variant`'s, with its own
    /// identity.
    static func copyTemplate(_ lab: Lab, _ template: String, to name: String, variant: Variant, backend: Backend,
                             container: String) throws -> StoreHandle
    {
        try lab.remove(name)
        try writeConfig(lab, name, variant: variant, backend: backend, container: container)
        try FileManager.default.copyItem(atPath: lab.storePath(template), toPath: lab.storePath(name))
        let store = try open(lab, name)
        try store.newIdentity()
        return store
    }

    /// A new folder `name` with `variant`'s config and no store file.
    static func newStore(_ lab: Lab, _ name: String, variant: Variant, backend: Backend, container: String) throws {
        try lab.remove(name)
        try writeConfig(lab, name, variant: variant, backend: backend, container: container)
    }

    // MARK: Checks

    /// The container holds `rows` live notes records, their bodies sealed (encrypted) or in clear (plain).
    static func checkContainer(_ backend: Backend, _ container: String, variant: Variant, rows: Int) throws -> Int? {
        let found = try backend.inspect(container)
        let expectedSealed = variant == .encrypted ? rows : 0
        let expectedClear = variant == .encrypted ? 0 : rows
        guard found.records == rows, found.sealed == expectedSealed, found.clearBodies == expectedClear,
              (found.logN != nil) == (variant == .encrypted)
        else {
            throw StoreError(.software, "\(variant.rawValue) container \(container): \(found.records) notes records, "
                             + "\(found.sealed) sealed bodies, \(found.clearBodies) with body text in clear, key "
                             + "record \(found.logN.map { "log_n \($0)" } ?? "absent"); expected \(rows), "
                             + "\(expectedSealed), \(expectedClear)")
        }
        return found.logN
    }

    /// The store of folder `name` holds exactly the template's rows.
    static func checkStore(_ lab: Lab, _ name: String, template: String, rows: Int) throws {
        let db = try Connection(path: lab.storePath(name), mode: .readWrite, wal: false, foreignKeys: false)
        try db.run("ATTACH DATABASE ? AS t", [lab.storePath(template)])
        let count = try db.scalar("SELECT count(*) FROM main.notes")?.int64 ?? -1
        let same = try db.scalar("""
            SELECT count(*) FROM main.notes b JOIN t.notes a USING (uuid)
            WHERE a.title = b.title AND a.body = b.body AND a.author = b.author AND a.updated_at = b.updated_at
            """)?.int64 ?? -1
        try db.execute("DETACH DATABASE t")
        guard count == Int64(rows), same == Int64(rows) else {
            throw StoreError(.software, "store \(name) holds \(count) rows, \(same) equal to the source's; "
                             + "expected \(rows)")
        }
    }

    // MARK: Runs

    /// The engine's baseline export of the template into an empty zone, then the import of every record into a new
    /// store, for `variant`.
    static func engineRun(_ lab: Lab, template: String, variant: Variant, backend: Backend, rows: Int) throws
        -> EngineRun
    {
        let container = "enc-\(backend.id)-\(variant.rawValue)-\(getpid()).container"
        let a = "enc-\(backend.id)-a-\(variant.rawValue)", b = "enc-\(backend.id)-b-\(variant.rawValue)"
        try backend.reset(container)
        defer { try? backend.reset(container) }
        let storeA = try copyTemplate(lab, template, to: a, variant: variant, backend: backend, container: container)
        _ = try CloudConnector.initialize(settings: try storeA.cloudSettings(), environment: storeA.environment)
        var mirror: Mirror?
        let openExport = try Clock.seconds { mirror = try storeA.openMirror() }
        var saved = 0
        let export = try Clock.seconds { saved = try mirror?.exportChanges().saved ?? 0 }
        mirror = nil
        storeA.close()
        guard saved == rows else {
            throw StoreError(.software, "the \(variant.rawValue) export saved \(saved) records, expected \(rows)")
        }
        let logN = try checkContainer(backend, container, variant: variant, rows: rows)

        try newStore(lab, b, variant: variant, backend: backend, container: container)
        let storeB = try open(lab, b)
        try storeB.ensureInitialized()
        var mirrorB: Mirror?
        let openImport = try Clock.seconds { mirrorB = try storeB.openMirror() }
        var applied = 0
        let imported = try Clock.seconds { applied = try mirrorB?.importChanges().applied ?? 0 }
        mirrorB = nil
        storeB.close()
        guard applied == rows else {
            throw StoreError(.software, "the \(variant.rawValue) import applied \(applied) records, expected \(rows)")
        }
        try checkStore(lab, b, template: template, rows: rows)
        return EngineRun(openExport: openExport, export: export, openImport: openImport, importSeconds: imported,
                         logN: logN)
    }

    /// The same two steps as whole `storectl mode cloud` processes: (export seconds, import seconds).
    static func processRun(_ lab: Lab, template: String, variant: Variant, backend: Backend, rows: Int) throws
        -> (export: Double, importSeconds: Double)
    {
        let storectl = try lab.storectl()
        let container = "encp-\(backend.id)-\(variant.rawValue)-\(getpid()).container"
        let a = "encp-\(backend.id)-a-\(variant.rawValue)", b = "encp-\(backend.id)-b-\(variant.rawValue)"
        try backend.reset(container)
        defer { try? backend.reset(container) }
        let storeA = try copyTemplate(lab, template, to: a, variant: variant, backend: backend, container: container)
        _ = try CloudConnector.initialize(settings: try storeA.cloudSettings(), environment: storeA.environment)
        storeA.close()
        let child = [keyVariable: passphrase, Lab.secretVariable: Lab.secret]
        let export = try Child.check([storectl, "--config", lab.configPath(a), "mode", "cloud"], environment: child,
                                     in: lab.dir)
        _ = try checkContainer(backend, container, variant: variant, rows: rows)
        try newStore(lab, b, variant: variant, backend: backend, container: container)
        let imported = try Child.check([storectl, "--config", lab.configPath(b), "mode", "cloud"],
                                       environment: child, in: lab.dir)
        try checkStore(lab, b, template: template, rows: rows)
        return (export.seconds, imported.seconds)
    }

    // MARK: Backends

    static func fileBackend(_ lab: Lab) -> Backend {
        Backend(id: "file", url: { lab.fileURL($0) }, account: "bench",
                reset: { try lab.remove($0) },
                inspect: { container in
                    let db = try Connection(path: lab.path(container), mode: .readWrite, wal: false,
                                            foreignKeys: false)
                    let row = try db.query("""
                        SELECT count(*),
                               coalesce(sum(json_type(fields, '$.body') = 'object'
                                            AND json_extract(fields, '$.body."$enc"') IS NOT NULL), 0),
                               coalesce(sum(instr(fields, 'ad minim veniam') > 0), 0)
                        FROM records WHERE zone = 'default' AND record_type = 'notes' AND deleted = 0
                        """).first
                    let logN = try db.scalar("""
                        SELECT json_extract(fields, '$.log_n') FROM records
                        WHERE zone = 'default' AND record_type = ? AND deleted = 0
                        """, [ZoneKeyRecord.recordType])?.int64
                    return (Int(row?[0].int64 ?? -1), Int(row?[1].int64 ?? -1), Int(row?[2].int64 ?? -1),
                            logN.map(Int.init))
                })
    }

    /// The PostgreSQL backend, or why there is none.
    static func postgresBackend(_ lab: Lab) -> (backend: Backend?, skipped: String?) {
        guard let url = ProcessInfo.processInfo.environment["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            return (nil, "skipped: no PostgreSQL (STORECTL_TEST_PG_URL is not set)")
        }
        guard let psql = ProcessBenchmarks.which("psql") else {
            return (nil, "skipped: no PostgreSQL (no psql command in PATH)")
        }
        func schema(_ container: String) -> String {
            "\"" + PostgresCloudDatabase.schemaName(container: container) + "\""
        }
        func psqlRows(_ sql: String) throws -> [String] {
            let run = try Child.check([psql, url, "-v", "ON_ERROR_STOP=1", "-q", "-At", "-F", "|", "-c", sql],
                                      in: lab.dir)
            return run.stdout.split(separator: "\n").map(String.init)
        }
        return (Backend(
            id: "pg", url: { _ in url }, account: "postgres",
            reset: { container in _ = try psqlRows("DROP SCHEMA IF EXISTS \(schema(container)) CASCADE") },
            inspect: { container in
                let records = "\(schema(container)).records"
                let counts = try psqlRows("""
                    SELECT count(*), count(*) FILTER (WHERE (fields::jsonb -> 'body') ? '$enc'),
                           count(*) FILTER (WHERE strpos(fields::text, 'ad minim veniam') > 0)
                    FROM \(records) WHERE zone = 'default' AND record_type = 'notes' AND NOT deleted
                    """).first?.split(separator: "|").map { Int($0) ?? -1 } ?? []
                let logN = try psqlRows("""
                    SELECT (fields::jsonb ->> 'log_n') FROM \(records)
                    WHERE zone = 'default' AND record_type = '\(ZoneKeyRecord.recordType)' AND NOT deleted
                    """).first.flatMap { Int($0) }
                guard counts.count == 3 else {
                    throw StoreError(.software, "cannot count the records of \(records)")
                }
                return (counts[0], counts[1], counts[2], logN)
            }), nil)
    }

    // MARK: Figures

    static func figures(_ lab: Lab, _ options: BenchOptions, process: Bool, postgres: Bool) throws -> [Figure] {
        try schemaSQL.write(toFile: lab.path("schema-encryption.sql"), atomically: true, encoding: .utf8)
        setenv(keyVariable, passphrase, 1)
        let rows = options.rows, runs = options.repeats
        let file = fileBackend(lab)
        let template = try template(lab, rows: rows, backend: file)
        if process { _ = try lab.storectl() }  // missing binary: say so before the runs

        var backends = [file]
        var skippedPostgres: String?
        if postgres {
            let pg = postgresBackend(lab)
            if let backend = pg.backend { backends.append(backend) }
            skippedPostgres = pg.skipped
        }

        // backend -> variant -> samples
        var engine: [String: [Variant: [EngineRun]]] = [:]
        var processes: [Variant: [(export: Double, importSeconds: Double)]] = [:]
        var logN: Int?
        for run in -1..<runs {
            let order: [Variant] = run % 2 == 0 || run < 0 ? [.plain, .encrypted] : [.encrypted, .plain]
            let label = run < 0 ? "untimed first run" : "run \(run + 1) of \(runs)"
            for backend in backends {
                for variant in order {
                    let result = try engineRun(lab, template: template, variant: variant, backend: backend,
                                               rows: rows)
                    if variant == .encrypted, backend.id == "file" { logN = result.logN }
                    Output.note("\(label), \(backend.id), \(variant.rawValue): open \(ms(result.openExport)) + "
                                + "export \(secs(result.export)) (\(rate(rows, result.export))); open "
                                + "\(ms(result.openImport)) + import \(secs(result.importSeconds)) "
                                + "(\(rate(rows, result.importSeconds)))")
                    if run >= 0 { engine[backend.id, default: [:]][variant, default: []].append(result) }
                }
            }
            if process {
                for variant in order {
                    let result = try processRun(lab, template: template, variant: variant, backend: file, rows: rows)
                    Output.note("\(label), storectl mode cloud, \(variant.rawValue): export \(secs(result.export)), "
                                + "import \(secs(result.importSeconds))")
                    if run >= 0 { processes[variant, default: []].append(result) }
                }
            }
        }

        let cost = "scrypt N = 2^\(logN.map(String.init) ?? "?"), r = 8, p = 1"
        var figures: [Figure] = []
        for backend in backends {
            let samples = engine[backend.id] ?? [:]
            func times(_ variant: Variant, _ pick: (EngineRun) -> Double) -> [Double] {
                (samples[variant] ?? []).map(pick)
            }
            let suffix = backend.id == "file" ? "" : ".postgres"
            let place = backend.id == "file" ? "the file container" : "PostgreSQL"
            figures.append(rateFigure(
                id: "encryption.export" + suffix,
                what: "baseline export to \(place), body encrypted: rows/s as a share of the same without",
                rows: rows, plain: times(.plain) { $0.export }, encrypted: times(.encrypted) { $0.export },
                plainOpen: times(.plain) { $0.openExport }, encryptedOpen: times(.encrypted) { $0.openExport },
                logN: logN))
            figures.append(rateFigure(
                id: "encryption.import" + suffix,
                what: "import from \(place) into a new store, body encrypted: rows/s as a share of the same without",
                rows: rows, plain: times(.plain) { $0.importSeconds },
                encrypted: times(.encrypted) { $0.importSeconds },
                plainOpen: times(.plain) { $0.openImport }, encryptedOpen: times(.encrypted) { $0.openImport },
                logN: logN))
            if backend.id == "file" {
                figures.append(openFigure(
                    id: "encryption.open.export",
                    what: "opening the mirror before the export, encrypted (makes the zone's key, \(cost))",
                    plain: times(.plain) { $0.openExport }, encrypted: times(.encrypted) { $0.openExport },
                    logN: logN))
                figures.append(openFigure(
                    id: "encryption.open.import",
                    what: "opening the mirror before the import, encrypted (opens the zone's key, \(cost))",
                    plain: times(.plain) { $0.openImport }, encrypted: times(.encrypted) { $0.openImport },
                    logN: logN))
            }
        }
        if let skippedPostgres {
            for step in ["export", "import"] {
                figures.append(Figure(id: "encryption.\(step).postgres",
                                      what: "\(step) with PostgreSQL, body encrypted vs not", unit: .percent,
                                      target: nil, skipped: skippedPostgres))
            }
        }
        if process {
            figures.append(rateFigure(
                id: "encryption.process.export",
                what: "whole `storectl mode cloud` of the populated store (baseline export, key derivation "
                    + "included), body encrypted vs not",
                rows: rows, plain: (processes[.plain] ?? []).map(\.export),
                encrypted: (processes[.encrypted] ?? []).map(\.export), logN: logN))
            figures.append(rateFigure(
                id: "encryption.process.import",
                what: "whole `storectl mode cloud` of a new store (import, key derivation included), body "
                    + "encrypted vs not",
                rows: rows, plain: (processes[.plain] ?? []).map(\.importSeconds),
                encrypted: (processes[.encrypted] ?? []).map(\.importSeconds), logN: logN))
        }
        return figures
    }

    /// Encrypted rows/s as a share of plain rows/s (plain median seconds / encrypted median seconds).
    static func rateFigure(id: String, what: String, rows: Int, plain: [Double], encrypted: [Double],
                           plainOpen: [Double]? = nil, encryptedOpen: [Double]? = nil, logN: Int?) -> Figure
    {
        let p = median(plain), e = median(encrypted)
        // The runs are paired (the two configs back to back): the median of each pair's ratio is less sensitive
        // to the machine's load changing between runs.
        let paired = median(zip(plain, encrypted).map { $0 / $1 })
        var numbers: [String: Double] = [
            "rows": Double(rows), "runs": Double(min(plain.count, encrypted.count)),
            "plain_seconds": p, "encrypted_seconds": e,
            "plain_rows_per_second": Double(rows) / p, "encrypted_rows_per_second": Double(rows) / e,
            "rate_ratio": p / e, "time_ratio": e / p, "paired_rate_ratio_median": paired,
            "plain_min_seconds": plain.min() ?? .nan, "plain_max_seconds": plain.max() ?? .nan,
            "encrypted_min_seconds": encrypted.min() ?? .nan, "encrypted_max_seconds": encrypted.max() ?? .nan,
            "body_bytes": Double(bodyBytes),
        ]
        if let logN { numbers["scrypt_log_n"] = Double(logN) }
        var detail = "plain \(secs(p)) (\(rate(rows, p))), encrypted \(secs(e)) (\(rate(rows, e))), median of "
            + "\(min(plain.count, encrypted.count)); pairs' median " + String(format: "%.0f%%", paired * 100)
        if let plainOpen, let encryptedOpen {
            let po = median(plainOpen), eo = median(encryptedOpen)
            numbers["plain_with_open_seconds"] = median(zip(plain, plainOpen).map { $0 + $1 })
            numbers["encrypted_with_open_seconds"] = median(zip(encrypted, encryptedOpen).map { $0 + $1 })
            numbers["plain_open_seconds"] = po
            numbers["encrypted_open_seconds"] = eo
            detail += "; opening the mirror \(ms(po)) vs \(ms(eo)) (not in the figure)"
        }
        return Figure(id: id, what: what, value: p / e, unit: .percent, target: nil, detail: detail, numbers: numbers)
    }

    /// Opening the mirror with encryption (one key derivation), against the same without.
    static func openFigure(id: String, what: String, plain: [Double], encrypted: [Double], logN: Int?) -> Figure {
        let p = median(plain), e = median(encrypted)
        var numbers = ["runs": Double(min(plain.count, encrypted.count)), "plain_seconds": p, "encrypted_seconds": e,
                       "added_seconds": e - p]
        if let logN { numbers["scrypt_log_n"] = Double(logN) }
        return Figure(id: id, what: what, value: e * 1000, unit: .milliseconds, target: nil,
                      detail: "without encryption \(ms(p)); \(ms(e - p)) more (median of "
                          + "\(min(plain.count, encrypted.count)))",
                      numbers: numbers)
    }
}
