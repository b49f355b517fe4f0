import StoreBase

/// A whole config file, decoded, expanded, defaulted and validated.
///
/// The domain layers never see this type or YAML: the `Storectl` library turns it into their own options.
public struct Config: Sendable, Equatable {
    /// The schema version (`version: 1`).
    public var version: Int
    /// The stores whose sections are valid, in file order.
    public var stores: [StoreSettings]
    /// The stores whose own sections are wrong (an unset variable, a bad URL, an unknown key), in file order. A
    /// command on one of them fails with its error; every other store still works.
    public var problems: [StoreConfigProblem]
    /// The names of every store of the file, valid or not, in file order.
    public var storeNames: [String]
    /// The absolute path of the file the config came from.
    public var path: String
    /// Problems that are not errors (a literal secret in a file others can read). The CLI prints them to stderr
    /// as `warning: ...`.
    public var warnings: [String]

    /// - Parameters:
    ///   - problems: the stores whose sections are wrong.
    ///   - storeNames: every store's name in file order; nil: the valid stores', then the others'.
    public init(version: Int, stores: [StoreSettings], path: String, warnings: [String] = [],
                problems: [StoreConfigProblem] = [], storeNames: [String]? = nil)
    {
        self.version = version
        self.stores = stores
        self.path = path
        self.warnings = warnings
        self.problems = problems
        self.storeNames = storeNames ?? (stores.map(\.name) + problems.map(\.store))
    }

    /// The folder that relative paths resolve against: the config file's own folder.
    public var directory: String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        let dir = String(path[..<slash])
        return dir.isEmpty ? "/" : dir
    }

    /// The problem of the store named `name`, when its section is wrong.
    public func problem(of name: String) -> StoreConfigProblem? {
        problems.first { $0.store == name }
    }

    /// The store named `name`, or the only store when `name` is nil.
    /// - Throws: `StoreError` (exit 64) when the name is unknown or when there are several stores and no name;
    ///   the store's `ConfigError` (exit 78) when its section is wrong.
    public func store(named name: String?) throws -> StoreSettings {
        if let name {
            if let s = stores.first(where: { $0.name == name }) { return s }
            if let problem = problem(of: name) { throw problem.error }
            let hint = Suggest.closest(name, in: storeNames).map { "did you mean '\($0)'?" }
                ?? "the stores in \(path) are: \(storeNames.joined(separator: ", "))"
            throw StoreError(.usage, "no store named '\(name)' in \(path)", hint: hint)
        }
        if storeNames.count == 1 {
            if let only = stores.first { return only }
            if let problem = problems.first { throw problem.error }
        }
        throw StoreError(.usage, "\(path) has \(storeNames.count) stores; choose one with --store",
                         hint: "the stores are: \(storeNames.joined(separator: ", "))")
    }
}

/// A store whose own section of the config is wrong: commands on it fail with `error`, the others work.
public struct StoreConfigProblem: Sendable, Equatable {
    /// The store's name (its key under `stores:`).
    public var store: String
    /// What is wrong, with `file:line:column` and the key path.
    public var error: ConfigError

    public init(store: String, error: ConfigError) {
        self.store = store
        self.error = error
    }
}

/// `local` or `cloud`.
public enum StoreMode: String, Sendable, Equatable, CaseIterable, Codable {
    case local
    case cloud
}

/// How a conflict between a local change and a cloud change is resolved.
public enum MergePolicySetting: String, Sendable, Equatable, CaseIterable, Codable {
    case error
    case serverWins = "server-wins"
    case localWins = "local-wins"
    case propertyServerWins = "property-server-wins"
    case propertyLocalWins = "property-local-wins"
}

/// Which row survives among duplicates of a `unique:` key.
public enum KeepRule: Sendable, Equatable, CustomStringConvertible {
    /// The row with the greatest value in the column.
    case newest(String)
    /// The row with the least value in the column.
    case oldest(String)
    /// The row with the lowest record name.
    case first

    /// Parses `newest(col)`, `oldest(col)` or `first`.
    public init?(_ text: String) {
        let t = text.trimmingSpaces()
        if t == "first" { self = .first; return }
        for (prefix, make) in [("newest(", KeepRule.newest), ("oldest(", KeepRule.oldest)] as [(String, (String) -> KeepRule)] {
            if t.hasPrefix(prefix), t.hasSuffix(")") {
                let col = t.dropFirst(prefix.count).dropLast().trimmingSpaces()
                guard !col.isEmpty else { return nil }
                self = make(col)
                return
            }
        }
        return nil
    }

    public var description: String {
        switch self {
        case .newest(let c): return "newest(\(c))"
        case .oldest(let c): return "oldest(\(c))"
        case .first: return "first"
        }
    }
}

/// A secret taken from the config. It never prints itself.
public struct Secret: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The secret itself. Pass it only to the code that needs it; never print it.
    public let value: String
    /// Whether the config holds the value literally rather than through a `${VAR}` reference.
    public let isLiteral: Bool
    /// The reference the value comes from, as written (`${NAME}`), when the whole value is one reference; a
    /// default in it is shown as `${NAME:-<redacted>}`. The name of a variable is no secret: `config get` prints
    /// this, so that a user can see which variable to check. Nil for anything else.
    public let reference: String?

    public init(value: String, isLiteral: Bool, reference: String? = nil) {
        self.value = value
        self.isLiteral = isLiteral
        self.reference = reference
    }

    /// The reference a secret's source text is, shown without any value: `${NAME}` for `${NAME}` (quoted or not),
    /// `${NAME:-<redacted>}` for `${NAME:-default}`; nil when the text is not exactly one reference (literal
    /// text around it would be part of the secret).
    public static func reference(writtenAs source: String) -> String? {
        var text = Substring(source)
        while text.first == " " { text = text.dropFirst() }
        while text.last == " " { text = text.dropLast() }
        if text.count >= 2, let first = text.first, first == "\"" || first == "'", text.last == first {
            text = text.dropFirst().dropLast()
        }
        guard text.hasPrefix("${"), text.hasSuffix("}") else { return nil }
        let body = text.dropFirst(2).dropLast()
        guard !body.contains("}"), !body.contains("$") else { return nil }
        let name: Substring
        let hasDefault: Bool
        let chars = Array(body)
        if let dash = chars.indices.dropLast().first(where: { chars[$0] == ":" && chars[$0 + 1] == "-" }) {
            name = body.prefix(dash)
            hasDefault = true
        } else {
            name = body
            hasDefault = false
        }
        guard let first = name.first, first == "_" || (first.isASCII && first.isLetter),
              name.allSatisfy({ $0 == "_" || ($0.isASCII && ($0.isLetter || $0.isNumber)) })
        else { return nil }
        return "${" + name + (hasDefault ? ":-<redacted>" : "") + "}"
    }

    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }

    /// Two secrets are equal when their values and where they come from (literal or not) are; how a reference was
    /// written does not count.
    public static func == (a: Secret, b: Secret) -> Bool { a.value == b.value && a.isLiteral == b.isLiteral }
}

/// `stores.<name>.history`.
public struct HistorySettings: Sendable, Equatable {
    /// Must stay true; false is refused (exit 78).
    public var tracking: Bool = true
    /// The author of storectl's own writes.
    public var author: String = "storectl"
    /// How long history is kept, if limited.
    public var retention: DurationSpec?

    public init(tracking: Bool = true, author: String = "storectl", retention: DurationSpec? = nil) {
        self.tracking = tracking
        self.author = author
        self.retention = retention
    }
}

/// `stores.<name>.cloud`.
public struct CloudSettings: Sendable, Equatable {
    /// The container id, e.g. `iCloud.com.example.notes`.
    public var container: String
    /// `file:PATH` (relative to the config's folder) or `postgres://...`.
    public var url: String
    /// PostgreSQL only: a hot standby of the server at `url`, which serves the change feed when it has replayed
    /// far enough (`postgres://...`).
    public var replicaURL: String?
    /// File backend only: create the container on first use.
    public var createIfMissing: Bool = false
    /// The zone the store's records live in.
    public var zone: String = "default"
    /// The account id.
    public var account: String?
    /// The account's secret.
    public var secret: Secret?
    /// The passphrase the account's devices share for the zone's encrypted fields (`entities.<table>.encrypted`).
    public var encryptionKey: Secret?
    /// How conflicts are resolved.
    public var mergePolicy: MergePolicySetting = .propertyLocalWins
    /// An export that would delete more than this fraction of the zone stops (mass-delete breaker)...
    public var maxDeleteFraction: Double = 0.5
    /// ... when it would also delete more than this many records (a handful of deletes never trips it).
    public var maxDeleteCount: Int = 100
    /// The largest record, in bytes of its fields as JSON, that an export sends or an import applies.
    public var maxRecordSize: Int = 1_048_576
    /// `storectl watch`: whether imports that changed something are announced (the `import` events and the
    /// `on_remote_change` command).
    public var remoteChangeNotifications: Bool = true
    /// `storectl watch`: a shell command run after each import that changed something.
    public var onRemoteChange: String?
    /// How long `on_remote_change` may run before it is stopped.
    public var onRemoteChangeTimeout = DurationSpec.seconds(30)

    public init(container: String, url: String, createIfMissing: Bool = false, zone: String = "default",
                account: String? = nil, secret: Secret? = nil, mergePolicy: MergePolicySetting = .propertyLocalWins,
                maxDeleteFraction: Double = 0.5)
    {
        self.container = container
        self.url = url
        self.createIfMissing = createIfMissing
        self.zone = zone
        self.account = account
        self.secret = secret
        self.mergePolicy = mergePolicy
        self.maxDeleteFraction = maxDeleteFraction
    }
}

/// `stores.<name>.entities.<table>`.
public struct EntitySettings: Sendable, Equatable {
    /// The table name.
    public var name: String
    /// A natural key: duplicates of it are merged after imports.
    public var unique: [String]?
    /// Which duplicate survives.
    public var keep: KeepRule?
    /// The columns recorded in history when a row is deleted (default: the primary key).
    public var tombstone: [String]?
    /// The columns whose values are encrypted on the device: the server only ever holds their ciphertext.
    public var encrypted: [String]?

    public init(name: String, unique: [String]? = nil, keep: KeepRule? = nil, tombstone: [String]? = nil) {
        self.name = name
        self.unique = unique
        self.keep = keep
        self.tombstone = tombstone
    }
}

/// `stores.<name>.seed`.
public struct SeedSettings: Sendable, Equatable {
    /// The seed's name; its marker in the cloud is named after it.
    public var name: String
    /// An SQL file of INSERT statements, resolved against the config's folder.
    public var sql: String?
    /// Rows given in YAML: table name -> rows, each a column -> scalar text map (in file order).
    public var rows: [(table: String, rows: [[(column: String, value: String?)]])]

    public init(name: String, sql: String? = nil, rows: [(table: String, rows: [[(column: String, value: String?)]])] = []) {
        self.name = name
        self.sql = sql
        self.rows = rows
    }

    public static func == (a: SeedSettings, b: SeedSettings) -> Bool {
        guard a.name == b.name, a.sql == b.sql, a.rows.count == b.rows.count else { return false }
        for (x, y) in zip(a.rows, b.rows) {
            guard x.table == y.table, x.rows.count == y.rows.count else { return false }
            for (r1, r2) in zip(x.rows, y.rows) {
                guard r1.count == r2.count else { return false }
                for (c1, c2) in zip(r1, r2) where c1.column != c2.column || c1.value != c2.value { return false }
            }
        }
        return true
    }
}

/// `stores.<name>`: one store.
public struct StoreSettings: Sendable, Equatable {
    /// The store's name (its key under `stores:`), used by --store.
    public var name: String
    /// The store file's absolute path.
    public var path: String
    /// The schema SQL file's absolute path, if any.
    public var schema: String?
    /// The mode the config asks for.
    public var mode: StoreMode = .local
    public var history = HistorySettings()
    public var cloud: CloudSettings?
    /// Per-table settings, in file order. When non-empty, only these tables are tracked.
    public var entities: [EntitySettings] = []
    public var seed: SeedSettings?

    public init(name: String, path: String, schema: String? = nil, mode: StoreMode = .local,
                history: HistorySettings = HistorySettings(), cloud: CloudSettings? = nil,
                entities: [EntitySettings] = [], seed: SeedSettings? = nil)
    {
        self.name = name
        self.path = path
        self.schema = schema
        self.mode = mode
        self.history = history
        self.cloud = cloud
        self.entities = entities
        self.seed = seed
    }
}

import FoundationEssentials
#if canImport(Glibc)
import Glibc
#endif
