internal import CSQLite
import StoreBase

/// One access a statement asks for while it is compiled, as SQLite's authorizer reports it.
public struct AuthorizerRequest: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// INSERT, UPDATE or DELETE on `table`.
        case write
        /// CREATE, DROP or ALTER of a table, index, trigger or view (`object`, on `table`).
        case schema
        /// BEGIN, COMMIT, ROLLBACK or END.
        case transaction
        /// ATTACH or DETACH.
        case attach
        /// A PRAGMA (`pragma`, with `pragmaValue` when it sets one).
        case pragma
        /// Anything else: reads, functions, savepoints, ANALYZE, REINDEX...
        case other
    }

    public var kind: Kind
    /// The table, index, trigger or view named.
    public var object: String?
    /// The table it belongs to (for a write, the table written).
    public var table: String?
    public var pragma: String?
    public var pragmaValue: String?
    /// The innermost trigger or view the access comes from; nil when it comes from the statement itself.
    public var trigger: String?
    /// Whether a `.schema` request creates its object (CREATE TABLE, INDEX, TRIGGER or VIEW, TEMP or not).
    public var creates: Bool = false
    /// Whether a `.schema` request is about a TEMP object.
    public var temporary: Bool = false
}

/// Holds the decision closure for the C callback, and the first refusal's reason.
private final class AuthorizerBox {
    let decide: (AuthorizerRequest) -> String?
    var refusal: String?
    init(_ decide: @escaping (AuthorizerRequest) -> String?) { self.decide = decide }
}

/// The error of a statement the authorizer refused.
public struct AuthorizerRefusal: DiagnosedError {
    public var reason: String
    public var sqliteMessage: String
    public var exitCode: ExitCode { .dataError }
    public var summary: String { reason }
    public var details: [String] { ["  SQLite: \(sqliteMessage)"] }
}

extension Connection {
    /// Runs `body` with an authorizer: every statement compiled meanwhile asks `decide` for each access, which
    /// returns nil to allow it or the reason to refuse it. A refused statement fails to compile; the error is
    /// then an `AuthorizerRefusal` carrying the reason.
    ///
    /// "The authorizer callback is invoked as SQL statements are being compiled by sqlite3_prepare() ... When the
    /// callback returns SQLITE_DENY, the sqlite3_prepare_v2() or equivalent call that triggered the authorizer
    /// will fail with an error message explaining that access is denied." (sqlite3_set_authorizer)
    /// - Throws: `AuthorizerRefusal`, or what `body` throws.
    public func withAuthorizer<T>(_ decide: @escaping (AuthorizerRequest) -> String?, _ body: () throws -> T) throws
        -> T
    {
        let box = AuthorizerBox(decide)
        let context = Unmanaged.passRetained(box)
        defer {
            sqlite3_set_authorizer(handle, nil, nil)
            context.release()
        }
        // Statements prepared before were authorized without this rule; they must be prepared again.
        clearStatementCache()
        sqlite3_set_authorizer(handle, { pointer, code, a1, a2, a3, a4 in
            guard let pointer else { return SQLITE_OK }
            let box = Unmanaged<AuthorizerBox>.fromOpaque(pointer).takeUnretainedValue()
            let s1 = a1.map { String(cString: $0) }
            let s2 = a2.map { String(cString: $0) }
            let trigger = a4.map { String(cString: $0) }
            _ = a3
            var request = AuthorizerRequest(kind: .other, object: nil, table: nil, pragma: nil, pragmaValue: nil,
                                            trigger: trigger)
            switch code {
            case SQLITE_INSERT, SQLITE_UPDATE, SQLITE_DELETE:
                request.kind = .write
                request.table = s1
                request.object = s1
            case SQLITE_CREATE_TABLE, SQLITE_DROP_TABLE, SQLITE_CREATE_TEMP_TABLE, SQLITE_DROP_TEMP_TABLE,
                 SQLITE_CREATE_VIEW, SQLITE_DROP_VIEW, SQLITE_CREATE_TEMP_VIEW, SQLITE_DROP_TEMP_VIEW:
                request.kind = .schema
                request.object = s1
                request.table = s1
            case SQLITE_CREATE_INDEX, SQLITE_DROP_INDEX, SQLITE_CREATE_TRIGGER, SQLITE_DROP_TRIGGER,
                 SQLITE_CREATE_TEMP_INDEX, SQLITE_DROP_TEMP_INDEX, SQLITE_CREATE_TEMP_TRIGGER,
                 SQLITE_DROP_TEMP_TRIGGER:
                request.kind = .schema
                request.object = s1
                request.table = s2
            case SQLITE_ALTER_TABLE:
                request.kind = .schema
                request.object = s2
                request.table = s2
            case SQLITE_CREATE_VTABLE, SQLITE_DROP_VTABLE:
                request.kind = .schema
                request.object = s1
                request.table = s1
            case SQLITE_TRANSACTION:
                request.kind = .transaction
            case SQLITE_ATTACH, SQLITE_DETACH:
                request.kind = .attach
                request.object = s1
            case SQLITE_PRAGMA:
                request.kind = .pragma
                request.pragma = s1
                request.pragmaValue = s2
            default:
                break
            }
            switch code {
            case SQLITE_CREATE_TABLE, SQLITE_CREATE_INDEX, SQLITE_CREATE_TRIGGER, SQLITE_CREATE_VIEW,
                 SQLITE_CREATE_VTABLE:
                request.creates = true
            case SQLITE_CREATE_TEMP_TABLE, SQLITE_CREATE_TEMP_INDEX, SQLITE_CREATE_TEMP_TRIGGER,
                 SQLITE_CREATE_TEMP_VIEW:
                request.creates = true
                request.temporary = true
            case SQLITE_DROP_TEMP_TABLE, SQLITE_DROP_TEMP_INDEX, SQLITE_DROP_TEMP_TRIGGER, SQLITE_DROP_TEMP_VIEW:
                request.temporary = true
            default:
                break
            }
            guard let reason = box.decide(request) else { return SQLITE_OK }
            if box.refusal == nil { box.refusal = reason }
            return SQLITE_DENY
        }, context.toOpaque())
        do {
            return try body()
        } catch let error as SQLiteError where box.refusal != nil {
            throw AuthorizerRefusal(reason: box.refusal ?? "", sqliteMessage: error.message)
        }
    }
}
