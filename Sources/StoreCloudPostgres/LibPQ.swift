internal import CLibPQ
import StoreBase
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// libpq, loaded with `dlopen` the first time a command uses PostgreSQL, as a table of its functions.
///
/// ## Why not link it
///
/// Scripts call short commands (`status`, `mode`, `--version`) in loops, so the start time of every process
/// counts, and most commands never talk to PostgreSQL. Linking libpq made the dynamic loader map about 25 more
/// shared libraries at every start (TLS, Kerberos, LDAP, gnutls, ...: 44 in all) and resolve symbols across
/// them: a hello-world Swift binary took 4.6 ms plain, 10.8 ms with Foundation and 19.2 ms once linked with
/// `-lpq` (`perf stat -r 30`), with `do_lookup_x` / `_dl_lookup_symbol_x` at the top of `perf record`. Loaded
/// here instead, libpq and its dependencies cost nothing to a command that does not use a `postgres://` URL.
///
/// The CLibPQ target still provides the header (types such as `ExecStatusType` and the constants), but its
/// module map links nothing. Every libpq function storectl calls is a field of this table; calling the
/// header's functions directly would fail to link, so none can be missed.
///
///     let pq = try LibPQ.shared()
///     pq.PQclear(result)
///
/// The library is opened once per process and never closed: the function pointers stay valid for its lifetime.
/// `STORECTL_LIBPQ` names another file to open (a path, or a name the loader searches for), e.g. a libpq
/// installed outside the loader's search path.
final class LibPQ: @unchecked Sendable {
    // @unchecked Sendable: immutable after init, and every field is a pointer to a C function.

    /// The file that was opened.
    let library: String

    // Connecting.
    let PQconnectStartParams: @convention(c) (UnsafePointer<UnsafePointer<CChar>?>?,
                                              UnsafePointer<UnsafePointer<CChar>?>?, Int32) -> OpaquePointer?
    let PQconnectPoll: @convention(c) (OpaquePointer?) -> PostgresPollingStatusType
    let PQsetErrorVerbosity: @convention(c) (OpaquePointer?, PGVerbosity) -> PGVerbosity
    let PQfinish: @convention(c) (OpaquePointer?) -> Void
    let PQstatus: @convention(c) (OpaquePointer?) -> ConnStatusType
    let PQsocket: @convention(c) (OpaquePointer?) -> Int32
    let PQuser: @convention(c) (OpaquePointer?) -> UnsafeMutablePointer<CChar>?
    let PQtransactionStatus: @convention(c) (OpaquePointer?) -> PGTransactionStatusType
    let PQerrorMessage: @convention(c) (OpaquePointer?) -> UnsafeMutablePointer<CChar>?

    // Connection strings.
    let PQconninfoParse: @convention(c) (UnsafePointer<CChar>?, UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?)
        -> UnsafeMutablePointer<PQconninfoOption>?
    let PQconninfoFree: @convention(c) (UnsafeMutablePointer<PQconninfoOption>?) -> Void
    let PQfreemem: @convention(c) (UnsafeMutableRawPointer?) -> Void

    // Statements: conn, command, nParams, paramTypes, paramValues, paramLengths, paramFormats, resultFormat.
    let PQexecParams: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, Int32, UnsafePointer<Oid>?,
                                      UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?,
                                      UnsafePointer<Int32>?, Int32) -> OpaquePointer?
    let PQsendQueryParams: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, Int32, UnsafePointer<Oid>?,
                                           UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?,
                                           UnsafePointer<Int32>?, Int32) -> Int32
    // Prepared statements: conn, stmtName, query, nParams, paramTypes; conn, stmtName, nParams, paramValues,
    // paramLengths, paramFormats, resultFormat.
    let PQprepare: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, UnsafePointer<CChar>?, Int32,
                                   UnsafePointer<Oid>?) -> OpaquePointer?
    let PQexecPrepared: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, Int32,
                                        UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?,
                                        UnsafePointer<Int32>?, Int32) -> OpaquePointer?
    let PQsendQueryPrepared: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, Int32,
                                             UnsafePointer<UnsafePointer<CChar>?>?, UnsafePointer<Int32>?,
                                             UnsafePointer<Int32>?, Int32) -> Int32
    let PQgetResult: @convention(c) (OpaquePointer?) -> OpaquePointer?
    let PQenterPipelineMode: @convention(c) (OpaquePointer?) -> Int32
    let PQexitPipelineMode: @convention(c) (OpaquePointer?) -> Int32
    let PQpipelineSync: @convention(c) (OpaquePointer?) -> Int32

    // COPY FROM STDIN: conn, buffer, nbytes; conn, errormsg (NULL: end normally).
    let PQputCopyData: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?, Int32) -> Int32
    let PQputCopyEnd: @convention(c) (OpaquePointer?, UnsafePointer<CChar>?) -> Int32

    // Results.
    let PQclear: @convention(c) (OpaquePointer?) -> Void
    let PQresultStatus: @convention(c) (OpaquePointer?) -> ExecStatusType
    let PQresultErrorField: @convention(c) (OpaquePointer?, Int32) -> UnsafeMutablePointer<CChar>?
    let PQresultErrorMessage: @convention(c) (OpaquePointer?) -> UnsafeMutablePointer<CChar>?
    let PQntuples: @convention(c) (OpaquePointer?) -> Int32
    let PQnfields: @convention(c) (OpaquePointer?) -> Int32
    let PQgetisnull: @convention(c) (OpaquePointer?, Int32, Int32) -> Int32
    let PQgetvalue: @convention(c) (OpaquePointer?, Int32, Int32) -> UnsafeMutablePointer<CChar>?

    // Notifications (LISTEN/NOTIFY).
    let PQconsumeInput: @convention(c) (OpaquePointer?) -> Int32
    let PQnotifies: @convention(c) (OpaquePointer?) -> UnsafeMutablePointer<PGnotify>?

    /// The library's default name: the soname of libpq 5 (PostgreSQL 8.0 and later, pipeline mode since 14).
    #if canImport(Darwin)
    static let defaultLibrary = "libpq.5.dylib"
    #else
    static let defaultLibrary = "libpq.so.5"
    #endif

    /// The process's libpq, loaded on the first call.
    /// - Throws: `LibPQUnavailableError` (exit 69) when it cannot be loaded; every later call throws it again.
    static func shared() throws(LibPQUnavailableError) -> LibPQ {
        try loaded.get()
    }

    private static let loaded = Result { () throws(LibPQUnavailableError) -> LibPQ in
        let configured = getenv("STORECTL_LIBPQ").map { String(cString: $0) } ?? ""
        return try LibPQ(library: configured.isEmpty ? defaultLibrary : configured)
    }

    /// Opens `library` and resolves every function storectl uses.
    /// - Throws: `LibPQUnavailableError` when the file cannot be loaded or lacks a function (a libpq older than 14).
    init(library: String) throws(LibPQUnavailableError) {
        let lib: DynamicLibrary
        do {
            lib = try DynamicLibrary.open(library)
        } catch {
            throw LibPQUnavailableError(library: library, reason: error.reason)
        }
        func symbol<F>(_ name: String) throws(LibPQUnavailableError) -> F {
            do {
                return try lib.function(name)
            } catch {
                throw LibPQUnavailableError(library: library, reason: error.reason + " (libpq 14 or later is needed)")
            }
        }
        self.library = library
        PQconnectStartParams = try symbol("PQconnectStartParams")
        PQconnectPoll = try symbol("PQconnectPoll")
        PQsetErrorVerbosity = try symbol("PQsetErrorVerbosity")
        PQfinish = try symbol("PQfinish")
        PQstatus = try symbol("PQstatus")
        PQsocket = try symbol("PQsocket")
        PQuser = try symbol("PQuser")
        PQtransactionStatus = try symbol("PQtransactionStatus")
        PQerrorMessage = try symbol("PQerrorMessage")
        PQconninfoParse = try symbol("PQconninfoParse")
        PQconninfoFree = try symbol("PQconninfoFree")
        PQfreemem = try symbol("PQfreemem")
        PQexecParams = try symbol("PQexecParams")
        PQsendQueryParams = try symbol("PQsendQueryParams")
        PQprepare = try symbol("PQprepare")
        PQexecPrepared = try symbol("PQexecPrepared")
        PQsendQueryPrepared = try symbol("PQsendQueryPrepared")
        PQgetResult = try symbol("PQgetResult")
        PQenterPipelineMode = try symbol("PQenterPipelineMode")
        PQexitPipelineMode = try symbol("PQexitPipelineMode")
        PQpipelineSync = try symbol("PQpipelineSync")
        PQputCopyData = try symbol("PQputCopyData")
        PQputCopyEnd = try symbol("PQputCopyEnd")
        PQclear = try symbol("PQclear")
        PQresultStatus = try symbol("PQresultStatus")
        PQresultErrorField = try symbol("PQresultErrorField")
        PQresultErrorMessage = try symbol("PQresultErrorMessage")
        PQntuples = try symbol("PQntuples")
        PQnfields = try symbol("PQnfields")
        PQgetisnull = try symbol("PQgetisnull")
        PQgetvalue = try symbol("PQgetvalue")
        PQconsumeInput = try symbol("PQconsumeInput")
        PQnotifies = try symbol("PQnotifies")
    }
}

/// libpq could not be loaded, so a `postgres://` cloud cannot be reached (exit 69).
public struct LibPQUnavailableError: DiagnosedError, Equatable {
    /// The file storectl tried to open (`libpq.so.5`, or `STORECTL_LIBPQ`).
    public var library: String
    /// Why: the loader's message, or the missing function.
    public var reason: String

    public var exitCode: ExitCode { .unavailable }
    public var summary: String {
        "cannot load the PostgreSQL client library \(library), which postgres:// cloud URLs need: \(reason)"
    }
    public var hint: String? {
        "install libpq 14 or later (Debian/Ubuntu: apt-get install libpq5, or libpq-dev; macOS: brew install "
            + "libpq), or set STORECTL_LIBPQ to the library's path"
    }
}
