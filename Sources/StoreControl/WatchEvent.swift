import FoundationEssentials
import StoreBase
import StoreSQLite

/// One thing `storectl watch` reports: with `--json`, one JSON line on stdout per event.
///
/// Every line carries `"version": 1`, its `type` (`import`, `export`, `error`, `retry` or `mode`), the `store`
/// and the time `at` (ISO 8601 UTC with milliseconds). The shapes are documented in docs/watch.md; keys are only
/// ever added.
public enum WatchEvent: Sendable, Encodable {
    case imported(ImportEvent)
    case exported(ExportEvent)
    case error(ErrorEvent)
    case retry(RetryEvent)
    case mode(ModeEvent)

    public func encode(to encoder: any Encoder) throws {
        switch self {
        case .imported(let e): try e.encode(to: encoder)
        case .exported(let e): try e.encode(to: encoder)
        case .error(let e): try e.encode(to: encoder)
        case .retry(let e): try e.encode(to: encoder)
        case .mode(let e): try e.encode(to: encoder)
        }
    }

    /// The event's `type`.
    public var type: String {
        switch self {
        case .imported: return ImportEvent.type
        case .exported: return ExportEvent.type
        case .error: return ErrorEvent.type
        case .retry: return RetryEvent.type
        case .mode: return ModeEvent.type
        }
    }

    /// The store the event is about.
    public var store: String {
        switch self {
        case .imported(let e): return e.store
        case .exported(let e): return e.store
        case .error(let e): return e.store
        case .retry(let e): return e.store
        case .mode(let e): return e.store
        }
    }

    /// The event in words, for people (stdout without `--json`, and the log).
    public var summary: String {
        switch self {
        case .imported(let e):
            let what = e.entities.joined(separator: ", ")
            return "imported \(e.count) change(s) from the cloud (\(what)); history token \(e.token)"
        case .exported(let e):
            return "exported \(e.saved) saved, \(e.deleted) deleted" + (e.baseline ? " (baseline)" : "")
                + (e.conflictsResolved > 0 ? ", \(e.conflictsResolved) conflict(s) resolved" : "")
        case .error(let e):
            return "sync failed (exit \(e.error.code)): \(e.error.message)"
                + (e.error.hint.map { "; hint: \($0)" } ?? "")
        case .retry(let e):
            return "retry \(e.attempt) in \(WatchTime.seconds(e.delaySeconds)) at \(e.nextAttemptAt): \(e.reason)"
        case .mode(let e):
            return "mode \(e.previous ?? "unknown") -> \(e.mode)"
                + (e.mode == "cloud" ? ": syncing" : ": the cloud is not contacted until the store is in cloud mode")
        }
    }
}

/// The keys every event line starts with: `version`, `type`, `store`, `at`.
enum WatchEventHeader {
    private enum Keys: String, CodingKey { case version, type, store, at }

    /// Writes the header into the event's object (the event's own keys go into the same object).
    static func encode(to encoder: any Encoder, type: String, store: String, at: String) throws {
        var c = encoder.container(keyedBy: Keys.self)
        try c.encode(1, forKey: .version)
        try c.encode(type, forKey: .type)
        try c.encode(store, forKey: .store)
        try c.encode(at, forKey: .at)
    }
}

/// The time fields of events and log lines.
public enum WatchTime {
    /// Unix milliseconds now.
    public static func nowMilliseconds() -> Int64 {
        Int64((Date().timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// ISO 8601 UTC with milliseconds, e.g. `2024-05-01T10:00:00.123Z`.
    public static func iso(_ ms: Int64) -> String {
        ISOTime.string(unixMilliseconds: ms, fractional: true)
    }

    /// ISO 8601 UTC with milliseconds, for now.
    public static func now() -> String { iso(nowMilliseconds()) }

    /// A duration for people: `750ms`, `4.2s`, `5m0s`.
    public static func seconds(_ s: Double) -> String {
        if s < 1 { return "\(Int((s * 1000).rounded()))ms" }
        if s < 60 { return "\((s * 10).rounded() / 10)s" }
        let whole = Int(s.rounded())
        return "\(whole / 60)m\(whole % 60)s"
    }
}

/// A change that arrived from the cloud: one row of the import's history.
public struct ImportedChange: Sendable, Encodable, Equatable {
    /// The table.
    public var entity: String
    /// The primary key values in key order (a blob is `{"$blob": "HEX"}`), as `storectl history` gives `pk`.
    public var key: [KeyValue]
    /// `insert`, `update` or `delete`.
    public var op: String
    /// The history seq of the change.
    public var seq: Int64

    public init(entity: String, key: [KeyValue], op: String, seq: Int64) {
        self.entity = entity
        self.key = key
        self.op = op
        self.seq = seq
    }

    /// One primary-key value, as JSON.
    public struct KeyValue: Sendable, Encodable, Equatable {
        public var value: Value
        public init(_ value: Value) { self.value = value }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.singleValueContainer()
            switch value {
            case .null: try c.encodeNil()
            case .integer(let v): try c.encode(v)
            case .real(let d): try c.encode(d)
            case .text(let s): try c.encode(s)
            case .textBytes(let bytes): try c.encode(["$text": Hex.string(bytes)])
            case .blob(let bytes): try c.encode(["$blob": Hex.string(bytes)])
            }
        }
    }
}

/// `import`: changes from other devices were applied to the store (`NSPersistentStoreRemoteChange`).
public struct ImportEvent: Sendable, Encodable {
    static let type = "import"
    public var store: String
    public var at: String
    /// The author of the import's history rows: `cloud-import`.
    public var author: String
    /// The history token after the import: `storectl history --after` a token before it lists these changes.
    public var token: Int64
    /// The history transaction of the import.
    public var transaction: Int64?
    /// The server change token the import reached.
    public var serverToken: String?
    /// How many rows changed.
    public var count: Int
    /// The tables that changed, sorted.
    public var entities: [String]
    /// The changes, in history order; at most `WatchOptions.maxChangesPerEvent` of them.
    public var changes: [ImportedChange]
    /// Whether `changes` was cut short (`count` is the whole number).
    public var changesTruncated: Bool
    /// Records applied (inserted or updated) and local rows deleted by the import.
    public var applied: Int
    public var deleted: Int

    enum CodingKeys: String, CodingKey {
        case author, token, transaction, count, entities, changes, applied, deleted
        case serverToken = "server_token"
        case changesTruncated = "changes_truncated"
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try WatchEventHeader.encode(to: encoder, type: Self.type, store: store, at: at)
        try c.encode(author, forKey: .author)
        try c.encode(token, forKey: .token)
        try c.encode(transaction, forKey: .transaction)
        try c.encode(serverToken, forKey: .serverToken)
        try c.encode(count, forKey: .count)
        try c.encode(entities, forKey: .entities)
        try c.encode(changes, forKey: .changes)
        try c.encode(changesTruncated, forKey: .changesTruncated)
        try c.encode(applied, forKey: .applied)
        try c.encode(deleted, forKey: .deleted)
    }
}

/// `export`: local changes were saved to the cloud.
public struct ExportEvent: Sendable, Encodable {
    static let type = "export"
    public var store: String
    public var at: String
    public var saved: Int
    public var deleted: Int
    public var conflictsResolved: Int
    public var baseline: Bool
    /// The export token (a history seq) after the export.
    public var token: Int64

    enum CodingKeys: String, CodingKey {
        case saved, deleted, baseline, token
        case conflictsResolved = "conflicts_resolved"
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try WatchEventHeader.encode(to: encoder, type: Self.type, store: store, at: at)
        try c.encode(saved, forKey: .saved)
        try c.encode(deleted, forKey: .deleted)
        try c.encode(conflictsResolved, forKey: .conflictsResolved)
        try c.encode(baseline, forKey: .baseline)
        try c.encode(token, forKey: .token)
    }
}

/// An error as scripts see it: the body of storectl's error documents (`{"error": {...}}`, docs/json.md).
public struct WatchErrorBody: Sendable, Codable, Equatable {
    /// The exit code the error would give (`sysexits.h`).
    public var code: Int32
    /// The exit code's class: `temporary`, `unavailable`, `config`, ... (`ExitCode.kind`).
    public var kind: String
    public var message: String
    public var hint: String?
    public var store: String?
    /// The account status, when the error is about the account.
    public var status: String?
    /// The place in a file, when the error is about one (`config.yaml:12:5`).
    public var location: String?

    public init(code: Int32, kind: String, message: String, hint: String?, store: String?, status: String? = nil,
                location: String? = nil)
    {
        self.code = code
        self.kind = kind
        self.message = message
        self.hint = hint
        self.store = store
        self.status = status
        self.location = location
    }

    /// Describes `error` (secrets never appear in storectl's error messages).
    public init(_ error: any Error, store: String?) {
        if let diagnosed = error as? any DiagnosedError {
            self.init(code: diagnosed.exitCode.rawValue, kind: diagnosed.exitCode.kind, message: diagnosed.summary,
                      hint: diagnosed.hint, store: diagnosed.store ?? store, status: diagnosed.accountStatus,
                      location: diagnosed.location)
        } else {
            self.init(code: ExitCode.software.rawValue, kind: ExitCode.software.kind, message: "internal: \(error)",
                      hint: "this is a bug in storectl; please report it with the command you ran", store: store)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(code, forKey: .code)
        try c.encode(kind, forKey: .kind)
        try c.encode(message, forKey: .message)
        try c.encode(hint, forKey: .hint)
        try c.encode(store, forKey: .store)
        try c.encode(status, forKey: .status)
        try c.encode(location, forKey: .location)
    }
}

/// `error`: a sync round failed. A `retry` event follows unless the watcher is stopping or runs `--once`.
public struct ErrorEvent: Sendable, Encodable {
    static let type = "error"
    public var store: String
    public var at: String
    public var error: WatchErrorBody

    enum CodingKeys: String, CodingKey { case error }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try WatchEventHeader.encode(to: encoder, type: Self.type, store: store, at: at)
        try c.encode(error, forKey: .error)
    }
}

/// `retry`: the next attempt after a failure, with its delay (exponential, with jitter, up to a cap).
public struct RetryEvent: Sendable, Encodable {
    static let type = "retry"
    public var store: String
    public var at: String
    /// 1 for the first retry after a success, then 2, 3, ...
    public var attempt: Int
    public var delaySeconds: Double
    public var nextAttemptAt: String
    /// Why: the error's message.
    public var reason: String
    /// The error's exit code.
    public var code: Int32

    enum CodingKeys: String, CodingKey {
        case attempt, reason, code
        case delaySeconds = "delay_seconds"
        case nextAttemptAt = "next_attempt_at"
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try WatchEventHeader.encode(to: encoder, type: Self.type, store: store, at: at)
        try c.encode(attempt, forKey: .attempt)
        try c.encode((delaySeconds * 1000).rounded() / 1000, forKey: .delaySeconds)
        try c.encode(nextAttemptAt, forKey: .nextAttemptAt)
        try c.encode(reason, forKey: .reason)
        try c.encode(code, forKey: .code)
    }
}

/// `mode`: the store's mode changed (another process ran `storectl mode`), and the watcher follows it.
public struct ModeEvent: Sendable, Encodable {
    static let type = "mode"
    public var store: String
    public var at: String
    /// `local` or `cloud` (or `uninitialised` when the store file is missing or was never initialised).
    public var mode: String
    /// The mode before.
    public var previous: String?

    enum CodingKeys: String, CodingKey { case mode, previous }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try WatchEventHeader.encode(to: encoder, type: Self.type, store: store, at: at)
        try c.encode(mode, forKey: .mode)
        try c.encode(previous, forKey: .previous)
    }
}
