internal import CSQLite
import StoreBase
#if canImport(Glibc)
import Glibc
#endif

/// One open SQLite database connection.
///
/// A connection is not `Sendable`: it has one owner at a time. Each task (each watcher thread, each test thread)
/// opens its own; SQLite's locks and the busy timeout order their writes.
///
///     let db = try Connection(path: "notes.sqlite")
///     try db.transaction {
///         try db.run("INSERT INTO notes(title) VALUES (?)", ["hello"])
///     }
public final class Connection {
    /// How to open the file.
    public enum OpenMode: Sendable {
        /// Read and write; create the file if it is missing.
        case readWriteCreate
        /// Read and write; the file must exist.
        case readWrite
        /// Read only; the file must exist.
        case readOnly
    }

    /// The kind of transaction `transaction(_:_:)` begins.
    public enum TransactionKind: String, Sendable {
        case deferred = "DEFERRED"
        case immediate = "IMMEDIATE"
        case exclusive = "EXCLUSIVE"
    }

    let handle: OpaquePointer
    /// The path the connection was opened with.
    public let path: String
    private var statementCache: [String: Statement] = [:]
    private var savepointDepth = 0
    /// Whether a table of `main` declares a foreign key, and the schema version that answer was read at.
    private var foreignKeysAt: (schemaVersion: Int64, declared: Bool)?

    /// Opens the database at `path`.
    ///
    /// - Parameters:
    ///   - busyTimeout: how long, in milliseconds, to wait for another connection's lock before failing with
    ///     SQLITE_BUSY.
    ///   - wal: switch the file to write-ahead logging, so that readers and one writer work at the same time.
    ///   - foreignKeys: enforce foreign keys (`PRAGMA foreign_keys`).
    /// - Throws: `SQLiteError`. A failed open still releases its handle.
    public init(path: String, mode: OpenMode = .readWriteCreate, busyTimeout: Int32 = 5000, wal: Bool = true,
                foreignKeys: Bool = true) throws
    {
        var flags: Int32
        switch mode {
        case .readWriteCreate: flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
        case .readWrite: flags = SQLITE_OPEN_READWRITE
        case .readOnly: flags = SQLITE_OPEN_READONLY
        }
        flags |= SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI
        _ = Self.configured
        var db: OpaquePointer?
        let rc = sqlite3_open_v2(path, &db, flags, nil)
        guard rc == SQLITE_OK, let db else {
            // "Whether or not an error occurs when it is opened, resources associated with the database connection
            // handle should be released by passing it to sqlite3_close() when it is no longer required."
            let message = db.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(rc))
            let code = db.map { sqlite3_extended_errcode($0) } ?? rc
            sqlite3_close_v2(db)
            throw SQLiteError(extendedCode: code, message: message, path: path)
        }
        self.handle = db
        self.path = path
        sqlite3_extended_result_codes(db, 1)
        sqlite3_busy_timeout(db, busyTimeout)
        Self.registerFunctions(db)
        if Trace.enabled && Self.traceSQL {
            // "SQLITE_TRACE_PROFILE ... The P argument is a pointer to the prepared statement and the X argument
            // points to a 64-bit integer which is approximately the number of nanoseconds that the prepared
            // statement took to run."
            sqlite3_trace_v2(db, UInt32(SQLITE_TRACE_PROFILE), { _, _, statement, elapsed in
                guard let statement, let elapsed, let sql = sqlite3_sql(OpaquePointer(statement)) else { return 0 }
                let nanoseconds = elapsed.assumingMemoryBound(to: Int64.self).pointee
                let text = String(cString: sql).split(whereSeparator: { $0 == " " || $0 == "\n" })
                    .joined(separator: " ")
                Trace.add(seconds: Double(nanoseconds) / 1e9, to: "sql " + String(text.prefix(110)))
                return 0
            }, nil)
        }
        do {
            // Reading the schema here turns "file is not a database" into an error at open time.
            try execute("SELECT count(*) FROM sqlite_master")
            if wal && mode != .readOnly {
                let journal = try scalar("PRAGMA journal_mode=WAL")?.string?.lowercased()
                if journal != "wal" && journal != "memory" {
                    throw SQLiteError(extendedCode: SQLITE_ERROR, message: "could not enable WAL (journal_mode is \(journal ?? "unknown"))", path: path)
                }
                try execute("PRAGMA synchronous=NORMAL")
            }
            try execute("PRAGMA foreign_keys=\(foreignKeys ? "ON" : "OFF")")
        } catch {
            statementCache.removeAll()
            sqlite3_close_v2(db)
            throw error
        }
    }

    /// The SQL functions storectl's own statements use, on every connection it opens. Triggers never call them:
    /// a trigger runs in every process that writes to the store, and those know only SQLite's built-in functions.
    ///
    /// - `storectl_plain_text(x)`: 0 when `x` is text holding a NUL or bytes that are not valid UTF-8, else 1.
    ///   SQLite keeps whatever bytes a writer stored as text, and its JSON functions cut a string at a NUL; the
    ///   export wraps such text (`{"$text": HEX}`) so that it travels byte for byte.
    /// - `storectl_unhex(hex, kind)`: the bytes of `hex` as text (`kind` 'text') or as a blob; NULL when `hex` is
    ///   not hex digits.
    /// - `storectl_field_hashes`, `storectl_field_hashes_of`, `storectl_base_has`: the record map's base (see
    ///   `FieldHashes`).
    private static func registerFunctions(_ db: OpaquePointer) {
        FieldHashes.register(db)
        // "The sixth, seventh and eighth parameters passed to the three "sqlite3_create_function*" functions, xFunc,
        // xStep and xFinal, are pointers to C-language functions that implement the SQL function or aggregate."
        sqlite3_create_function_v2(db, "storectl_plain_text", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
                                   { context, argc, argv in
            guard argc == 1, let argv, let value = argv[0], sqlite3_value_type(value) == SQLITE_TEXT,
                  let bytes = sqlite3_value_text(value)
            else {
                sqlite3_result_int(context, 1)
                return
            }
            let buffer = UnsafeBufferPointer(start: bytes, count: Int(sqlite3_value_bytes(value)))
            // ASCII without NUL, the common case, needs no decoding.
            if !buffer.contains(where: { $0 == 0 || $0 >= 0x80 }) {
                sqlite3_result_int(context, 1)
                return
            }
            let plain = !buffer.contains(0) && String(validating: buffer, as: UTF8.self) != nil
            sqlite3_result_int(context, plain ? 1 : 0)
        }, nil, nil, nil)
        sqlite3_create_function_v2(db, "storectl_unhex", 2, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nil,
                                   { context, argc, argv in
            guard argc == 2, let argv, let value = argv[0], let text = sqlite3_value_text(value) else {
                sqlite3_result_null(context)
                return
            }
            let hex = UnsafeBufferPointer(start: text, count: Int(sqlite3_value_bytes(value)))
            guard hex.count % 2 == 0 else {
                sqlite3_result_null(context)
                return
            }
            var bytes: [UInt8] = []
            bytes.reserveCapacity(hex.count / 2)
            var i = 0
            while i < hex.count {
                guard let high = Hex.digit(hex[i]), let low = Hex.digit(hex[i + 1]) else {
                    sqlite3_result_null(context)
                    return
                }
                bytes.append(high << 4 | low)
                i += 2
            }
            let asText = argv[1].flatMap { sqlite3_value_text($0) }.map { String(cString: $0) } == "text"
            bytes.withUnsafeBufferPointer { buffer in
                if asText {
                    buffer.baseAddress?.withMemoryRebound(to: CChar.self, capacity: buffer.count) { chars in
                        sqlite3_result_text(context, chars, Int32(buffer.count), storectl_sqlite_transient())
                    } ?? sqlite3_result_text(context, "", 0, storectl_sqlite_transient())
                } else {
                    sqlite3_result_blob(context, buffer.baseAddress, Int32(buffer.count), storectl_sqlite_transient())
                }
            }
        }, nil, nil, nil)
    }

    /// Process-wide SQLite settings, made once before the first connection (sqlite3_config must come before
    /// sqlite3_initialize, which the first open calls): allocation statistics off, so that the export's two
    /// threads (the store and the container, each on its own connection) do not queue on one allocator mutex.
    private static let configured: Bool = storectl_sqlite_disable_memstatus() == SQLITE_OK

    /// `STORECTL_TRACE_SQL=1` (with `STORECTL_TRACE=1`): the trace also totals the time of each SQL statement.
    private static let traceSQL = getenv("STORECTL_TRACE_SQL").map { String(cString: $0) } == "1"

    deinit {
        statementCache.removeAll()
        sqlite3_close_v2(handle)
    }

    /// Runs one or more SQL statements separated by semicolons, with no parameters and no results.
    /// - Throws: `SQLiteError` with the failing SQL.
    public func execute(_ sql: String) throws {
        var errmsg: UnsafeMutablePointer<CChar>?
        let rc = sqlite3_exec(handle, sql, nil, nil, &errmsg)
        if rc != SQLITE_OK {
            let message = errmsg.map { String(cString: $0) } ?? String(cString: sqlite3_errmsg(handle))
            sqlite3_free(errmsg)
            throw SQLiteError(extendedCode: sqlite3_extended_errcode(handle), message: message, sql: sql, path: path)
        }
    }

    /// Compiles one SQL statement.
    /// - Throws: `SQLiteError` with the SQL.
    public func prepare(_ sql: String) throws -> Statement {
        try Statement(connection: self, sql: sql)
    }

    /// A compiled statement for `sql`, reused across calls: the cache keeps it prepared.
    /// - Throws: `SQLiteError` with the SQL.
    public func cached(_ sql: String) throws -> Statement {
        if let statement = statementCache[sql] {
            try statement.reset()
            return statement
        }
        let statement = try prepare(sql)
        // A bound on what a long-lived connection (`storectl watch`) keeps prepared, should a caller ever put a
        // changing value into the text of a cached statement instead of a parameter.
        if statementCache.count >= Self.statementCacheLimit { statementCache.removeAll() }
        statementCache[sql] = statement
        return statement
    }

    /// How many statements `cached` keeps prepared now.
    var cachedStatementCount: Int { statementCache.count }

    /// The most statements `cached` keeps prepared at once.
    static let statementCacheLimit = 1000

    /// Drops every cached statement (needed after schema changes that a cached statement would block).
    public func clearStatementCache() { statementCache.removeAll() }

    /// Runs one statement with `arguments` bound in order, discarding any rows.
    /// - Throws: `SQLiteError`.
    public func run(_ sql: String, _ arguments: [any SQLBindable] = []) throws {
        let statement = try cached(sql)
        try statement.bind(arguments)
        while try statement.step() {}
    }

    /// Runs one query and returns every row.
    /// - Throws: `SQLiteError`.
    public func query(_ sql: String, _ arguments: [any SQLBindable] = []) throws -> [Row] {
        let statement = try cached(sql)
        try statement.bind(arguments)
        var rows: [Row] = []
        while try statement.step() { rows.append(statement.row) }
        return rows
    }

    /// Runs one query and returns the first column of the first row, or nil when there is no row.
    /// - Throws: `SQLiteError`.
    public func scalar(_ sql: String, _ arguments: [any SQLBindable] = []) throws -> Value? {
        let statement = try cached(sql)
        try statement.bind(arguments)
        guard try statement.step() else { return nil }
        let value = statement.column(0)
        try statement.reset()
        return value
    }

    /// The rowid of the most recent successful INSERT on this connection.
    public var lastInsertRowID: Int64 { sqlite3_last_insert_rowid(handle) }

    /// How many rows the most recent INSERT, UPDATE or DELETE changed.
    public var changes: Int { Int(sqlite3_changes(handle)) }
    /// The rows inserted, updated or deleted through this connection since it was opened (`sqlite3_total_changes64`).
    public var totalChanges: Int64 { sqlite3_total_changes64(handle) }

    /// Whether a transaction is open on this connection.
    public var isInTransaction: Bool { sqlite3_get_autocommit(handle) == 0 }

    /// Whether this connection holds a write transaction on the store file (`main`): other connections' writes
    /// wait for it. A transaction that has only read it, or written only the temporary database, does not.
    // "sqlite3_txn_state(D,S) ... returns the current transaction state of schema S in database connection D":
    // SQLITE_TXN_WRITE once a write transaction has started on it (BEGIN IMMEDIATE starts one at once).
    public var holdsWriteTransaction: Bool { sqlite3_txn_state(handle, "main") == SQLITE_TXN_WRITE }

    /// Defers the foreign key checks of the open transaction to its COMMIT (`PRAGMA defer_foreign_keys = ON`), when
    /// a table of the database declares a foreign key; a database that declares none has nothing to defer.
    ///
    /// Setting the pragma costs every statement this connection keeps prepared (`cached`) a compilation: "Many of
    /// the flag-pragmas modify the code generated by the SQL compiler ... So add an opcode to expire all compiled
    /// SQL statements after modifying a pragma value" (SQLite's pragma.c), and the pragma must be set again in every
    /// transaction ("automatically switched off at each COMMIT or ROLLBACK"). So it is set only where it can
    /// change an outcome. Whether a foreign key is declared is read again whenever the schema changed.
    /// - Throws: `SQLiteError`.
    public func deferForeignKeys() throws {
        guard try declaresForeignKeys() else { return }
        try execute("PRAGMA defer_foreign_keys = ON")
    }

    /// Whether a table of `main` declares a foreign key.
    /// - Throws: `SQLiteError`.
    public func declaresForeignKeys() throws -> Bool {
        let version = try scalar("PRAGMA main.schema_version")?.int64 ?? -1
        if let known = foreignKeysAt, known.schemaVersion == version { return known.declared }
        let declared = try scalar("""
            SELECT 1 FROM main.sqlite_schema s WHERE s.type = 'table'
              AND EXISTS (SELECT 1 FROM pragma_foreign_key_list(s.name, 'main')) LIMIT 1
            """) != nil
        foreignKeysAt = (version, declared)
        return declared
    }

    /// Runs `body` in a transaction, or in a savepoint when a transaction is already open.
    ///
    /// A throw rolls back (to the savepoint, when nested) and rethrows the first error. The body's result is
    /// returned after a successful commit.
    /// - Throws: the body's error, or `SQLiteError` from BEGIN or COMMIT.
    @discardableResult
    public func transaction<T>(_ kind: TransactionKind = .immediate, _ body: () throws -> T) throws -> T {
        if isInTransaction {
            savepointDepth += 1
            let name = "storectl_sp\(savepointDepth)"
            defer { savepointDepth -= 1 }
            try run("SAVEPOINT \(name)")
            do {
                let result = try body()
                try run("RELEASE \(name)")
                return result
            } catch {
                try? execute("ROLLBACK TO \(name)")
                try? execute("RELEASE \(name)")
                throw error
            }
        }
        // Kept prepared, as every statement a round runs often: compiling them each time was a measurable part of
        // a watcher's round.
        try run("BEGIN \(kind.rawValue)")
        do {
            let result = try body()
            try run("COMMIT")
            return result
        } catch {
            if isInTransaction { try? execute("ROLLBACK") }
            throw error
        }
    }

    /// The names of the columns of `table`, in order, with their declared type and primary-key position.
    /// - Throws: `SQLiteError`.
    public func columns(of table: String) throws -> [ColumnInfo] {
        try query("SELECT name, type, \"notnull\", pk, dflt_value FROM pragma_table_info(?)", [table]).map {
            ColumnInfo(name: $0[0].string ?? "", declaredType: $0[1].string ?? "", notNull: $0[2].int64 == 1,
                       primaryKeyIndex: Int($0[3].int64 ?? 0), defaultSQL: $0[4].string)
        }
    }

    /// The foreign keys declared by `table`.
    /// - Throws: `SQLiteError`.
    public func foreignKeys(of table: String) throws -> [ForeignKeyInfo] {
        let rows = try query("SELECT id, seq, \"table\", \"from\", \"to\", on_delete, on_update "
                                 + "FROM pragma_foreign_key_list(?) ORDER BY id, seq", [table])
        var result: [ForeignKeyInfo] = []
        for row in rows {
            let id = Int(row[0].int64 ?? 0)
            let parent = row[2].string ?? ""
            let from = row[3].string ?? ""
            let to = row[4].string
            if let last = result.last, last.id == id {
                result[result.count - 1].columns.append(from)
                result[result.count - 1].parentColumns.append(to)
            } else {
                result.append(ForeignKeyInfo(id: id, parentTable: parent, columns: [from], parentColumns: [to],
                                             onDelete: row[5].string ?? "NO ACTION",
                                             onUpdate: row[6].string ?? "NO ACTION"))
            }
        }
        return result
    }

    /// Whether a table (not a view) named `name` exists.
    public func tableExists(_ name: String) throws -> Bool {
        try scalar("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", [name]) != nil
    }

    /// Runs `PRAGMA integrity_check` and returns its messages ("ok" when healthy).
    public func integrityCheck() throws -> [String] {
        try query("PRAGMA integrity_check").compactMap { $0[0].string }
    }

    /// The SQLite library version, e.g. "3.40.1".
    public static var libraryVersion: String { String(cString: sqlite3_libversion()) }

    func lastError(sql: String?) -> SQLiteError {
        SQLiteError(extendedCode: sqlite3_extended_errcode(handle), message: String(cString: sqlite3_errmsg(handle)),
                    sql: sql, path: path)
    }
}

/// A column as `PRAGMA table_info` describes it.
public struct ColumnInfo: Equatable, Sendable {
    public var name: String
    public var declaredType: String
    public var notNull: Bool
    /// 0 when the column is not part of the primary key, else its 1-based position in the key.
    public var primaryKeyIndex: Int
    public var defaultSQL: String?

    public init(name: String, declaredType: String, notNull: Bool, primaryKeyIndex: Int, defaultSQL: String?) {
        self.name = name
        self.declaredType = declaredType
        self.notNull = notNull
        self.primaryKeyIndex = primaryKeyIndex
        self.defaultSQL = defaultSQL
    }
}

/// A foreign key as `PRAGMA foreign_key_list` describes it.
public struct ForeignKeyInfo: Equatable, Sendable {
    public var id: Int
    public var parentTable: String
    public var columns: [String]
    /// The referenced columns; nil entries mean "the parent's primary key".
    public var parentColumns: [String?]
    /// The `ON DELETE` action, as SQLite names it: `NO ACTION`, `RESTRICT`, `SET NULL`, `SET DEFAULT`, `CASCADE`.
    public var onDelete: String = "NO ACTION"
    /// The `ON UPDATE` action, named the same way.
    public var onUpdate: String = "NO ACTION"
}
