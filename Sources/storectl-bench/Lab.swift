import Foundation
import StoreBase
import StoreCloud
import StoreConfig
import StoreMirror
import StoreSQLite
import StoreControl

#if canImport(Glibc)
import Glibc
#endif

/// The scratch folder of one run and the stores and containers the benchmarks share in it.
///
/// Every store is a folder with its own `config.yaml` (store `notes`, the tables of a `Shape`, all tracked) and
/// `store.sqlite`. A template store of N rows is built once per shape and size (through the history triggers, as
/// an app would write it) and copied for each benchmark that changes it. The shape is `--schema` unless a
/// benchmark asks for one.
final class Lab {
    let dir: String
    let options: BenchOptions
    /// The secret of the bench account, passed to storectl through this environment variable.
    static let secretVariable = "STORECTL_BENCH_SECRET"
    static let secret = "bench-secret-not-for-production"
    static let body = Shape.body
    /// The shape of `--schema`.
    var shape: Shape { options.shape }

    private var templates: [String: String] = [:]
    private var pairs: [String: Pair] = [:]
    /// STORECTL_TRACE=1 phase totals of whole-process runs, by run.
    var traces: [String: [String: Double]] = [:]
    private var lazyStorectl: String?

    init(options: BenchOptions) throws {
        self.options = options
        let base = options.directory ?? NSTemporaryDirectory()
        dir = (base as NSString).appendingPathComponent("storectl-bench-\(getpid())")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for shape in Shape.allCases {
            try shape.sql.write(toFile: path("schema-\(shape.rawValue).sql"), atomically: true, encoding: .utf8)
        }
        setenv(Self.secretVariable, Self.secret, 1)
    }

    /// Removes the scratch folder unless `--keep`.
    func finish() {
        if options.keep {
            Output.note("kept the scratch folder \(dir)")
        } else {
            try? FileManager.default.removeItem(atPath: dir)
        }
    }

    /// A figure's text, marked when the run's shape is not the one-table shape the figure is measured on.
    func singleOnly(_ what: String) -> String { shape == .single ? what : what + " (single table)" }

    func path(_ name: String) -> String { (dir as NSString).appendingPathComponent(name) }

    /// The storectl binary: `--storectl`, else the one next to this benchmark.
    /// - Throws: `StoreError` (66) when it is missing.
    func storectl() throws -> String {
        if let lazyStorectl { return lazyStorectl }
        let resolved = try Self.storectlBinary(options.storectl)
        lazyStorectl = resolved
        return resolved
    }

    /// The storectl binary at `path` (relative to the working folder), else the one next to this benchmark.
    /// - Throws: `StoreError` (66) when it is missing.
    static func storectlBinary(_ path: String?) throws -> String {
        let folder = (CommandLine.arguments[0] as NSString).deletingLastPathComponent as NSString
        let candidate = path ?? folder.appendingPathComponent("storectl")
        let resolved = candidate.hasPrefix("/") ? candidate
            : (FileManager.default.currentDirectoryPath as NSString).appendingPathComponent(candidate)
        guard FileManager.default.isExecutableFile(atPath: resolved) else {
            throw StoreError(.noInput, "no storectl binary at \(resolved)",
                             hint: "swift build -c release --product storectl, or pass --storectl PATH")
        }
        return resolved
    }

    // MARK: Stores

    /// Writes the folder `name` with its config.yaml and opens the store handle (the store file is not created).
    func makeStore(_ name: String, url: String, account: String = "bench", container: String = "bench.notes",
                   shape: Shape? = nil) throws -> StoreHandle
    {
        let shape = shape ?? self.shape
        let folder = path(name)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let isFile = url.hasPrefix("file:")
        let yaml = """
            version: 1
            stores:
              notes:
                path: store.sqlite
                schema: \(path("schema-\(shape.rawValue).sql"))
                mode: local
                history:
                  author: app
                cloud:
                  container: \(container)
                  url: "\(url)"
            \(isFile ? "      create_if_missing: true\n" : "")      zone: default
                  account: \(account)
                  secret: ${\(Self.secretVariable)}
                entities:
            \(shape.entitiesYAML)

            """
        try yaml.write(toFile: (folder as NSString).appendingPathComponent("config.yaml"), atomically: true,
                       encoding: .utf8)
        return try open(name)
    }

    /// Opens the store in folder `name` from its config.yaml.
    func open(_ name: String) throws -> StoreHandle {
        var environment = ProcessInfo.processInfo.environment
        environment[Self.secretVariable] = Self.secret
        let config = try ConfigLoader.load(path: configPath(name), environment: environment)
        return try StoreHandle(config: config, storeName: "notes", environment: environment)
    }

    func configPath(_ name: String) -> String { path(name + "/config.yaml") }
    func storePath(_ name: String) -> String { path(name + "/store.sqlite") }
    func fileURL(_ container: String) -> String { "file:" + path(container) }

    /// The template store of `rows` rows: initialised, history tracking on, rows written by author `app` in one
    /// transaction through the triggers.
    func template(rows: Int, shape: Shape? = nil) throws -> String {
        let shape = shape ?? self.shape
        let key = "\(shape.rawValue)-\(rows)"
        if let done = templates[key] { return done }
        let name = "template-\(key)"
        let split = shape.split(rows).map(String.init).joined(separator: " + ")
        Output.note("building a \(rows)-row store (\(shape.rawValue): \(split) rows)")
        let store = try makeStore(name, url: fileURL("unused.container"), shape: shape)
        try store.ensureInitialized()
        let db = try store.database()
        let seconds = try Clock.seconds {
            _ = try store.historyTracker().write(author: "app") { try shape.fill(db, rows: rows) }
        }
        Output.note("  \(secs(seconds)) (\(rate(rows, seconds)) through the triggers)")
        try Self.checkpoint(db)
        store.close()
        templates[key] = name
        return name
    }

    /// Copies the store file of folder `from` into a new folder `name` whose config names `url`.
    func copyStore(_ from: String, to name: String, url: String, account: String = "bench",
                   container: String = "bench.notes", shape: Shape? = nil) throws -> StoreHandle
    {
        try remove(name)
        let store = try makeStore(name, url: url, account: account, container: container, shape: shape)
        try FileManager.default.copyItem(atPath: storePath(from), toPath: storePath(name))
        // A copied store file is refused before it syncs while the original exists: give it an identity of its own.
        try store.newIdentity()
        return store
    }

    /// Removes folder `name` (a store) or file `name` (a container) with its WAL files.
    func remove(_ name: String) throws {
        for suffix in ["", "-wal", "-shm"] where FileManager.default.fileExists(atPath: path(name) + suffix) {
            try FileManager.default.removeItem(atPath: path(name) + suffix)
        }
    }

    static func checkpoint(_ db: Connection) throws {
        _ = try db.query("PRAGMA wal_checkpoint(TRUNCATE)")
    }

    // MARK: The exported and imported pair

    /// Store A (N rows) exported to a file container by the engine, and store B imported from it into an empty
    /// store; with the single-statement references measured in the same run.
    struct Pair {
        var shape: Shape
        var rows: Int
        var a: String
        var b: String
        var container: String
        var exportSeconds: Double
        var importSeconds: Double
        var exportReference: Double
        var importReference: Double
        /// The import reference into a store with history tracking installed (the triggers fire on each row).
        var importReferenceTracked: Double
        var engineRuns: Int
        var referenceRuns: Int
    }

    /// How many engine runs a size gets: small sizes are quick and noisy.
    func engineRuns(_ rows: Int) -> Int { options.engineRuns ?? (rows <= 100_000 ? 3 : 1) }
    func referenceRuns(_ rows: Int) -> Int { rows <= 100_000 ? 5 : 3 }

    func pair(rows: Int, shape: Shape? = nil) throws -> Pair {
        let shape = shape ?? self.shape
        let key = "\(shape.rawValue)-\(rows)"
        if let done = pairs[key] { return done }
        let template = try template(rows: rows, shape: shape)
        let a = "a-\(key)", b = "b-\(key)", container = "c-\(key).container"
        var exports: [Double] = []
        var imports: [Double] = []
        for run in 0..<engineRuns(rows) {
            Output.note("export of \(rows) rows to a container file (engine, run \(run + 1))")
            try remove(container)
            let storeA = try copyStore(template, to: a, url: fileURL(container), shape: shape)
            _ = try CloudConnector.initialize(settings: try storeA.cloudSettings(), environment: storeA.environment)
            let mirror = try storeA.openMirror()
            var saved = 0
            exports.append(try Clock.seconds { saved = try mirror.exportChanges().saved })
            guard saved == rows else {
                throw StoreError(.software, "the export saved \(saved) records, expected \(rows)")
            }
            Output.note("  \(secs(exports.last ?? 0))")
            storeA.close()

            Output.note("import of \(rows) rows into an empty store (engine, run \(run + 1))")
            try remove(b)
            let storeB = try makeStore(b, url: fileURL(container), shape: shape)
            try storeB.ensureInitialized()
            let mirrorB = try storeB.openMirror()
            var applied = 0
            imports.append(try Clock.seconds { applied = try mirrorB.importChanges().applied })
            guard applied == rows else {
                throw StoreError(.software, "the import applied \(applied) records, expected \(rows)")
            }
            Output.note("  \(secs(imports.last ?? 0))")
            storeB.close()
        }
        let refs = referenceRuns(rows)
        Output.note("references for \(rows) rows (\(refs) runs each)")
        var exportRefs: [Double] = []
        var importRefs: [Double] = []
        var trackedRefs: [Double] = []
        for _ in 0..<refs {
            exportRefs.append(try exportReference(store: storePath(template), container: path(container),
                                                  shape: shape))
            importRefs.append(try importReference(container: path(container), tracked: false, shape: shape))
        }
        for _ in 0..<max(1, refs / 2) {
            trackedRefs.append(try importReference(container: path(container), tracked: true, shape: shape))
        }
        let result = Pair(shape: shape, rows: rows, a: a, b: b, container: container, exportSeconds: median(exports),
                          importSeconds: median(imports), exportReference: median(exportRefs),
                          importReference: median(importRefs), importReferenceTracked: median(trackedRefs),
                          engineRuns: exports.count, referenceRuns: refs)
        Output.note("  export \(secs(result.exportSeconds)) vs \(secs(result.exportReference)), import "
                    + "\(secs(result.importSeconds)) vs \(secs(result.importReference))")
        pairs[key] = result
        return result
    }

    /// The records table (and its indexes) exactly as the engine created them in `container`.
    func recordsSchema(of container: String) throws -> [String] {
        let db = try Connection(path: container, mode: .readWrite, wal: false, foreignKeys: false)
        let sql = try db.query("""
            SELECT sql FROM sqlite_master WHERE tbl_name = 'records' AND sql IS NOT NULL
            ORDER BY type = 'table' DESC, name
            """).compactMap { $0[0].string }
        guard !sql.isEmpty else { throw StoreError(.software, "\(container) has no records table") }
        return sql
    }

    /// Seconds for one statement that turns every row of `store` into a record in a fresh container file with
    /// the engine's records schema: `INSERT INTO c.records SELECT ..., json_object(...) FROM notes` (one statement
    /// per table, in one transaction).
    func exportReference(store: String, container: String, shape: Shape) throws -> Double {
        let target = path("reference.container")
        try remove("reference.container")
        do {
            let c = try Connection(path: target, wal: true, foreignKeys: false)
            for sql in try recordsSchema(of: container) { try c.execute(sql) }
        }
        let db = try Connection(path: store, mode: .readWrite, wal: false, foreignKeys: false)
        try db.run("ATTACH DATABASE ? AS c", [target])
        try db.execute("PRAGMA c.synchronous=NORMAL")
        let seconds = try Clock.seconds {
            try db.transaction { for sql in shape.exportReference { try db.run(sql) } }
        }
        try db.execute("DETACH DATABASE c")
        return seconds
    }

    /// Seconds for one statement that inserts every live record of `container` into an empty store with the
    /// shape's schema: `INSERT INTO notes SELECT json_extract(...) FROM c.records` (one statement per table, parents
    /// first, in one transaction). With `tracked`, the empty store has history tracking installed, so the triggers
    /// fire on each row.
    func importReference(container: String, tracked: Bool, shape: Shape) throws -> Double {
        let name = "reference-\(tracked ? "tracked" : "plain")"
        try remove(name)
        var handle: StoreHandle?
        let db: Connection
        if tracked {
            let store = try makeStore(name, url: fileURL("unused.container"), shape: shape)
            try store.ensureInitialized()
            db = try store.database()
            handle = store
        } else {
            try FileManager.default.createDirectory(atPath: path(name), withIntermediateDirectories: true)
            db = try Connection(path: storePath(name), wal: true)
            try db.execute(shape.sql)
        }
        try db.run("ATTACH DATABASE ? AS c", [container])
        let seconds = try Clock.seconds {
            try db.transaction { for sql in shape.importReference { try db.run(sql) } }
        }
        let count = try db.scalar(shape.countSQL)?.int64 ?? 0
        let live = try db.scalar("SELECT count(*) FROM c.records WHERE deleted = 0")?.int64 ?? -1
        guard count == live else {
            throw StoreError(.software, "the import reference inserted \(count) rows of \(live) records")
        }
        try db.execute("DETACH DATABASE c")
        handle?.close()
        try remove(name)
        return seconds
    }
}
