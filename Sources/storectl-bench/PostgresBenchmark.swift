import Foundation
import StoreBase
import StoreCloudPostgres
import StoreSQLite
import StoreControl

/// `storectl-bench postgres`: export of N rows to PostgreSQL against `COPY` of the same rows into a plain table
/// (target 50%), and import of them into an empty store against the engine's import of the same rows from the
/// file container (target 70%).
enum PostgresBenchmark {
    static let help = """
        usage: storectl-bench postgres [--rows N] [--json]

        Needs a PostgreSQL server: STORECTL_TEST_PG_URL (e.g. postgresql://postgres@/postgres?host=/tmp/pg) and
        the psql command; without them both figures say "skipped: no PostgreSQL".
          export: Mirror.exportChanges of a copy of an N-row store into a new container (its own schema, made as
                  'storectl cloud init' makes it), against psql '\\copy' of the same N records, as CSV written
                  beforehand, into a plain table LIKE the container's records table (no keys, no indexes).
          import: Mirror.importChanges of the N records into an empty store, against the same import of the same
                  rows from a container file (the 'import' benchmark's engine run); raw SQLite insert speed (one
                  INSERT INTO notes SELECT ... into an empty table) is shown beside.
        Figures: reference seconds / engine seconds. Targets: export >= 50%, import >= 70%.
        """

    static func main(_ argv: [String]) throws {
        try Runner.main("postgres", argv, help: help) { lab, options, report in
            report.figures = try figures(lab, options)
        }
    }

    static func skipped(_ reason: String) -> [Figure] {
        [Figure(id: "export.postgres", what: "PostgreSQL export vs COPY into a plain table", unit: .percent,
                target: .atLeast(0.5), skipped: reason),
         Figure(id: "import.postgres", what: "import from PostgreSQL vs the file-container import", unit: .percent,
                target: .atLeast(0.7), skipped: reason)]
    }

    static func figures(_ lab: Lab, _ options: BenchOptions) throws -> [Figure] {
        guard let url = ProcessInfo.processInfo.environment["STORECTL_TEST_PG_URL"], !url.isEmpty else {
            return skipped("skipped: no PostgreSQL (STORECTL_TEST_PG_URL is not set)")
        }
        guard let psql = ProcessBenchmarks.which("psql") else {
            return skipped("skipped: no PostgreSQL (no psql command in PATH)")
        }
        let rows = options.rows
        let container = "bench.notes.\(getpid()).\(rows)"
        let schema = "\"" + PostgresCloudDatabase.schemaName(container: container) + "\""
        func sql(_ text: String) throws {
            _ = try Child.check([psql, url, "-v", "ON_ERROR_STOP=1", "-q", "-c", text], in: lab.dir)
        }
        // The one-table shape: the export's COPY reference and the raw inserts are written for it.
        let template = try lab.template(rows: rows, shape: .single)
        let a = try lab.copyStore(template, to: "pg-a-\(rows)", url: url, account: "postgres", container: container,
                                  shape: .single)
        _ = try CloudConnector.initialize(settings: try a.cloudSettings(), environment: a.environment)
        defer { try? sql("DROP SCHEMA IF EXISTS \(schema) CASCADE") }

        Output.note("export of \(rows) rows to PostgreSQL (engine)")
        Trace.reset()
        let mirror = try a.openMirror()
        var saved = 0
        let export = try Clock.seconds { saved = try mirror.exportChanges().saved }
        guard saved == rows else { throw StoreError(.software, "the export saved \(saved), expected \(rows)") }
        Output.note("  \(secs(export))")
        Trace.report()  // STORECTL_TRACE=1: the phases of this export alone
        Trace.reset()

        // The same records as CSV, written before the clock starts.
        let csv = lab.path("records.csv")
        try writeCSV(store: try a.database(), to: csv)
        a.close()
        try sql("CREATE TABLE \(schema).plain_copy (LIKE \(schema).records)")
        var copies: [Double] = []
        for _ in 0..<lab.referenceRuns(rows) {
            try sql("TRUNCATE \(schema).plain_copy")
            let run = try Child.check([psql, url, "-v", "ON_ERROR_STOP=1", "-q", "-c",
                                       "\\copy \(schema).plain_copy FROM '\(csv)' WITH (FORMAT csv)"], in: lab.dir)
            copies.append(run.seconds)
        }
        let copy = median(copies)
        Output.note("  COPY \(secs(copy))")

        Output.note("import of \(rows) records from PostgreSQL into an empty store (engine)")
        let bName = "pg-b-\(rows)"
        try lab.remove(bName)
        let b = try lab.makeStore(bName, url: url, account: "postgres", container: container, shape: .single)
        try b.ensureInitialized()
        let mirrorB = try b.openMirror()
        var applied = 0
        let imported = try Clock.seconds { applied = try mirrorB.importChanges().applied }
        guard applied == rows else { throw StoreError(.software, "the import applied \(applied), expected \(rows)") }
        b.close()
        Output.note("  \(secs(imported))")
        Trace.report()  // STORECTL_TRACE=1: the phases of this import alone
        Trace.reset()
        var inserts: [Double] = []
        for _ in 0..<lab.referenceRuns(rows) {
            inserts.append(try rawInsert(lab, from: lab.storePath(template)))
        }
        let insert = median(inserts)
        Output.note("  raw inserts \(secs(insert))")
        let fileImport = try lab.pair(rows: rows, shape: .single).importSeconds
        Trace.report()  // STORECTL_TRACE=1: the file-container runs
        return [
            Figure(id: "export.postgres", what: lab.singleOnly("PostgreSQL export vs COPY into a plain table"),
                   value: copy / export, unit: .percent, target: .atLeast(0.5),
                   detail: "engine \(secs(export)) (\(rate(rows, export))), psql \\copy \(secs(copy)) "
                       + "(\(rate(rows, copy)))",
                   numbers: ["rows": Double(rows), "engine_seconds": export, "reference_seconds": copy]),
            Figure(id: "import.postgres", what: lab.singleOnly("import from PostgreSQL vs the file-container import"),
                   value: fileImport / imported, unit: .percent, target: .atLeast(0.7),
                   detail: "engine \(secs(imported)) (\(rate(rows, imported))), from the file container "
                       + "\(secs(fileImport)) (\(rate(rows, fileImport))); raw INSERT ... SELECT \(secs(insert))",
                   numbers: ["rows": Double(rows), "engine_seconds": imported, "reference_seconds": fileImport,
                             "raw_insert_seconds": insert]),
        ]
    }

    /// Writes the rows of `store` as records (the columns of the container's records table) in CSV.
    static func writeCSV(store db: Connection, to path: String) throws {
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        guard let handle = FileHandle(forWritingAtPath: path) else {
            throw StoreError(.cantCreate, "cannot write \(path)")
        }
        defer { try? handle.close() }
        var buffer = ""
        func quoted(_ text: String) -> String { "\"" + text.replacingOccurrences(of: "\"", with: "\"\"") + "\"" }
        let statement = try db.prepare("""
            SELECT printf('notes/%s%012x', '0123456789abcdef', id),
                   json_object('uuid', uuid, 'title', title, 'body', body, 'updated_at', updated_at),
                   printf('%x-reference', id), id FROM notes ORDER BY id
            """)
        try statement.forEach { row in
            buffer += "default,\(row.string(0) ?? ""),notes,\(quoted(row.string(1) ?? "{}")),\(row.string(2) ?? ""),"
                + "\(row.int64(3) ?? 0),f,reference-device,1700000000\n"
            if buffer.utf8.count > 1 << 20 {
                handle.write(Data(buffer.utf8))
                buffer = ""
            }
        }
        handle.write(Data(buffer.utf8))
    }

    /// Seconds for one INSERT ... SELECT of every row of `from` into an empty plain table.
    static func rawInsert(_ lab: Lab, from store: String) throws -> Double {
        try lab.remove("raw-insert")
        try FileManager.default.createDirectory(atPath: lab.path("raw-insert"), withIntermediateDirectories: true)
        let db = try Connection(path: lab.storePath("raw-insert"), wal: true)
        try db.execute(Shape.single.sql)
        try db.run("ATTACH DATABASE ? AS s", [store])
        let seconds = try Clock.seconds {
            try db.execute("INSERT INTO main.notes(uuid, title, body, updated_at) "
                           + "SELECT uuid, title, body, updated_at FROM s.notes ORDER BY id")
        }
        try db.execute("DETACH DATABASE s")
        return seconds
    }
}
