internal import CLibPQ
import StoreBase
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An error reported by libpq or by the server, with its SQLSTATE when there is one.
struct PGError: Error, CustomStringConvertible {
    /// The five-character SQLSTATE (`PG_DIAG_SQLSTATE`), e.g. `23505`; nil for client-side failures
    /// (connection refused, connection lost, no password supplied).
    var sqlState: String?
    /// The message, without the SQLSTATE and location lines.
    var message: String
    /// The SQL that failed, when there was one.
    var sql: String?
    /// Whether the connection is unusable afterwards (`PQstatus == CONNECTION_BAD`).
    var connectionLost: Bool
    /// Whether the failure happened while connecting (as opposed to running a statement).
    var duringConnect: Bool
    /// Whether the statement failed because the session no longer ran it as it was prepared (26000, 0A000): it is
    /// prepared again on its next run, so trying again goes through.
    var preparedStatementLost = false

    var description: String {
        (sqlState.map { "PostgreSQL error \($0): " } ?? "PostgreSQL: ") + message
    }

    /// The SQLSTATE class: its first two characters (`08` connection exception, `28` authorization, ...).
    var sqlStateClass: String? { sqlState.map { String($0.prefix(2)) } }
}

/// One parameterised statement: SQL with `$1`, `$2`... and the parameters in text format (nil is SQL NULL).
struct PGQuery {
    var sql: String
    var parameters: [String?]

    init(_ sql: String, _ parameters: [String?] = []) {
        self.sql = sql
        self.parameters = parameters
    }
}

/// The result of one statement. Owns its `PGresult`, cleared on deinit.
final class PGResult {
    private let handle: OpaquePointer
    private let pq: LibPQ

    /// Takes ownership of `handle`, which `pq` made.
    init(_ handle: OpaquePointer, _ pq: LibPQ) {
        self.handle = handle
        self.pq = pq
    }

    deinit {
        pq.PQclear(handle)
    }

    /// The number of rows.
    var rowCount: Int { Int(pq.PQntuples(handle)) }

    /// The number of columns.
    var columnCount: Int { Int(pq.PQnfields(handle)) }

    /// The text of the value at `row`, `column`, or nil when it is SQL NULL.
    func string(_ row: Int, _ column: Int) -> String? {
        // "PQgetvalue returns an empty string, not a null pointer, for a null field": so ask PQgetisnull first.
        guard row < rowCount, column < columnCount, pq.PQgetisnull(handle, Int32(row), Int32(column)) == 0,
              let value = pq.PQgetvalue(handle, Int32(row), Int32(column))
        else { return nil }
        return String(cString: value)
    }

    /// The value as an integer, or nil when it is NULL or not an integer.
    func int64(_ row: Int, _ column: Int) -> Int64? { string(row, column).flatMap { Int64($0) } }

    /// The value as a double, or nil when it is NULL or not a number.
    func double(_ row: Int, _ column: Int) -> Double? { string(row, column).flatMap { Double($0) } }

    /// The value as a boolean (`t` / `f` in text format), or nil when it is NULL.
    func bool(_ row: Int, _ column: Int) -> Bool? {
        string(row, column).map { $0 == "t" || $0 == "true" || $0 == "on" }
    }

    /// The status of the result (`PQresultStatus`).
    fileprivate var status: ExecStatusType { pq.PQresultStatus(handle) }

    /// The server's error, if this result is one.
    fileprivate func error(sql: String, connectionLost: Bool) -> PGError {
        // PG_DIAG_SQLSTATE is the character 'C'; PG_DIAG_MESSAGE_PRIMARY is 'M'.
        let state = pq.PQresultErrorField(handle, Int32(UInt8(ascii: "C"))).map { String(cString: $0) }
        var message = pq.PQresultErrorField(handle, Int32(UInt8(ascii: "M"))).map { String(cString: $0) } ?? ""
        if message.isEmpty {
            message = pq.PQresultErrorMessage(handle).map { String(cString: $0) }?
                .trimmingWhitespace() ?? "unknown error"
        }
        if let detail = pq.PQresultErrorField(handle, Int32(UInt8(ascii: "D"))).map({ String(cString: $0) }) {
            message += " (\(detail))"
        }
        return PGError(sqlState: state, message: message, sql: sql, connectionLost: connectionLost,
                       duringConnect: false)
    }
}

/// A connection to a PostgreSQL server, owning its `PGconn` (finished on deinit, also when connecting failed).
///
/// Not Sendable: one owner at a time.
final class PGConnection {
    private let handle: OpaquePointer
    private let pq: LibPQ
    /// The statements prepared on this session, by their SQL (see `preparedName`).
    private var prepared: [String: String] = [:]
    /// Statements run once, unnamed, on this session: the second run prepares them.
    private var runOnce: Set<String> = []
    private var preparedCount = 0
    /// This connection's own prefix of statement names: behind a pooler that hands the statements of one session
    /// to another server session, a name this connection never prepared there is unknown (26000), never another
    /// client's statement of the same name.
    private let preparedPrefix = "storectl_" + String(UInt64.random(in: 0...UInt64.max), radix: 16) + "_"
    /// At most this many statements are prepared on one session (a watcher's rounds run about 30 different ones).
    static let preparedLimit = 128

    /// Connects. `parameters` are libpq keywords and values, processed in order so that later ones override
    /// earlier ones; a `dbname` holding a URL or connection string is expanded in place (`expand_dbname`).
    ///
    /// - Parameter timeout: seconds to wait for the server, unless the parameters carry `connect_timeout`.
    /// - Throws: `LibPQUnavailableError` when libpq cannot be loaded; `PGError` with `duringConnect` set, and the
    ///   server's SQLSTATE when the server refused.
    init(parameters: [(keyword: String, value: String)], timeout: Double = 10) throws {
        let pq = try LibPQ.shared()
        // PQconnectStartParams + PQconnectPoll rather than PQconnectdbParams: the asynchronous start lets us set
        // the error verbosity before the server answers, so that a refusal ("FATAL: role ... does not exist")
        // carries its SQLSTATE, which PQconnectdbParams would drop from the message.
        let keywords = parameters.map { strdup($0.keyword) } + [nil]
        let values = parameters.map { strdup($0.value) } + [nil]
        defer {
            for p in keywords { free(p) }
            for p in values { free(p) }
        }
        let made: OpaquePointer? = keywords.map { UnsafePointer($0) }.withUnsafeBufferPointer { k in
            values.map { UnsafePointer($0) }.withUnsafeBufferPointer { v in
                pq.PQconnectStartParams(k.baseAddress, v.baseAddress, 1)
            }
        }
        guard let made else {
            throw PGError(sqlState: nil, message: "out of memory while connecting", sql: nil, connectionLost: true,
                          duringConnect: true)
        }
        handle = made
        self.pq = pq
        // From here on `self` owns the handle, so deinit finishes it whatever happens.
        _ = pq.PQsetErrorVerbosity(handle, PQERRORS_VERBOSE)
        if pq.PQstatus(handle) == CONNECTION_BAD { throw connectError() }
        var wait = timeout
        if let t = parameters.last(where: { $0.keyword == "connect_timeout" }).flatMap({ Double($0.value) }), t > 0 {
            wait = t
        }
        let deadline = monotonicNow() + wait
        // "If PQconnectStart succeeds, the next stage is to poll libpq ... If you have yet to call PQconnectPoll,
        // i.e., just after the call to PQconnectStart, behave as if it last returned PGRES_POLLING_WRITING."
        var state = PGRES_POLLING_WRITING
        while state != PGRES_POLLING_OK {
            if state == PGRES_POLLING_FAILED { throw connectError() }
            let remaining = deadline - monotonicNow()
            if remaining <= 0 {
                throw PGError(sqlState: nil, message: "timeout expired after \(Int(wait)) seconds while connecting",
                              sql: nil, connectionLost: true, duringConnect: true)
            }
            // The socket can change between calls (a new host or address is tried), so ask each time.
            var fd = pollfd(fd: pq.PQsocket(handle), events: Int16(state == PGRES_POLLING_READING ? POLLIN : POLLOUT),
                            revents: 0)
            _ = poll(&fd, 1, Int32(min(remaining, 1) * 1000))
            state = pq.PQconnectPoll(handle)
        }
        // Messages after connecting carry the SQLSTATE in their own field: the default verbosity is enough.
        _ = pq.PQsetErrorVerbosity(handle, PQERRORS_DEFAULT)
    }

    deinit {
        pq.PQfinish(handle)
    }

    /// Whether the connection is still usable (`PQstatus != CONNECTION_BAD`).
    var isHealthy: Bool { pq.PQstatus(handle) != CONNECTION_BAD }

    /// The role the session authenticated as.
    var user: String? { pq.PQuser(handle).map { String(cString: $0) } }

    /// The connection's socket, to wait on with poll(2) for notifications.
    var socket: Int32 { pq.PQsocket(handle) }

    /// Reads what the server sent and returns the notifications received so far: (channel, payload) pairs.
    /// - Throws: `PGError` when the connection is lost.
    func notifications() throws -> [(channel: String, payload: String)] {
        // "PQconsumeInput normally returns 1 indicating 'no error', but returns 0 if there was some kind of trouble
        // (in which case PQerrorMessage can be consulted)." "PQnotifies returns the next notification from a list
        // of unhandled notification messages received from the server. It returns a null pointer if there are no
        // pending notifications. Once a notification is returned from PQnotifies, it is considered handled and will
        // be removed from the list of notifications. ... be sure to free it with PQfreemem."
        guard pq.PQconsumeInput(handle) == 1 else { throw lostError(sql: nil) }
        var result: [(channel: String, payload: String)] = []
        while let notify = pq.PQnotifies(handle) {
            let channel = notify.pointee.relname.map { String(cString: $0) } ?? ""
            let payload = notify.pointee.extra.map { String(cString: $0) } ?? ""
            pq.PQfreemem(notify)
            result.append((channel, payload))
        }
        return result
    }

    /// Runs one parameterised statement (`PQexecParams`, text format; `PQexecPrepared` once it is prepared).
    /// - Throws: `PGError`.
    @discardableResult
    func execute(_ sql: String, _ parameters: [String?] = []) throws -> PGResult {
        try execute(sql, parameters, again: true)
    }

    /// `again`: a prepared statement the server no longer runs as prepared, run outside a transaction (so nothing
    /// of it happened), runs once more, prepared again.
    private func execute(_ sql: String, _ parameters: [String?], again: Bool) throws -> PGResult {
        let name = try preparedName(sql, parameters: parameters.count)
        let values = parameters.map { $0.flatMap { strdup($0) } }
        defer { for p in values { free(p) } }
        let raw: OpaquePointer? = values.map { UnsafePointer($0) }.withUnsafeBufferPointer { v in
            if let name { return pq.PQexecPrepared(handle, name, Int32(parameters.count), v.baseAddress, nil, nil, 0) }
            return pq.PQexecParams(handle, sql, Int32(parameters.count), nil, v.baseAddress, nil, nil, 0)
        }
        guard let raw else { throw lostError(sql: sql) }
        let result = PGResult(raw, pq)
        switch result.status {
        case PGRES_TUPLES_OK, PGRES_COMMAND_OK: return result
        default:
            var error = result.error(sql: sql, connectionLost: !isHealthy)
            if forgetPrepared(sql, after: error) {
                if again, idle { return try execute(sql, parameters, again: false) }
                error.preparedStatementLost = true
            }
            throw error
        }
    }

    /// Whether the session is outside any transaction (a statement that failed there changed nothing).
    private var idle: Bool { pq.PQtransactionStatus(handle) == PQTRANS_IDLE }

    /// The name `sql` runs under on this session, or nil to send it unnamed. The server parses and plans an unnamed
    /// statement each time it runs it, and a watcher's session runs the same few statements round after round (the
    /// change feed's page query spent most of its server time being parsed and planned): a statement is prepared
    /// on its second run, so a command that runs each statement once pays no extra round trip, and PostgreSQL
    /// decides per execution between a plan for the values and a generic one (`plan_cache_mode = auto`).
    /// Only plain DML is prepared, and none whose result columns follow a table's (`*`), which a prepared
    /// statement refuses once the table changes.
    private func preparedName(_ sql: String, parameters: Int) throws -> String? {
        if let name = prepared[sql] { return name }
        guard prepared.count < Self.preparedLimit, Self.preparable(sql) else { return nil }
        guard runOnce.contains(sql) else {
            if runOnce.count >= 4 * Self.preparedLimit { runOnce.removeAll() }
            runOnce.insert(sql)
            return nil
        }
        preparedCount += 1
        let name = preparedPrefix + String(preparedCount)
        guard let raw = pq.PQprepare(handle, name, sql, Int32(parameters), nil) else { throw lostError(sql: sql) }
        let result = PGResult(raw, pq)
        guard result.status == PGRES_COMMAND_OK else { throw result.error(sql: sql, connectionLost: !isHealthy) }
        runOnce.remove(sql)
        prepared[sql] = name
        return name
    }

    /// Whether `sql` may be prepared: a SELECT, WITH, INSERT, UPDATE or DELETE without `*` in its text.
    static func preparable(_ sql: String) -> Bool {
        let head = sql.drop { $0 == " " || $0 == "\n" || $0 == "\t" }.prefix(7).uppercased()
        guard ["SELECT", "WITH", "INSERT", "UPDATE", "DELETE"].contains(where: { head.hasPrefix($0) }) else { return false }
        return !sql.contains("*")
    }

    /// Drops a prepared statement the server no longer runs as it was prepared, and says whether it did: gone
    /// (26000: the session's statements were deallocated, by `DISCARD ALL` or a pooler; every one is prepared
    /// again) or planned for another shape of a table (0A000, "cached plan must not change result type"; it is
    /// deallocated when the session is outside a transaction). The next run prepares it again.
    private func forgetPrepared(_ sql: String, after error: PGError) -> Bool {
        guard let name = prepared[sql], error.sqlState == "26000" || error.sqlState == "0A000" else { return false }
        if error.sqlState == "26000" {
            runOnce.formUnion(prepared.keys)
            prepared.removeAll()
        } else {
            prepared[sql] = nil
            runOnce.insert(sql)
            if idle { _ = try? execute("DEALLOCATE \"\(name)\"", [], again: false) }
        }
        return true
    }

    /// Runs several statements in one network round trip (libpq pipeline mode), ended by one sync point.
    ///
    /// Without explicit BEGIN/COMMIT the statements run in one implicit transaction: "If the pipeline used an
    /// implicit transaction, then operations that have already executed are rolled back and operations that were
    /// queued to follow the failed operation are skipped entirely." Each statement still takes its own snapshot
    /// under READ COMMITTED, as separate statements do.
    ///
    /// - Returns: one result per statement, in order.
    /// - Throws: `PGError` for the first statement that failed; nothing of the pipeline was committed then.
    func pipeline(_ queries: [PGQuery]) throws -> [PGResult] {
        try pipeline(queries, again: true)
    }

    /// `again`: as for `execute`; a pipeline's implicit transaction kept nothing of a pipeline that failed.
    private func pipeline(_ queries: [PGQuery], again: Bool) throws -> [PGResult] {
        // Statements to prepare are prepared before the pipeline starts (a prepare is a round trip of its own).
        let names = try queries.map { try preparedName($0.sql, parameters: $0.parameters.count) }
        guard pq.PQenterPipelineMode(handle) == 1 else { throw lostError(sql: queries.first?.sql) }
        var sendFailure: PGError?
        for (query, name) in zip(queries, names) {
            let values = query.parameters.map { $0.flatMap { strdup($0) } }
            defer { for p in values { free(p) } }
            let sent = values.map { UnsafePointer($0) }.withUnsafeBufferPointer { v in
                if let name { return pq.PQsendQueryPrepared(handle, name, Int32(values.count), v.baseAddress, nil, nil, 0) }
                return pq.PQsendQueryParams(handle, query.sql, Int32(values.count), nil, v.baseAddress, nil, nil, 0)
            }
            if sent != 1 {
                sendFailure = lostError(sql: query.sql)
                break
            }
        }
        if let sendFailure {
            // A connection that cannot take a statement is not worth saving; the caller drops it.
            throw sendFailure
        }
        guard pq.PQpipelineSync(handle) == 1 else { throw lostError(sql: queries.last?.sql) }
        // "To process the result of one query in a pipeline, the application calls PQgetResult repeatedly and
        // handles each result until PQgetResult returns null." The sync point ends with PGRES_PIPELINE_SYNC.
        var results: [PGResult] = []
        var firstError: PGError?
        for query in queries {
            guard let raw = pq.PQgetResult(handle) else { throw lostError(sql: query.sql) }
            let result = PGResult(raw, pq)
            while let extra = pq.PQgetResult(handle) { pq.PQclear(extra) }
            switch result.status {
            case PGRES_TUPLES_OK, PGRES_COMMAND_OK:
                results.append(result)
            case PGRES_PIPELINE_ABORTED:
                break
            default:
                if firstError == nil {
                    firstError = result.error(sql: query.sql, connectionLost: !isHealthy)
                }
            }
        }
        guard let sync = pq.PQgetResult(handle) else { throw lostError(sql: nil) }
        let syncStatus = pq.PQresultStatus(sync)
        pq.PQclear(sync)
        guard syncStatus == PGRES_PIPELINE_SYNC, pq.PQexitPipelineMode(handle) == 1 else {
            throw firstError ?? lostError(sql: nil)
        }
        if var firstError {
            if let failed = firstError.sql, forgetPrepared(failed, after: firstError) {
                if again, idle { return try pipeline(queries, again: false) }
                firstError.preparedStatementLost = true
            }
            throw firstError
        }
        return results
    }

    /// Runs `COPY ... FROM STDIN` (`sql`) with `data`, rows in COPY's text format.
    ///
    /// "PQexec ... returns PGRES_COPY_IN"; then "PQputCopyData ... Transmits the COPY data in the specified buffer
    /// ... The result is 1 if the data was queued"; "PQputCopyEnd ... Sends end-of-data indication to the server
    /// during COPY_IN state"; "After successfully calling PQputCopyEnd, call PQgetResult to obtain the final
    /// result status of the COPY command."
    /// - Throws: `PGError` (a malformed row among them: nothing of it is kept, the statement failed).
    func copyIn(_ sql: String, _ data: [UInt8]) throws {
        guard let raw = pq.PQexecParams(handle, sql, 0, nil, nil, nil, nil, 0) else { throw lostError(sql: sql) }
        let start = PGResult(raw, pq)
        guard start.status == PGRES_COPY_IN else { throw start.error(sql: sql, connectionLost: !isHealthy) }
        let chunk = 1 << 20
        var offset = 0
        while offset < data.count {
            let count = min(chunk, data.count - offset)
            let sent = data.withUnsafeBufferPointer { bytes in
                bytes.baseAddress.map { base in
                    (base + offset).withMemoryRebound(to: CChar.self, capacity: count) {
                        pq.PQputCopyData(handle, $0, Int32(count))
                    }
                } ?? 1
            }
            guard sent == 1 else { throw lostError(sql: sql) }
            offset += count
        }
        guard pq.PQputCopyEnd(handle, nil) == 1 else { throw lostError(sql: sql) }
        var failure: PGError?
        while let next = pq.PQgetResult(handle) {
            let result = PGResult(next, pq)
            if result.status != PGRES_COMMAND_OK && failure == nil {
                failure = result.error(sql: sql, connectionLost: !isHealthy)
            }
        }
        if let failure { throw failure }
    }

    /// Runs `body` in a transaction: BEGIN (READ COMMITTED), COMMIT; a throw rolls back and rethrows.
    /// - Throws: what `body` throws, or `PGError`.
    func transaction<T>(_ body: () throws -> T) throws -> T {
        try execute("BEGIN ISOLATION LEVEL READ COMMITTED")
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            if isHealthy { _ = try? execute("ROLLBACK") }
            throw error
        }
    }

    /// The error for a call that got no result at all: the connection is gone or broken.
    private func lostError(sql: String?) -> PGError {
        let text = pq.PQerrorMessage(handle).map { String(cString: $0) } ?? ""
        let (state, message) = PGConnection.splitVerbose(text)
        return PGError(sqlState: state, message: message.isEmpty ? "the connection to the server was lost" : message,
                       sql: sql, connectionLost: true, duringConnect: false)
    }

    /// The error for a failed connection attempt, with the server's SQLSTATE when it refused.
    private func connectError() -> PGError {
        let text = pq.PQerrorMessage(handle).map { String(cString: $0) } ?? ""
        let (state, message) = PGConnection.splitVerbose(text)
        return PGError(sqlState: state, message: message.isEmpty ? "could not connect" : message, sql: nil,
                       connectionLost: true, duringConnect: true)
    }

    /// Splits a verbose libpq message (`... FATAL:  28000: role "x" does not exist\nLOCATION: ...`) into the
    /// SQLSTATE and the message without it and without the LOCATION line.
    static func splitVerbose(_ text: String) -> (sqlState: String?, message: String) {
        var state: String?
        var lines: [String] = []
        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: true) {
            var line = String(rawLine)
            if line.hasPrefix("LOCATION:") { continue }
            for severity in ["FATAL:  ", "ERROR:  ", "PANIC:  "] {
                guard let range = line.firstRange(of: severity) else { continue }
                let rest = line[range.upperBound...]
                let code = rest.prefix(5)
                if code.count == 5, code.allSatisfy({ $0.isNumber || ($0.isUppercase && $0.isASCII) }),
                   rest.dropFirst(5).hasPrefix(": ")
                {
                    if state == nil { state = String(code) }
                    line = String(line[..<range.upperBound]) + String(rest.dropFirst(7))
                }
                break
            }
            lines.append(line.trimmingSpaces())
        }
        return (state, lines.filter { !$0.isEmpty }.joined(separator: "; "))
    }
}

/// Connection string handling that needs libpq but no connection.
enum PGConnInfo {
    /// The options a URL or `key=value` connection string sets explicitly.
    /// - Throws: `LibPQUnavailableError` when libpq cannot be loaded; `PGError` with libpq's message when the
    ///   string is malformed.
    static func parse(_ conninfo: String) throws -> [String: String] {
        let pq = try LibPQ.shared()
        var errorMessage: UnsafeMutablePointer<CChar>?
        guard let options = pq.PQconninfoParse(conninfo, &errorMessage) else {
            let message = errorMessage.map { String(cString: $0) }?
                .trimmingWhitespace() ?? "out of memory"
            if let errorMessage { pq.PQfreemem(errorMessage) }
            throw PGError(sqlState: nil, message: message, sql: nil, connectionLost: false, duringConnect: true)
        }
        defer { pq.PQconninfoFree(options) }
        // "PQconninfoParse returns ... an array of PQconninfoOption structures ... ending with an entry having a
        // null keyword pointer. ... only options explicitly specified in the string have values set."
        var result: [String: String] = [:]
        var p = options
        while let keyword = p.pointee.keyword {
            if let value = p.pointee.val { result[String(cString: keyword)] = String(cString: value) }
            p += 1
        }
        return result
    }

    /// A PostgreSQL text-format array literal of `values` (`{"a","b",NULL}`), for a `$n::text[]` parameter.
    static func textArray(_ values: [String?]) -> String {
        // Built as UTF-8 bytes: a batch holds thousands of JSON texts, and per-character String appends are slow.
        var out: [UInt8] = [UInt8(ascii: "{")]
        out.reserveCapacity(values.reduce(2) { $0 + ($1?.utf8.count ?? 4) + 3 })
        for (i, value) in values.enumerated() {
            if i > 0 { out.append(UInt8(ascii: ",")) }
            guard let value else {
                out.append(contentsOf: Array("NULL".utf8))
                continue
            }
            out.append(UInt8(ascii: "\""))
            for byte in value.utf8 {
                if byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { out.append(UInt8(ascii: "\\")) }
                out.append(byte)
            }
            out.append(UInt8(ascii: "\""))
        }
        out.append(UInt8(ascii: "}"))
        return String(decoding: out, as: UTF8.self)
    }

    /// A PostgreSQL text-format boolean array literal (`{t,f}`).
    static func boolArray(_ values: [Bool]) -> String {
        "{" + values.map { $0 ? "t" : "f" }.joined(separator: ",") + "}"
    }
}
