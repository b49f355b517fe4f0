internal import CSQLite
import StoreBase

/// A compiled SQL statement. It belongs to its connection and is finalized when released.
public final class Statement {
    let handle: OpaquePointer
    /// The SQL the statement was compiled from.
    public let sql: String
    // The database handle, not the Connection: a statement must not keep its connection alive (the connection's
    // cache holds its statements). sqlite3_close_v2 defers the close until every statement is finalized, so a
    // statement that outlives its Connection object is still safe.
    private let db: OpaquePointer
    private let path: String

    init(connection: Connection, sql: String) throws {
        var stmt: OpaquePointer?
        var tail: UnsafePointer<CChar>?
        let rc = sqlite3_prepare_v2(connection.handle, sql, -1, &stmt, &tail)
        guard rc == SQLITE_OK, let stmt else {
            sqlite3_finalize(stmt)
            if rc == SQLITE_OK {
                throw SQLiteError(extendedCode: SQLITE_MISUSE, message: "empty statement", sql: sql, path: connection.path)
            }
            throw connection.lastError(sql: sql)
        }
        self.handle = stmt
        self.sql = sql
        self.db = connection.handle
        self.path = connection.path
    }

    private func lastError() -> SQLiteError {
        SQLiteError(extendedCode: sqlite3_extended_errcode(db), message: String(cString: sqlite3_errmsg(db)), sql: sql,
                    path: path)
    }

    deinit { sqlite3_finalize(handle) }

    /// How many parameters the statement takes.
    public var parameterCount: Int { Int(sqlite3_bind_parameter_count(handle)) }

    /// How many columns each row has.
    public var columnCount: Int { Int(sqlite3_column_count(handle)) }

    /// The name of column `index` (0-based).
    public func columnName(_ index: Int) -> String {
        sqlite3_column_name(handle, Int32(index)).map { String(cString: $0) } ?? ""
    }

    /// Every column name, in order.
    public var columnNames: [String] { (0..<columnCount).map(columnName) }

    /// Resets the statement so that it can run again. Bindings are kept.
    /// - Throws: `SQLiteError` (the error of the last step, if it failed).
    public func reset() throws {
        sqlite3_reset(handle)
    }

    /// Binds `values` to parameters 1...n, after clearing the previous bindings.
    /// - Throws: `SQLiteError` when a value cannot be bound or the count is wrong.
    public func bind(_ values: [any SQLBindable]) throws {
        sqlite3_reset(handle)
        sqlite3_clear_bindings(handle)
        guard values.count == parameterCount else {
            throw SQLiteError(extendedCode: SQLITE_RANGE,
                              message: "statement takes \(parameterCount) parameters, got \(values.count)", sql: sql)
        }
        for (i, v) in values.enumerated() { try bind(v.sqliteValue, at: i + 1) }
    }

    /// Binds one value to the 1-based parameter `index`.
    /// - Throws: `SQLiteError`.
    public func bind(_ value: Value, at index: Int) throws {
        let i = Int32(index)
        let rc: Int32
        switch value {
        case .null: rc = sqlite3_bind_null(handle, i)
        case .integer(let v): rc = sqlite3_bind_int64(handle, i, v)
        case .real(let d): rc = sqlite3_bind_double(handle, i, d)
        case .text(let s):
            // SQLITE_TRANSIENT: the Swift string's bytes do not outlive this call, so SQLite copies them. The length
            // is given in bytes, so that a NUL inside the text is kept ("a\u{0}b" stays three characters).
            var text = s
            rc = text.withUTF8 { bytes in bindText(bytes, at: i) }
        case .textBytes(let b):
            rc = b.withUnsafeBufferPointer { bytes in bindText(bytes, at: i) }
        case .blob(let b):
            // "If the third parameter to sqlite3_bind_blob() is a NULL pointer then ... the end result is the same
            // as sqlite3_bind_null()": an empty array may have no storage, and an empty blob is not NULL.
            rc = b.isEmpty ? sqlite3_bind_zeroblob(handle, i, 0) : b.withUnsafeBytes { raw in
                sqlite3_bind_blob(handle, i, raw.baseAddress, Int32(raw.count), storectl_sqlite_transient())
            }
        }
        if rc != SQLITE_OK { throw lastError() }
    }

    /// Binds `bytes` as text, exactly as they are (SQLite does not check that text is valid UTF-8).
    private func bindText(_ bytes: UnsafeBufferPointer<UInt8>, at i: Int32) -> Int32 {
        // "If the third parameter to sqlite3_bind_text() ... is a NULL pointer then the fourth parameter is ignored
        // and the end result is the same as sqlite3_bind_null()": an empty text needs a real pointer.
        guard let base = bytes.baseAddress, bytes.count > 0 else {
            return sqlite3_bind_text(handle, i, "", 0, storectl_sqlite_transient())
        }
        return base.withMemoryRebound(to: CChar.self, capacity: bytes.count) { chars in
            sqlite3_bind_text(handle, i, chars, Int32(bytes.count), storectl_sqlite_transient())
        }
    }

    /// Binds one value by parameter name (`:name`, `@name` or `$name`).
    /// - Throws: `SQLiteError` when there is no such parameter.
    public func bind(_ value: Value, named name: String) throws {
        let index = sqlite3_bind_parameter_index(handle, name)
        guard index > 0 else {
            throw SQLiteError(extendedCode: SQLITE_RANGE, message: "no parameter named \(name)", sql: sql)
        }
        try bind(value, at: Int(index))
    }

    /// Runs the statement to its next row. Returns true when a row is available, false when done.
    /// - Throws: `SQLiteError` with the extended code, the message and the SQL.
    @discardableResult
    public func step() throws -> Bool {
        let rc = sqlite3_step(handle)
        switch rc {
        case SQLITE_ROW: return true
        case SQLITE_DONE:
            sqlite3_reset(handle)
            return false
        default:
            let error = lastError()
            sqlite3_reset(handle)
            throw error
        }
    }

    /// The value of column `index` (0-based) of the current row.
    public func column(_ index: Int) -> Value {
        let i = Int32(index)
        switch sqlite3_column_type(handle, i) {
        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(handle, i))
        case SQLITE_FLOAT: return .real(sqlite3_column_double(handle, i))
        case SQLITE_TEXT:
            guard let p = sqlite3_column_text(handle, i) else { return .text("") }
            let n = Int(sqlite3_column_bytes(handle, i))
            return Value.text(bytes: UnsafeBufferPointer(start: p, count: n))
        case SQLITE_BLOB:
            let n = Int(sqlite3_column_bytes(handle, i))
            guard n > 0, let p = sqlite3_column_blob(handle, i) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: p, count: n)))
        default: return .null
        }
    }

    /// The integer in column `index`, or nil when it is NULL.
    public func int64(_ index: Int) -> Int64? {
        let i = Int32(index)
        if sqlite3_column_type(handle, i) == SQLITE_NULL { return nil }
        return sqlite3_column_int64(handle, i)
    }

    /// The text in column `index`, or nil when it is NULL.
    public func string(_ index: Int) -> String? {
        let i = Int32(index)
        if sqlite3_column_type(handle, i) == SQLITE_NULL { return nil }
        guard let p = sqlite3_column_text(handle, i) else { return "" }
        let n = Int(sqlite3_column_bytes(handle, i))
        return String(decoding: UnsafeBufferPointer(start: p, count: n), as: UTF8.self)
    }

    /// The bytes of column `index` as text (SQLite's text of a number; none for NULL).
    public func bytes(_ index: Int) -> [UInt8] {
        let i = Int32(index)
        guard let p = sqlite3_column_text(handle, i) else { return [] }
        return Array(UnsafeBufferPointer(start: p, count: Int(sqlite3_column_bytes(handle, i))))
    }

    /// The current row, with every column.
    public var row: Row {
        Row(names: columnNames, values: (0..<columnCount).map(column))
    }

    /// Binds `arguments`, then calls `body` for each row. The row's values are valid only inside the call.
    /// - Throws: `SQLiteError`, or the body's error.
    public func forEach(_ arguments: [any SQLBindable] = [], _ body: (Statement) throws -> Void) throws {
        try bind(arguments)
        do {
            while try step() { try body(self) }
        } catch {
            sqlite3_reset(handle)
            throw error
        }
    }
}

/// One result row: values by position, and names for lookup.
public struct Row: Sendable, Equatable {
    public var names: [String]
    public var values: [Value]

    public init(names: [String], values: [Value]) {
        self.names = names
        self.values = values
    }

    public subscript(index: Int) -> Value { index < values.count ? values[index] : .null }

    public subscript(name: String) -> Value {
        guard let i = names.firstIndex(of: name) else { return .null }
        return values[i]
    }
}
